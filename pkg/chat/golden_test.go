package chat

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// goldenNow is the instant tools/chat/gen.py renders strftime_now with.
var goldenNow = time.Date(2026, 7, 26, 9, 5, 3, 0, time.Local)

// knownDivergences are the (template, case) pairs where ardanlabs/jinja cannot give
// Python's bytes, with the reason. Every other golden case must match exactly, and a pair
// listed here that starts matching fails the test too, so the list stays true.
var knownDivergences = map[string]string{}

type goldenCase struct {
	ID     string   `json:"id"`
	Format string   `json:"format"`
	Prompt *string  `json:"prompt"`
	IDs    []uint32 `json:"ids"`
	Error  string   `json:"error"`
	Exact  bool     `json:"exact"`
}

type templateSpec struct {
	Name          string            `json:"name"`
	Entry         string            `json:"entry"`
	Tokenizer     string            `json:"tokenizer"`
	SpecialTokens orderedStringsMap `json:"special_tokens"`
}

// orderedStringsMap is a JSON object of strings decoded in document order.
type orderedStringsMap []special

func (o *orderedStringsMap) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for _, k := range orderedKeys(b) {
		*o = append(*o, special{name: k, value: m[k]})
	}
	return nil
}

func repoPath(parts ...string) string {
	return filepath.Join(append([]string{"..", ".."}, parts...)...)
}

// goldenRenderers builds one Renderer per golden template, as the golden files were made.
func goldenRenderers(t testing.TB) (names []string, renderers map[string]*Renderer) {
	t.Helper()
	b, err := os.ReadFile(repoPath("tools", "chat", "templates.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Local  []templateSpec `json:"local"`
		Ollama []templateSpec `json:"ollama"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	renderers = map[string]*Renderer{}
	toks := map[string]*tokenizer.Tokenizer{}
	tok := func(fam string) *tokenizer.Tokenizer {
		if toks[fam] == nil {
			tk, err := tokenizer.LoadDir(repoPath(".cache", "tokenizers", fam))
			if err != nil {
				t.Fatalf("tokenizer %s missing (%v): run `make testdata`", fam, err)
			}
			toks[fam] = tk
		}
		return toks[fam]
	}
	opts := func(fam string) Options {
		return Options{Tokenizer: tok(fam), Now: func() time.Time { return goldenNow }}
	}
	for _, s := range spec.Local {
		r, err := New(repoPath(".cache", "tokenizers", s.Tokenizer), opts(s.Tokenizer))
		if err != nil {
			t.Fatal(err)
		}
		names, renderers[s.Name] = append(names, s.Name), r
	}
	for _, s := range spec.Ollama {
		src, err := os.ReadFile(repoPath(".cache", "templates", s.Name+".jinja"))
		if err != nil {
			t.Fatalf("template %s missing (%v): run `make testdata`", s.Name, err)
		}
		r, err := newRenderer(&modelFiles{templates: map[string]string{"default": string(src)}, specials: s.SpecialTokens}, opts(s.Tokenizer))
		if err != nil {
			t.Fatal(err)
		}
		names, renderers[s.Name] = append(names, s.Name), r
	}
	return names, renderers
}

type conversationCase struct {
	ID      string          `json:"id"`
	Request json.RawMessage `json:"request"`
}

func readConversations(t testing.TB) []conversationCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "conversations.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []conversationCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c conversationCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func readGolden(t testing.TB, name string) map[string]goldenCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]goldenCase{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var g goldenCase
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out[g.ID] = g
	}
	return out
}

// renderBody parses and renders one request body; a failure at either step is the error.
func renderBody(r *Renderer, body []byte) (Result, *openai.Error) {
	req, err := openai.ParseChat(body, openai.Limits{})
	if err != nil {
		return Result{}, err
	}
	return r.Render(req)
}

// TestGolden renders every test conversation with every golden template and compares the
// prompt and the token ids byte for byte with the reference (tools/chat/gen.py: Jinja2 as
// transformers sets it up, vLLM's request rules, ids from the Hugging Face tokenizers).
func TestGolden(t *testing.T) {
	names, renderers := goldenRenderers(t)
	convs := readConversations(t)
	seenDivergent := map[string]bool{}
	var table []string
	for _, name := range names {
		golden := readGolden(t, name)
		r := renderers[name]
		exact, total := 0, 0
		t.Run(name, func(t *testing.T) {
			for _, c := range convs {
				g, ok := golden[c.ID]
				if !ok {
					t.Fatalf("%s: no golden case %s: regenerate with tools/chat/gen.py", name, c.ID)
				}
				key := name + "/" + c.ID
				total++
				got, err := renderBody(r, c.Request)
				diff := goldenDiff(g, got, err)
				if reason, known := knownDivergences[key]; known {
					seenDivergent[key] = true
					if diff == "" {
						t.Errorf("%s: listed as divergent (%s) but now matches: remove it from knownDivergences", key, reason)
					}
					continue
				}
				if diff != "" {
					t.Errorf("%s: %s", key, diff)
					continue
				}
				exact++
			}
			if f := DetectContentFormat(r.defaultT.source); f != firstFormat(golden) {
				t.Errorf("%s: content format: got %s, want %s", name, f, firstFormat(golden))
			}
		})
		table = append(table, fmt.Sprintf("%-16s %2d/%2d exact", name, exact, total))
	}
	for k := range knownDivergences {
		if !seenDivergent[k] {
			t.Errorf("knownDivergences lists %s, which is not a golden case", k)
		}
	}
	sort.Strings(table)
	t.Logf("golden results (exact/total, known divergences excluded from exact):\n%s", strings.Join(table, "\n"))
}

func firstFormat(g map[string]goldenCase) string {
	for _, c := range g {
		return c.Format
	}
	return ""
}

// goldenDiff says how a render differs from its golden case ("" when it matches).
func goldenDiff(g goldenCase, got Result, err *openai.Error) string {
	if g.Prompt == nil {
		switch {
		case err == nil:
			return fmt.Sprintf("rendered %q, want a 400 %q", clip(got.Prompt), g.Error)
		case err.Status != 400:
			return fmt.Sprintf("got status %d, want 400", err.Status)
		case g.Exact && err.Message != g.Error:
			return fmt.Sprintf("got error %q, want %q", err.Message, g.Error)
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("got error %q, want a prompt", err.Message)
	}
	if got.Prompt != *g.Prompt {
		i := 0
		for i < len(got.Prompt) && i < len(*g.Prompt) && got.Prompt[i] == (*g.Prompt)[i] {
			i++
		}
		return fmt.Sprintf("prompt differs at byte %d: got %q, want %q", i, clip(got.Prompt[i:]), clip((*g.Prompt)[i:]))
	}
	if d := cmp.Diff(g.IDs, got.TokenIDs); d != "" {
		return "token ids (-want +got):\n" + d
	}
	return ""
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// TestGoldenReference checks that the committed golden files are what the reference
// produces now (tools/chat/gen.py --check: Debian's python3-jinja2, no Node needed), so the
// goldens and the reference rules cannot drift apart.
func TestGoldenReference(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Python reference")
	}
	out, err := exec.Command("/usr/bin/python3", repoPath("tools", "chat", "gen.py"), "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("tools/chat/gen.py --check: %v\n%s(python3-jinja2 comes from `make deps-test`; regenerate goldens with /usr/bin/python3 tools/chat/gen.py)", err, out)
	}
}
