package endpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvgate/kvgate/pkg/anthropic"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// testModel is a model of the test data: its renderer (template as --chat-template when
// template is set) and tokenizer.
func testModel(t testing.TB, family, template string) (*chat.Renderer, pipeline.Tokenizer) {
	t.Helper()
	dir := filepath.Join("..", "..", ".cache", "tokenizers", family)
	tk, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatalf("tokenizer %s missing (%v): run `make testdata`", family, err)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: tk, ChatTemplate: template})
	if err != nil {
		t.Fatal(err)
	}
	return r, pipeline.FromTokenizer(tk)
}

// chatML renders ChatML turns; roleOf maps a message's role to the role it is rendered as.
const chatML = `{%- for m in messages -%}{%- if ROLE_TEST -%}<|im_start|>{{ ROLE }}
{{ m.content }}<|im_end|>
{% endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}`

// TestProbeInline: the probe's verdict on real templates of the test data, and on ChatML
// variants that drop inline system messages or render them as user turns, each reason as
// vLLM's _Prober gives it.
func TestProbeInline(t *testing.T) {
	for _, tt := range []struct {
		name, family, template string
		fold                   bool
		reason                 string
	}{
		// Qwen3 and Llama 3.1 render a system message anywhere as a system turn.
		{"qwen3", "qwen3", "", false, "the renderer marks them as distinct system turns"},
		{"llama3_1", "llama3_1", "", false, "the renderer marks them as distinct system turns"},
		// DeepSeek V3 adds every system message's text to the system prompt at the head.
		{"deepseek_v3", "deepseek_v3", "", true, "mid: it has no role marker (reasoning_effort=high)"},
		// Gemma 3 raises unless user and assistant alternate (a tool or system turn breaks it).
		{"gemma3", "gemma3", "", true, "the probe conversations could not be rendered"},
		{"drops system after the first", "qwen3", strings.NewReplacer("ROLE_TEST", "m.role != 'system' or loop.first", "ROLE", "m.role").Replace(chatML),
			true, "mid: renderer drops it (reasoning_effort=high)"},
		{"system as user", "qwen3", strings.NewReplacer("ROLE_TEST", "true", "ROLE", "'user' if m.role == 'system' and not loop.first else m.role").Replace(chatML),
			true, "mid: it renders the same as a user message (reasoning_effort=high)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, tok := testModel(t, tt.family, tt.template)
			fold, reason := probeInline(r, tok)
			if fold != tt.fold || reason != tt.reason {
				t.Errorf("got fold %v (%s), want %v (%s)", fold, reason, tt.fold, tt.reason)
			}
		})
	}
}

// countingRenderer counts renders.
type countingRenderer struct {
	pipeline.ChatRenderer
	n atomic.Int64
}

func (c *countingRenderer) Render(req *openai.ChatRequest) (chat.Result, *openai.Error) {
	c.n.Add(1)
	return c.ChatRenderer.Render(req)
}

// reminder is Claude Code's shape: a system prompt, and a system reminder before the last
// user turn.
const reminder = `{"model":"m","max_tokens":64,"system":"You are a coding agent.","messages":[
	{"role":"user","content":"List the files."},
	{"role":"assistant","content":"There are two: a.go and b.go."},
	{"role":"system","content":"<system-reminder>Be brief.</system-reminder>"},
	{"role":"user","content":[{"type":"text","text":"Open a.go."}]}]}`

// TestPlaceInlineSystem: a request with an inline system message gets the folded chat request
// on a model that folds, keeps it in place on one that preserves, and the probe runs once per
// model.
func TestPlaceInlineSystem(t *testing.T) {
	ar, aerr := anthropic.Parse([]byte(reminder), false)
	if aerr != nil || ar.FoldedChatBody() == nil {
		t.Fatalf("Parse: %v, folded %s", aerr, ar.FoldedChatBody())
	}
	for _, tt := range []struct {
		family string
		body   []byte
	}{{"gemma3", ar.FoldedChatBody()}, {"qwen3", ar.ChatBody()}} {
		r, tok := testModel(t, tt.family, "")
		cr := &countingRenderer{ChatRenderer: r}
		served := &pipeline.Served{Chat: cr, Tok: tok}
		var probes int64
		for i := range 3 {
			c := &pipeline.Call{Served: served}
			if c.Req.Chat, aerr = openai.ParseChat(ar.ChatBody(), openai.Limits{}); aerr != nil {
				t.Fatal(aerr)
			}
			if aerr := placeInlineSystem(c, ar, openai.Limits{}, nil); aerr != nil {
				t.Fatal(aerr)
			}
			want, _ := openai.ParseChat(tt.body, openai.Limits{})
			if got, w := c.Req.Chat.AppendUpstream(nil, "m", openai.Edits{}), want.AppendUpstream(nil, "m", openai.Edits{}); !bytes.Equal(got, w) {
				t.Errorf("%s: chat request\n%s\nwant\n%s", tt.family, got, w)
			}
			if i == 0 {
				probes = cr.n.Load()
			}
		}
		if probes == 0 || cr.n.Load() != probes {
			t.Errorf("%s: %d renders after the first request, %d after three: want the probe once", tt.family, probes, cr.n.Load())
		}
	}
}

