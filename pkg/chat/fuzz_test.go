package chat

import (
	"math/rand/v2"
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

// FuzzCompileTemplate feeds arbitrary template sources through the source rewrites
// (sourceRewrites and the big variant's, rewriteMacros): they never panic and take bounded time, the whitespace
// rewrite is idempotent (its output leaves the library nothing to trim), and a source the
// library compiles as written still compiles once rewritten.
func FuzzCompileTemplate(f *testing.F) {
	for _, name := range []string{"qwen2.5", "llama3.1-tools", "llama3.2", "qwen3-coder", "granite3.3", "command-r7b", "phi4-mini"} {
		if b, err := os.ReadFile(repoPath(".cache", "templates", name+".jinja")); err == nil {
			f.Add(string(b))
		}
	}
	for _, s := range []string{
		"{% for m in messages %}{{ m.content }}\n{% endfor %}", "a  {%- raw -%}  {{ x }}  {%- endraw -%}  q",
		"{{ 'a' + b ~ c % d - e }}{% set x = a + [1] %}{% for y in x + z if y is not iterable %}{% endfor %}",
		"{% macro f(n) %}{{ f(n - 1) }}{% endmacro %}{{ '%s'|format(f(1)) }}", "a{ \n{%- if y %}{% endif %}{# c #}",
		"{% if a == b and c not in d %}{{ x is eq y }}{{ x is not in(z) }}{{ v|round(-1)|int }}{% endif %}",
	} {
		f.Add(s)
	}
	f.Fuzz(checkRewrites)
}

func checkRewrites(t *testing.T, src string) {
	start := time.Now()
	ws := rewriteWhitespace(prepareSource(src))
	if again := rewriteWhitespace(ws); again != ws {
		t.Fatalf("rewriteWhitespace is not idempotent:\n%q\n%q", ws, again)
	}
	_, libErr := compileRecovered(prepareSource(src))
	_, err := compileTemplate(src)
	_, bigErr := compileWith(src, bigSourceRewrites)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("compiling took %v", d)
	}
	if libErr == nil && err != nil {
		t.Fatalf("the library compiles %q, but not once rewritten: %v", src, err)
	}
	if libErr == nil && bigErr != nil {
		t.Fatalf("the library compiles %q, but not its big variant: %v", src, bigErr)
	}
}

// TestRewritesMutated runs FuzzCompileTemplate's checks on deterministic mutations of real
// templates (Jinja syntax fragments inserted and bytes deleted at random places).
func TestRewritesMutated(t *testing.T) {
	frags := []string{"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "~", "%", "'", "\"", "(", ")", "[", "]", "{", "}",
		"\n", " ", "is iterable", " if x else ", "|join", "|format(1)", "{% raw %}", "{% endraw %}", "{% macro m() %}", "{% endmacro %}",
		" == ", " != ", " in ", " not in ", " is eq ", " is not in ", "|int", "|round(1, 'ceil')", "|max"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"qwen2.5", "llama3.1-tools", "qwen3-coder", "granite3.3", "command-r7b"} {
		b, err := os.ReadFile(repoPath(".cache", "templates", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		for range 60 {
			src := string(b)
			for range 1 + rng.IntN(4) {
				at := rng.IntN(len(src) + 1)
				if rng.IntN(3) == 0 && at < len(src) {
					src = src[:at] + src[at+1:]
				} else {
					src = src[:at] + frags[rng.IntN(len(frags))] + src[at:]
				}
			}
			checkRewrites(t, src)
		}
	}
}
