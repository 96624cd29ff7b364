package endpoint

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/pkg/anthropic"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// toolTurns is an agent's tool-calling history: tool inputs that json.dumps spells unlike
// compact JSON (separators, non-ASCII, a float written 1.50, nesting), a tool_result of text
// blocks (one empty) and one of a string.
const toolTurns = `{"model":"m","max_tokens":64,"system":"You are a coding agent.",
 "tools":[{"name":"edit","description":"Edit a file.","input_schema":{"type":"object","properties":{"path":{"type":"string"},"old":{"type":"string"},"new":{"type":"string"}}}},
  {"name":"run","description":"Run a command.","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}}}}],
 "messages":[{"role":"user","content":"Rename café to cafe in menu.go, then run the tests."},
  {"role":"assistant","content":[{"type":"text","text":"Editing."},{"type":"tool_use","id":"toolu_01","name":"edit","input":{"path":"menu.go","old":"café — 1.50€","new":"cafe","opts":{"all":true,"ratio":1.50,"lines":[3,7]}}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":[{"type":"text","text":""},{"type":"text","text":"Edited menu.go"},{"type":"text","text":"2 replacements"}]}]},
  {"role":"assistant","content":[{"type":"tool_use","id":"toolu_02","name":"run","input":{"cmd":"go test ./...","timeout":120}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_02","content":"ok  \tmenu\t0.01s"},{"type":"text","text":"Thanks."}]}]}`

// pythonToolTurns converts an Anthropic body's tool turns in Python, by vLLM's rules
// (serving.py: _convert_tool_use_block writes json.dumps(input), _convert_user_tool_result
// joins text blocks with "\n"), and renders the chat request with the family's template
// through Jinja2 as tools/chat/gen.py does. It returns the arguments strings in order and the
// prompt.
func pythonToolTurns(t *testing.T, family string, body string) ([]string, string) {
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
a = inp["anthropic"]
msgs, args = [{"role": "system", "content": a["system"]}], []
for m in a["messages"]:
    if isinstance(m["content"], str):
        msgs.append({"role": m["role"], "content": m["content"]})
        continue
    out, texts, calls = {"role": m["role"]}, [], []
    for b in m["content"]:
        if b["type"] == "text" and b["text"]:
            texts.append(b["text"])
        elif b["type"] == "tool_use":
            args.append(json.dumps(b["input"]))
            calls.append({"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": args[-1]}})
        elif b["type"] == "tool_result":
            c = b.get("content")
            text = c if isinstance(c, str) else "\n".join(x.get("text", "") for x in c if x["type"] == "text")
            msgs.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text})
    if calls:
        out["tool_calls"] = calls
    if texts:
        out["content"] = texts[0] if len(texts) == 1 else [{"type": "text", "text": x} for x in texts]
    if m["role"] == "user" and "content" not in out:
        continue
    msgs.append(out)
tools = [{"type": "function", "function": {"name": x["name"], "description": x["description"], "parameters": x["input_schema"]}} for x in a["tools"]]
req = {"model": a["model"], "messages": msgs, "tools": tools, "tool_choice": "auto", "max_tokens": a["max_tokens"]}
_, prompt = gen.render_request(src, gen.special_tokens(cfg), req)
sys.stdout.write(json.dumps({"args": args, "prompt": prompt}))
`
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	in, _ := json.Marshal(map[string]any{"config": filepath.Join(root, ".cache", "tokenizers", family, "tokenizer_config.json"), "anthropic": json.RawMessage(body)})
	cmd := exec.Command("/usr/bin/python3", "-c", script, filepath.Join(root, "tools", "chat"))
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 (python3-jinja2 comes from `make deps-test`): %v", err)
	}
	var res struct {
		Args   []string `json:"args"`
		Prompt string   `json:"prompt"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("python3 answered %q: %v", out, err)
	}
	return res.Args, res.Prompt
}

