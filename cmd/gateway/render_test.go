package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

func runRen(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	code = runRender(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRenderLines(t *testing.T) {
	dir := qwen3Dir(t)
	tk, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(tmpl, []byte("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := strings.Join([]string{
		`{"messages":[{"role":"user","content":"Hello"}]}`,
		`not json`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[]}`,
		`{"messages":[{"role":"user","content":"x"}],"chat_template":"{{ 1 }}"}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"function":{"name":"f"}}]}`,
	}, "\r\n") + "\n"
	for _, tt := range []struct {
		name string
		args []string
		want []string // prompt, or "error: message"
	}{
		{"model template", []string{"--model-path", dir}, []string{
			"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
			"error: invalid JSON body: syntax error at offset 2",
			"error: `tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
			"error: Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.",
			"", // rendered with tools (checked for being a prompt only)
		}},
		{"template file, no tool parser", []string{"--model-path", dir, "--chat-template", tmpl, "--no-tool-call-parser"}, []string{
			"<user>Hello",
			"error: invalid JSON body: syntax error at offset 2",
			"error: `tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
			"error: Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.",
			`error: "auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`,
		}},
		{"trusted request templates", []string{"--model-path", dir, "--trust-request-chat-template"}, []string{
			"<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
			"error: invalid JSON body: syntax error at offset 2",
			"error: `tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
			"1",
			"",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runRen(t, in, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d lines, want %d: %q", len(lines), len(tt.want), out)
			}
			for i, l := range lines {
				var got struct {
					Prompt   *string  `json:"prompt"`
					TokenIDs []uint32 `json:"token_ids"`
					Error    *struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(l), &got); err != nil {
					t.Fatalf("line %d %q: %v", i, l, err)
				}
				want := tt.want[i]
				if msg, ok := strings.CutPrefix(want, "error: "); ok {
					if got.Error == nil || got.Error.Message != msg {
						t.Errorf("line %d: got %s, want error %q", i, l, msg)
					}
					continue
				}
				if got.Prompt == nil {
					t.Fatalf("line %d: got %s, want a prompt", i, l)
				}
				if want != "" && *got.Prompt != want {
					t.Errorf("line %d: got prompt %q, want %q", i, *got.Prompt, want)
				}
				ids, _ := tk.Encode(nil, *got.Prompt, false)
				if d := cmp.Diff(ids, got.TokenIDs); d != "" {
					t.Errorf("line %d token ids (-want +got):\n%s", i, d)
				}
			}
		})
	}
}

func TestRenderUsage(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		code int
	}{
		{"no model", nil, 2},
		{"bad dir", []string{"--model-path", filepath.Join(t.TempDir(), "nope")}, 2},
		{"bad format", []string{"--model-path", qwen3Dir(t), "--chat-template-content-format", "xml"}, 2},
		{"bad kwargs", []string{"--model-path", qwen3Dir(t), "--default-chat-template-kwargs", "[1]"}, 2},
		{"extra argument", []string{"--model-path", qwen3Dir(t), "x"}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, _, _ := runRen(t, "", tt.args...); code != tt.code {
				t.Errorf("got exit %d, want %d", code, tt.code)
			}
		})
	}
}

// TestRenderMedia: `gateway render` on a multimodal model directory prints the prompt with the
// template's placeholders, how many ids are exact, and each item; a text model and
// --multimodal off refuse media parts.
func TestRenderMedia(t *testing.T) {
	dir := testutil.VLModelDir(t)
	line := `{"messages":[{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"},"uuid":"pic-1"}]}]}` + "\n"
	// A 1×1 PNG: smart_resize brings it to 56×56, 4 placeholder tokens.
	png1 := `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}]}]}` + "\n"
	if _, out, _ := runRen(t, png1, "--model-path", dir); !strings.Contains(out, `"width":1,"height":1,"placeholder_tokens":4,`) {
		t.Errorf("data: image: %s", out)
	}
	code, out, errs := runRen(t, line, "--model-path", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Prompt      string   `json:"prompt"`
		TokenIDs    []uint32 `json:"token_ids"`
		ExactTokens int      `json:"exact_tokens"`
		Media       []struct {
			Modality      string `json:"modality"`
			PlaceholderAt int    `json:"placeholder_at"`
			UUID          string `json:"uuid"`
			Hash          string `json:"hash"`
		} `json:"media"`
		Note string `json:"note"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(got.Prompt, "Look:<|vision_start|><|image_pad|><|vision_end|>") || len(got.Media) != 1 || got.Media[0].UUID != "pic-1" ||
		got.Media[0].Modality != "image" || got.ExactTokens != got.Media[0].PlaceholderAt || got.TokenIDs[got.ExactTokens] != 151655 || got.Note == "" {
		t.Fatalf("got %s", out)
	}
	for _, args := range [][]string{{"--model-path", dir, "--multimodal", "off"}, {"--model-path", qwen3Dir(t)}} {
		_, out, _ = runRen(t, line, args...)
		if !strings.Contains(out, `needs a multimodal model; this model takes text only`) {
			t.Errorf("%v: %s", args, out)
		}
	}
	if code, _, _ := runRen(t, line, "--model-path", dir, "--limit-mm-per-prompt", "[1]"); code != 2 {
		t.Errorf("a bad --limit-mm-per-prompt: exit %d, want 2", code)
	}
}

// TestRenderMediaExpanded: for an image the gateway can count (a 1×1 PNG: 4 placeholder
// tokens after smart_resize) `gateway render` prints the engine's ids, <|image_pad|> repeated 4
// times, and with the item's uuid the whole prompt is exact; without it exactness stops at the
// image, saying why.
func TestRenderMediaExpanded(t *testing.T) {
	dir := testutil.VLModelDir(t)
	const png1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	for _, tt := range []struct {
		uuid, note string
		whole      bool
	}{{`,"uuid":"p1"`, "every id is the engine's", true}, {"", "no uuid", false}} {
		line := `{"messages":[{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image_url","image_url":{"url":"` + png1 + `"}` + tt.uuid + `},{"type":"text","text":"now."}]}]}` + "\n"
		_, out, _ := runRen(t, line, "--model-path", dir)
		var got struct {
			TokenIDs    []uint32 `json:"token_ids"`
			ExactTokens int      `json:"exact_tokens"`
			Media       []struct {
				At       int  `json:"placeholder_at"`
				Length   int  `json:"placeholder_length"`
				Expanded bool `json:"expanded"`
			} `json:"media"`
			Note string `json:"note"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Media) != 1 {
			t.Fatalf("%v: %s", err, out)
		}
		m := got.Media[0]
		pads := 0
		for _, id := range got.TokenIDs {
			if id == 151655 {
				pads++
			}
		}
		exact := m.At
		if tt.whole {
			exact = len(got.TokenIDs)
		}
		if pads != 4 || m.Length != 4 || !m.Expanded || got.TokenIDs[m.At] != 151655 || got.TokenIDs[m.At+3] != 151655 || got.ExactTokens != exact || !strings.Contains(got.Note, tt.note) {
			t.Errorf("uuid %q: got %s; want 4 pads from placeholder_at, exact_tokens %d, a note saying %q", tt.uuid, out, exact, tt.note)
		}
	}
}
