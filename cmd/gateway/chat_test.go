package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/openai"
)

func TestParseOptionsChat(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(cfg, []byte(`
chat_template_content_format: string
default_chat_template_kwargs:
  enable_thinking: false
reasoning_parser: qwen3
tool_call_parser: none
reasoning_field: reasoning
`), 0o600)
	o, err := parseOptions([]string{"--config", cfg, "--reasoning-field", "reasoning_content"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.chatOptions
	if c.ChatTemplateContentFormat != "string" || string(c.DefaultChatTemplateKwargs) != `{"enable_thinking":false}` ||
		c.ReasoningParser != "qwen3" || c.ToolCallParser != "none" || c.ReasoningField != "reasoning_content" {
		t.Errorf("chat options: got %+v", c)
	}
	d, err := parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d.ReasoningParser != parserAuto || d.ToolCallParser != parserAuto || d.ReasoningField != "both" || d.ChatTemplateContentFormat != "auto" {
		t.Errorf("defaults: got %+v", d.chatOptions)
	}
	for _, args := range [][]string{
		{"--reasoning-field", "thoughts"},
		{"--default-chat-template-kwargs", "[1]"},
		{"--default-chat-template-kwargs", "{bad"},
		{"--chat-template", "x.jinja"}, // without --model-path there is nothing to render with
	} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("parseOptions(%q): got nil error", args)
		}
	}
}

// TestBuildChatParsers: "auto" picks vLLM's parsers for the model family (Qwen3: qwen3 and
// hermes), "none" turns one off (and, for tools, refuses tool_choice as a server without
// --tool-call-parser does), and a name vLLM does not have fails the start.
func TestBuildChatParsers(t *testing.T) {
	dir := qwen3Dir(t)
	log := zap.NewNop()
	cs, err := buildChat(dir, "qwen3", nil, defaultChatOptions(), log)
	if err != nil {
		t.Fatal(err)
	}
	if cs.renderer == nil || cs.parsers == nil || cs.parsers.Reasoning() != parse.ReasoningQwen3 || cs.parsers.Tool() != parse.ToolHermes {
		t.Fatalf("auto: got renderer %v parsers %+v", cs.renderer != nil, cs.parsers)
	}
	// A directory whose name says nothing gets the family from config.json's model_type.
	anon := filepath.Join(t.TempDir(), "served")
	os.Mkdir(anon, 0o755)
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(dir, f), filepath.Join(anon, f)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(anon, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644)
	if cs, err := buildChat(anon, "served", nil, defaultChatOptions(), log); err != nil || cs.parsers == nil || cs.parsers.Tool() != parse.ToolHermes {
		t.Errorf("model_type qwen3: got parsers %+v, %v; want qwen3 and hermes", cs.parsers, err)
	}
	tools := `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`
	req, perr := openai.ParseChat([]byte(tools), openai.Limits{})
	if perr != nil {
		t.Fatal(perr.Message)
	}
	if _, rerr := cs.renderer.Render(req); rerr != nil {
		t.Errorf("auto: a tools request is refused: %s", rerr.Message)
	}

	o := defaultChatOptions()
	o.ToolCallParser = parserNone
	cs, err = buildChat(dir, "qwen3", nil, o, log)
	if err != nil {
		t.Fatal(err)
	}
	if cs.parsers == nil || cs.parsers.Tool() != "" || cs.parsers.Reasoning() != parse.ReasoningQwen3 {
		t.Errorf("tool parser none: got %+v", cs.parsers)
	}
	if _, rerr := cs.renderer.Render(req); rerr == nil || !strings.Contains(rerr.Message, "--tool-call-parser") {
		t.Errorf("tool parser none: a tool_choice auto request should be refused like vLLM without --tool-call-parser, got %v", rerr)
	}

	o = defaultChatOptions()
	o.ReasoningParser, o.ToolCallParser = parserNone, parserNone
	if cs, err = buildChat(dir, "qwen3", nil, o, log); err != nil || cs.parsers != nil {
		t.Errorf("both none: got parsers %+v, err %v; want none", cs.parsers, err)
	}
	o = defaultChatOptions()
	o.ToolCallParser = "llama3" // vLLM has llama3_json, not llama3
	if _, err := buildChat(dir, "qwen3", nil, o, log); err == nil || !strings.Contains(err.Error(), "hermes") {
		t.Errorf("unknown parser: got %v, want an error listing the valid names", err)
	}
	if cs, err := buildChat("", "gemma-3-27b-it", nil, defaultChatOptions(), log); err != nil || cs.parsers != nil || cs.renderer != nil {
		t.Errorf("unknown family without a model directory: got %+v, %v; want no renderer, no parsers", cs, err)
	}
}