// TestToolTurnsMatchPython: the converted request of a tool-use and tool_result conversation
// carries the arguments strings Python's json.dumps writes, renders through a Jinja template
// to the prompt Python's Jinja2 renders from vLLM's conversion, and (gpt-oss's Harmony
// rendering puts the arguments string in the prompt as it is) holds each of Python's
// arguments strings verbatim in the Harmony prompt.
func TestToolTurnsMatchPython(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Python reference")
	}
	ar, aerr := anthropic.Parse([]byte(toolTurns), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	cr := mustChat(t, ar.ChatBody())
	wantArgs, wantPrompt := pythonToolTurns(t, "qwen3", toolTurns)
	var got []string
	for _, m := range cr.Messages {
		for _, c := range m.ToolCalls {
			var s string
			if err := json.Unmarshal(c.Arguments, &s); err != nil {
				t.Fatalf("arguments %s: %v", c.Arguments, err)
			}
			got = append(got, s)
		}
	}
	if strings.Join(got, "\n") != strings.Join(wantArgs, "\n") {
		t.Errorf("arguments\ngot  %q\nwant %q (Python json.dumps)", got, wantArgs)
	}
	r, _ := testModel(t, "qwen3", "")
	res, aerr := r.Render(cr)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if res.Prompt != wantPrompt {
		t.Errorf("qwen3 prompt\n%q\nwant (Python Jinja2)\n%q", res.Prompt, wantPrompt)
	}
	dir := filepath.Join("..", "..", ".cache", "tokenizers", "gptoss")
	tk, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatalf("tokenizer gptoss missing (%v): run make testdata", err)
	}
	h, err := chat.New(dir, chat.Options{Tokenizer: tk, ModelType: "gpt_oss"})
	if err != nil {
		t.Fatal(err)
	}
	hres, aerr := h.Render(cr)
	if aerr != nil {
		t.Fatal(aerr)
	}
	for _, a := range wantArgs {
		if !strings.Contains(hres.Prompt, " json<|message|>"+a+"<|call|>") {
			t.Errorf("the Harmony prompt lacks the arguments %q:\n%s", a, hres.Prompt)
		}
	}
}