// TestFoldedPromptMatchesJinja2 renders a folded conversation with the Go renderer and with
// Python's Jinja2 under vLLM's chat rules (tools/chat/gen.py's render_request), on a template
// that rejects the conversation unfolded.
func TestFoldedPromptMatchesJinja2(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Python reference")
	}
	ar, aerr := anthropic.Parse([]byte(reminder), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	for _, family := range []string{"gemma3", "deepseek_v3"} {
		r, _ := testModel(t, family, "")
		if family == "gemma3" {
			if _, aerr := r.Render(mustChat(t, ar.ChatBody())); aerr == nil {
				t.Errorf("gemma3 renders the unfolded conversation; the test wants a template that rejects it")
			}
		}
		res, aerr := r.Render(mustChat(t, ar.FoldedChatBody()))
		if aerr != nil {
			t.Fatalf("%s: %v", family, aerr)
		}
		if !strings.Contains(res.Prompt, "<system-reminder>Be brief.</system-reminder>\n\nOpen a.go.") {
			t.Errorf("%s: the reminder is not folded into the start of the next user turn:\n%s", family, res.Prompt)
		}
		if want := jinja2Prompt(t, family, ar.FoldedChatBody()); res.Prompt != want {
			t.Errorf("%s: prompt\n%q\nwant (Python Jinja2)\n%q", family, res.Prompt, want)
		}
	}
}

func mustChat(t *testing.T, body []byte) *openai.ChatRequest {
	t.Helper()
	cr, aerr := openai.ParseChat(body, openai.Limits{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	return cr
}

// jinja2Prompt renders a chat body with the family's template in Python.
func jinja2Prompt(t *testing.T, family string, body []byte) string {
	t.Helper()
	const script = `import json, sys
sys.path.insert(0, sys.argv[1])
import gen
inp = json.load(sys.stdin)
with open(inp["config"], encoding="utf-8") as f:
    cfg = json.load(f)
src = cfg["chat_template"]
if isinstance(src, list):
    src = {x["name"]: x["template"] for x in src}["default"]
_, prompt = gen.render_request(src, gen.special_tokens(cfg), inp["req"])
sys.stdout.write(json.dumps(prompt))
`
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	in, _ := json.Marshal(map[string]any{"config": filepath.Join(root, ".cache", "tokenizers", family, "tokenizer_config.json"), "req": json.RawMessage(body)})
	cmd := exec.Command("/usr/bin/python3", "-c", script, filepath.Join(root, "tools", "chat"))
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 (python3-jinja2 comes from `make deps-test`): %v", err)
	}
	var s string
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("python3 answered %q: %v", out, err)
	}
	return s
}

// TestFoldInlineConcurrent: concurrent first requests share one probe.
func TestFoldInlineConcurrent(t *testing.T) {
	r, tok := testModel(t, "qwen3", "")
	one := &countingRenderer{ChatRenderer: r}
	probeInline(one, tok)
	cr := &countingRenderer{ChatRenderer: r}
	served := &pipeline.Served{Chat: cr, Tok: tok}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if inlineModes.foldInline(&pipeline.Call{Served: served}, nil) {
				t.Error("qwen3 folds")
			}
		})
	}
	wg.Wait()
	if cr.n.Load() != one.n.Load() {
		t.Errorf("%d renders, want one probe's %d", cr.n.Load(), one.n.Load())
	}
}

// BenchmarkProbeInline is what the first request to a model with something to fold pays once.
func BenchmarkProbeInline(b *testing.B) {
	for _, family := range []string{"qwen3", "deepseek_v3"} {
		b.Run(family, func(b *testing.B) {
			r, tok := testModel(b, family, "")
			b.ReportAllocs()
			for b.Loop() {
				probeInline(r, tok)
			}
		})
	}
}