// TestServeChat: a gateway started with --model-path renders chat requests with the model's
// template: /debug/route explains a chat body on the same ids `gateway render` prints, and an
// http:// worker receives the client's body at /v1/chat/completions.
func TestServeChat(t *testing.T) {
	dir := qwen3Dir(t)
	got := make(chan map[string]any, 4)
	w := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"qwen3","object":"model"}]}`)
		case "/v1/chat/completions":
			var b map[string]any
			json.NewDecoder(r.Body).Decode(&b)
			got <- b
			io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"qwen3","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer w.Close()
	gw := startGateway(t, "--worker", w.URL, "--model-path", dir)
	waitReady(t, gw.api)

	body := `{"model":"qwen3","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello, 世界"}],"chat_template_kwargs":{"enable_thinking":false}}`
	code, out, stderr := runRen(t, body+"\n", "--model-path", dir)
	if code != 0 {
		t.Fatalf("gateway render: %d %s", code, stderr)
	}
	var want struct {
		TokenIDs []uint32 `json:"token_ids"`
	}
	if err := json.Unmarshal([]byte(out), &want); err != nil || len(want.TokenIDs) == 0 {
		t.Fatalf("gateway render: %q: %v", out, err)
	}
	resp, err := http.Post(gw.admin+"/debug/route", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var ex struct {
		PromptTokens int `json:"prompt_tokens"`
	}
	json.NewDecoder(resp.Body).Decode(&ex)
	resp.Body.Close()
	if ex.PromptTokens != len(want.TokenIDs) {
		t.Errorf("/debug/route: %d prompt tokens, want %d (gateway render's)", ex.PromptTokens, len(want.TokenIDs))
	}

	resp, err = http.Post(gw.api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"content":"ok"`) {
		t.Fatalf("chat: got %d %s", resp.StatusCode, b)
	}
	fwd := <-got
	if fwd["messages"] == nil || fwd["chat_template_kwargs"] == nil {
		t.Errorf("worker got %v, want the client's chat body", fwd)
	}
	resp, err = http.Post(gw.api+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"qwen3","messages":[{"role":"user","content":"x"}],"chat_template":"{{ 1 }}"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "--trust-request-chat-template") {
		t.Errorf("untrusted request template: got %d %s, want vLLM's 400", resp.StatusCode, b)
	}
}

// TestToolCallRawArguments: --tool-call-raw-arguments, and tool_call_raw_arguments of the config
// file and of a models: entry, reach the parsers: a call's JSON arguments come out as the model
// wrote them, not re-formatted as vLLM's non-streaming json.dumps writes them.
func TestToolCallRawArguments(t *testing.T) {
	const out = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\":1.50}}\n</tool_call>"
	const raw, formatted = `{"x":1.50}`, `{"x": 1.5}`
	arguments := func(c chatOptions) string {
		t.Helper()
		cs, err := buildChat("", "Qwen/Qwen3-8B", nil, c, zap.NewNop())
		if err != nil || cs.parsers == nil {
			t.Fatalf("buildChat: parsers %v, %v; want qwen3 and hermes", cs.parsers, err)
		}
		m, _ := cs.parsers.ParseFinish(parse.RequestInfo{ToolsGiven: true, ReasoningEnded: true}, out, "stop")
		if len(m.ToolCalls) != 1 {
			t.Fatalf("got %d tool calls, want 1", len(m.ToolCalls))
		}
		return m.ToolCalls[0].Arguments
	}
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(cfg, []byte("tool_call_raw_arguments: true\nmodels: [{name: other, tool_call_raw_arguments: true}, {name: third}]\n"), 0o600)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"default", nil, formatted},
		{"flag", []string{"--tool-call-raw-arguments"}, raw},
		{"flag false", []string{"--tool-call-raw-arguments=false"}, formatted},
		{"config file", []string{"--config", cfg}, raw},
	}
	for _, tt := range tests {
		o, err := parseOptions(tt.args, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := arguments(o.chatOptions); got != tt.want {
			t.Errorf("%s: got arguments %s, want %s", tt.name, got, tt.want)
		}
	}
	o, err := parseOptions([]string{"--config", cfg}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{raw, formatted} { // a models: entry's chat options default as the flags do
		if got := arguments(o.Models[i].chatOptions); got != want {
			t.Errorf("models[%d]: got arguments %s, want %s", i, got, want)
		}
	}
}

// TestConfigParsersPerModel: every parser name works as a model's reasoning_parser and
// tool_call_parser in the config file, each model getting its own pair (the Harmony pair only
// with each other), and the top-level flags do not leak into a model's choice.
func TestConfigParsersPerModel(t *testing.T) {
	var yaml strings.Builder
	yaml.WriteString("reasoning_parser: qwen3\ntool_call_parser: hermes\nmodels:\n")
	type pair struct{ reasoning, tool string }
	var want []pair
	for _, r := range parse.ReasoningParserNames() {
		tl := parse.ToolHermes
		if r == parse.ReasoningGptOss {
			tl = parse.ToolOpenAI
		}
		want = append(want, pair{r, tl})
	}
	for _, tl := range parse.ToolParserNames() {
		r := parse.ReasoningQwen3
		if tl == parse.ToolOpenAI {
			r = parse.ReasoningGptOss
		}
		want = append(want, pair{r, tl})
	}
	for i, p := range want {
		fmt.Fprintf(&yaml, "  - {name: m%d, reasoning_parser: %s, tool_call_parser: %s}\n", i, p.reasoning, p.tool)
	}
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(cfg, []byte(yaml.String()), 0o600)
	o, err := parseOptions([]string{"--config", cfg}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Models) != len(want) {
		t.Fatalf("got %d models, want %d", len(o.Models), len(want))
	}
	for i, m := range o.Models {
		cs, err := buildChat("", m.Name, nil, m.chatOptions, zap.NewNop())
		if err != nil {
			t.Fatalf("model %s (%+v): %v", m.Name, want[i], err)
		}
		if cs.parsers == nil || cs.parsers.Reasoning() != want[i].reasoning || cs.parsers.Tool() != want[i].tool {
			t.Errorf("model %s: got parsers %v, want %+v", m.Name, cs.parsers, want[i])
		}
	}
}