// TestProbeDisabledEffort: the effort disabled thinking maps to on real templates of the test
// data and on templates that reject "none" or treat it as a thinking effort, as vLLM's
// _probe_disabled_thinking_effort decides.
func TestProbeDisabledEffort(t *testing.T) {
	const turn = `{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
`
	for _, tt := range []struct{ name, family, template, want string }{
		{"qwen3 honours enable_thinking", "qwen3", "", "none"},
		{"a template that ignores both", "llama3", "", "low"},
		{"none rendered as itself", "qwen3", turn + `effort={{ reasoning_effort }}`, "none"},
		{"none rejected", "qwen3", `{%- if reasoning_effort == 'none' %}{{ raise_exception('unsupported effort') }}{% endif %}` + turn, "low"},
		{"an unknown effort is the most thorough", "qwen3", turn + `effort={{ reasoning_effort if reasoning_effort in ['low', 'medium', 'high', 'xhigh'] else 'max' }}`, "low"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := testModel(t, tt.family, tt.template)
			if got := probeDisabledEffort(r); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPlaceMessagesDisabledThinking: a request that disables thinking gets the model's effort
// in the chat request it is rendered and sent with, in place and folded alike.
func TestPlaceMessagesDisabledThinking(t *testing.T) {
	const body = `{"model":"m","max_tokens":5,"system":"S","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"q"},{"role":"system","content":"note"}]}`
	for _, tt := range []struct{ family, want string }{{"llama3", "low"}, {"qwen3", "none"}, {"gemma3", "low"}} {
		t.Run(tt.family, func(t *testing.T) {
			ar, aerr := anthropic.Parse([]byte(body), false)
			if aerr != nil {
				t.Fatal(aerr)
			}
			r, tok := testModel(t, tt.family, "")
			c := &pipeline.Call{Served: &pipeline.Served{Chat: r, Tok: tok}}
			c.Req.Chat = mustChat(t, ar.ChatBody())
			if aerr := placeMessages(c, ar, openai.Limits{}, nil); aerr != nil {
				t.Fatal(aerr)
			}
			if c.Req.Chat.ReasoningEffort != tt.want {
				t.Errorf("reasoning_effort %q, want %q", c.Req.Chat.ReasoningEffort, tt.want)
			}
		})
	}
}

// TestMessagesRenderPlaces: /v1/messages/render answers the ids of the request its model gets,
// as /v1/messages places it: gemma3 rejects a system turn inside the conversation, so the
// reminder is folded (unplaced, the render would be gemma3's 400); a template that rejects
// reasoning_effort none gets low for disabled thinking (unplaced, a 400 too).
func TestMessagesRenderPlaces(t *testing.T) {
	for _, tt := range []struct{ name, family, template, body string }{
		{"gemma3 folds", "gemma3", "", reminder},
		{"none rejected", "qwen3", `{%- if reasoning_effort == 'none' %}{{ raise_exception('unsupported effort') }}{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}effort={{ reasoning_effort }}`, `{"model":"m","max_tokens":5,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"q"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, tok := testModel(t, tt.family, tt.template)
			p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
			idx, _ := indexer.New(indexer.Config{})
			pl, err := pipeline.New(pipeline.Config{Models: []pipeline.Model{{Name: "m", Policy: p, Index: idx, Tokenizer: tok, Chat: r}}})
			if err != nil {
				t.Fatal(err)
			}
			// A worker that is never called: the gateway serves a model its fleet has.
			if _, err := pl.Fleet().AddWorker(worker.Spec{URL: "http://127.0.0.1:9", Model: "m"}); err != nil {
				t.Fatal(err)
			}
			a := NewAPI(pl, nil)
			rec := httptest.NewRecorder()
			a.MessagesRender(rec, httptest.NewRequest(http.MethodPost, "/v1/messages/render", strings.NewReader(tt.body)))
			if rec.Code != http.StatusOK {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			var got struct {
				TokenIDs []uint32 `json:"token_ids"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			// What /v1/messages renders: the body placed for this model.
			ar, aerr := anthropic.Parse([]byte(tt.body), false)
			if aerr != nil {
				t.Fatal(aerr)
			}
			c := &pipeline.Call{Served: &pipeline.Served{Chat: r, Tok: tok}}
			c.Req.Chat = mustChat(t, ar.ChatBody())
			if aerr := placeMessages(c, ar, openai.Limits{}, nil); aerr != nil {
				t.Fatal(aerr)
			}
			want, aerr := r.Render(c.Req.Chat)
			if aerr != nil {
				t.Fatal(aerr)
			}
			if !slices.Equal(got.TokenIDs, want.TokenIDs) {
				t.Errorf("render ids\n%v\nwant /v1/messages's\n%v", got.TokenIDs, want.TokenIDs)
			}
		})
	}
}

// TestDisabledEffortConcurrent: concurrent first requests share one probe, and the model's
// effort is cached.
func TestDisabledEffortConcurrent(t *testing.T) {
	r, tok := testModel(t, "llama3", "")
	one := &countingRenderer{ChatRenderer: r}
	probeDisabledEffort(one)
	cr := &countingRenderer{ChatRenderer: r}
	served := &pipeline.Served{Chat: cr, Tok: tok}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if e := disabledEfforts.effort(&pipeline.Call{Served: served}, nil); e != "low" {
				t.Errorf("llama3's effort %q", e)
			}
		})
	}
	wg.Wait()
	disabledEfforts.effort(&pipeline.Call{Served: served}, nil)
	if cr.n.Load() != one.n.Load() {
		t.Errorf("%d renders, want one probe's %d", cr.n.Load(), one.n.Load())
	}
}
