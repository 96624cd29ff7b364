package chat

import (
	"os"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/openai"
)

// FuzzRender feeds arbitrary request bodies through real templates (Qwen3's, with tools,
// and Gemma 3's openai-format one) and through Harmony (gpt-oss): a render never panics,
// takes bounded time and gives
// either a 400 or a bounded prompt with decodable ids.
func FuzzRender(f *testing.F) {
	convs := readConversations(f)
	for _, c := range convs {
		f.Add([]byte(c.Request))
	}
	tk := loadTok(f, "qwen3")
	var rs []*Renderer
	for _, fam := range []string{"qwen3", "gemma3"} {
		r, err := New(repoPath(".cache", "tokenizers", fam), Options{Tokenizer: tk, MaxPromptBytes: 1 << 20})
		if err != nil {
			f.Fatal(err)
		}
		rs = append(rs, r)
	}
	gtk := loadTok(f, "gptoss")
	h, err := newRenderer(&modelFiles{}, Options{Tokenizer: gtk, ModelType: "gpt_oss", MaxPromptBytes: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, perr := openai.ParseChat(body, openai.Limits{MaxMessages: 256})
		if perr != nil {
			return
		}
		for _, r := range append(rs, h) {
			start := time.Now()
			res, err := r.Render(req)
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("render took %v", d)
			}
			if err != nil {
				if err.Status != 400 {
					t.Fatalf("status %d: %s", err.Status, err.Message)
				}
				continue
			}
			if len(res.Prompt) > 1<<20 {
				t.Fatalf("prompt of %d bytes passed the bound", len(res.Prompt))
			}
			// Decoding gives the prompt up to the tokenizer's NFC normalization.
			if _, derr := r.tok.Decode(res.TokenIDs, false); derr != nil || len(res.TokenIDs) == 0 && res.Prompt != "" {
				t.Fatalf("ids %v do not decode: %v", res.TokenIDs, derr)
			}
		}
	})
}

// FuzzDetectContentFormat: any template source gives an answer without panicking.
func FuzzDetectContentFormat(f *testing.F) {
	for _, name := range []string{"qwen2.5", "llama3.1-tools", "llama3.2", "qwen3-coder"} {
		if b, err := os.ReadFile(repoPath(".cache", "templates", name+".jinja")); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("{% for m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}")
	f.Fuzz(func(t *testing.T, src string) {
		if got := DetectContentFormat(src); got != FormatString && got != FormatOpenAI {
			t.Fatalf("got %q", got)
		}
	})
}
