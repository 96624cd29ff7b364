package chat

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

func gemmaRenderer(t testing.TB) *Renderer {
	t.Helper()
	r, err := New(testutil.Gemma3ModelDir(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.gemma == nil {
		t.Fatal("no Gemma 3 image expansion for the Gemma 3 model dir")
	}
	return r
}

// TestGemma3Expand: Gemma 3 image requests render and expand to the ids vLLM runs and the
// placeholder ranges it keys blocks by, as tools/multimodal/mm_tokens.py computes them from
// the reference tokenizer and vLLM's rules (the full image sequence in place of each
// <start_of_image>, the newline merges over the whole prompt, the ranges found in the split
// sequence): a leading newline merged into the turn's, a system prefix's "\n\n" merged into
// "\n\n\n\n", adjacent images overlapping by one token.
func TestGemma3Expand(t *testing.T) {
	b, err := os.ReadFile("testdata/mm_tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Gemma struct {
			Sequence []uint32 `json:"sequence"`
			Cases    []struct {
				Name     string          `json:"name"`
				Messages json.RawMessage `json:"messages"`
				Prompt   string          `json:"prompt"`
				IDs      []uint32        `json:"ids"`
				Spans    [][2]int        `json:"spans"`
			} `json:"cases"`
		} `json:"gemma3"`
	}
	if err := json.Unmarshal(b, &golden); err != nil || len(golden.Gemma.Cases) < 5 {
		t.Fatalf("%d cases, %v", len(golden.Gemma.Cases), err)
	}
	r := gemmaRenderer(t)
	if !slices.Equal(r.gemma.seq, golden.Gemma.Sequence) {
		t.Fatalf("image sequence:\ngot  %v\nwant %v", r.gemma.seq, golden.Gemma.Sequence)
	}
	for _, c := range golden.Gemma.Cases {
		t.Run(c.Name, func(t *testing.T) {
			res, err := r.Render(mustParse(t, `{"messages":`+string(c.Messages)+`}`))
			if err != nil {
				t.Fatal(err.Message)
			}
			if res.Prompt != c.Prompt {
				t.Fatalf("prompt:\ngot  %q\nwant %q", res.Prompt, c.Prompt)
			}
			e := r.Expand(&res, UUIDIdentity)
			if !slices.Equal(e.IDs, c.IDs) {
				t.Fatalf("ids:\ngot  %v\nwant %v", e.IDs, c.IDs)
			}
			var spans [][2]int
			for _, sp := range e.Spans {
				spans = append(spans, [2]int{sp.Offset, sp.Length})
			}
			if !slices.Equal(spans, c.Spans) {
				t.Errorf("spans: got %v, want %v", spans, c.Spans)
			}
			if e.Exact != len(c.IDs) || e.Stop != "" {
				t.Errorf("exact %d (%q), want %d: every image has a uuid", e.Exact, e.Stop, len(c.IDs))
			}
			for k, sp := range e.Spans {
				if sp.Identifier != string(rune('a'+k)) || !sp.Expanded {
					t.Errorf("span %d: %+v, want identifier %q", k, sp, string(rune('a'+k)))
				}
			}
		})
	}
}

// TestGemma3ExpandStops: without a uuid the exact prefix ends where the item's range starts
// (the merged newline before <start_of_image>); an image that vLLM's search would not find
// after the merges (its trailing "\n\n" merged with a following "\n" into "\n\n\n", which
// splits back as "\n" "\n\n") ends it too; with pan and scan the count is unknown, and the
// prefix ends before a newline the engine's replacement could merge into.
func TestGemma3ExpandStops(t *testing.T) {
	r := gemmaRenderer(t)
	res, err := r.Render(mustParse(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}},{"type":"text","text":"Hi"}]}]}`))
	if err != nil {
		t.Fatal(err.Message)
	}
	e := r.Expand(&res, UUIDIdentity)
	if e.Spans[0].Offset != 3 || e.IDs[3] != r.gemma.nl[2] || e.Exact != 3 || !strings.Contains(e.Stop, "no uuid") {
		t.Errorf("no uuid: span %+v, exact %d (%q); want the range and the exact prefix at the merged \\n\\n\\n (3)", e.Spans[0], e.Exact, e.Stop)
	}

	// <start_of_turn>user\n <start_of_image> \n Hi: built as ids, since the template trims
	// text parts.
	item := MediaItem{Modality: "image", Type: "image_url", UUID: "a", HasUUID: true, Tokens: 256}
	raw := Result{TokenIDs: []uint32{2, 105, 2364, r.gemma.nl[0], r.gemma.boi, r.gemma.nl[0], 10979}, Media: []MediaItem{item}, MediaAt: []int{4}}
	e = r.Expand(&raw, UUIDIdentity)
	if e.Exact != 3 || !strings.Contains(e.Stop, "does not find") || e.IDs[3] != r.gemma.nl[2] || e.IDs[len(e.IDs)-2] != r.gemma.nl[2] {
		t.Errorf("unfindable: exact %d (%q), ids %v…%v", e.Exact, e.Stop, e.IDs[:5], e.IDs[len(e.IDs)-3:])
	}

	dir := testutil.Gemma3ModelDir(t)
	if err := os.WriteFile(dir+"/preprocessor_config.json", []byte(`{"do_pan_and_scan": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, perr := New(dir, Options{})
	if perr != nil {
		t.Fatal(perr)
	}
	res, err = ps.Render(mustParse(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"},"uuid":"a"}]}]}`))
	if err != nil {
		t.Fatal(err.Message)
	}
	e = ps.Expand(&res, UUIDIdentity)
	if !slices.Equal(e.IDs, res.TokenIDs) || e.Exact != res.MediaAt[0]-1 || !strings.Contains(e.Stop, "pan and scan") {
		t.Errorf("pan and scan: exact %d (%q), placeholder at %d; want the rendered ids, exact before the turn's newline", e.Exact, e.Stop, res.MediaAt[0])
	}
}
