package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/anthropic"
	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// messagesBody is a Messages body with a long system prompt and the given user/assistant turns.
func messagesBody(extra string, turns ...string) string {
	msgs := make([]string, len(turns))
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = fmt.Sprintf(`{"role":%q,"content":%q}`, role, c)
	}
	return `{"model":"test-model","max_tokens":16,"system":"` + strings.Repeat("You are a coding agent. ", 4) + `","messages":[` + strings.Join(msgs, ",") + `]` + extra + `}`
}

// anthropicError decodes an Anthropic error body.
func anthropicError(t *testing.T, body string) (typ, msg string) {
	t.Helper()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("body %q is not an Anthropic error: %v", body, err)
	}
	return e.Error.Type, e.Error.Message
}

// TestMessagesHTTPWorkers: an http:// worker gets the converted chat request at
// /v1/chat/completions (model renamed); its chat.completion becomes the message; the next turn,
// whose prompt extends the first, lands on the same worker (tree hit).
func TestMessagesHTTPWorkers(t *testing.T) {
	a, b := newFakeWorker(t, "wa"), newFakeWorker(t, "wb")
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, a.url(), b.url())
	first := messagesBody(`,"stop_sequences":["END"],"temperature":0.2`, "Refactor the parser, please, and keep the tests passing.")
	resp, body := g.do(t, http.MethodPost, "/v1/messages", first, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	want := `{"id":"msg_1","type":"message","role":"assistant","model":"test-model","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}` + "\n"
	if body != want {
		t.Errorf("message:\ngot  %s\nwant %s", body, want)
	}
	var got map[string]any
	select {
	case got = <-a.reqs:
	case got = <-b.reqs:
	}
	msgs, _ := got["messages"].([]any)
	if got["_path"] != "/v1/chat/completions" || got["model"] == "test-model" || len(msgs) != 2 || got["max_completion_tokens"] != 16.0 ||
		got["temperature"] != 0.2 || !cmp.Equal(got["stop"], []any{"END"}) || msgs[0].(map[string]any)["role"] != "system" {
		t.Errorf("worker got %v: want the converted chat body at /v1/chat/completions, model renamed", got)
	}
	w1 := resp.Header.Get(pipeline.HeaderWorker)
	next := messagesBody("", "Refactor the parser, please, and keep the tests passing.", "Done: three functions split.", "Now the writer.")
	for try := range 3 {
		resp, body = g.do(t, http.MethodPost, "/v1/messages", next, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("turn 2: %d %s", resp.StatusCode, body)
		}
		if w := resp.Header.Get(pipeline.HeaderWorker); w != w1 || resp.Header.Get(pipeline.HeaderReason) != "tree_hit" {
			t.Errorf("turn 2 (try %d): went to %s (%s), want %s by tree_hit", try, w, resp.Header.Get(pipeline.HeaderReason), w1)
		}
	}
}

// TestMessagesStreamHTTP: an http:// worker's chunk stream becomes the Messages events.
func TestMessagesStreamHTTP(t *testing.T) {
	fw := newFakeWorker(t, "m")
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if so, _ := body["stream_options"].(map[string]any); body["stream"] != true || so["include_usage"] != true {
			http.Error(w, `{"error":{"message":"want a stream with usage"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"chatcmpl-7","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
			`{"id":"chatcmpl-7","choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
			`{"id":"chatcmpl-7","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}]}`,
			`{"id":"chatcmpl-7","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}}`,
			`[DONE]`} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
	}
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, fw.url())
	resp, body := g.do(t, http.MethodPost, "/v1/messages", messagesBody(`,"stream":true`, "Hi"), "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	var types []string
	for _, line := range strings.Split(body, "\n") {
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, ev)
		}
	}
	wantTypes := []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if d := cmp.Diff(wantTypes, types); d != "" {
		t.Errorf("events (-want +got):\n%s\n%s", d, body)
	}
	if !strings.Contains(body, `"delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":32,"output_tokens":2}`) {
		t.Errorf("message_delta lacks the stop reason and usage: %s", body)
	}
}

// TestMessagesGRPC: a grpc:// worker gets the rendered ids; its tokens become the message and,
// streamed, the events; the prompt is the one count_tokens counts.
func TestMessagesGRPC(t *testing.T) {
	f := newFakeVLLM()
	f.gen = scriptedVLLM("Paris.")
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, "url=grpc://"+addr+",runtime=vllm")
	body := messagesBody("", "Capital of France?")
	resp, out := g.do(t, http.MethodPost, "/v1/messages", body, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, out)
	}
	req := <-f.reqs
	ar, aerr := anthropic.Parse([]byte(body), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	want, _ := tagRenderer{}.Render(mustParseChat(t, string(ar.ChatBody())))
	if d := cmp.Diff(want.TokenIDs, req.GetTokenized().GetInputIds()); d != "" {
		t.Errorf("input ids are not the rendered prompt's (-want +got):\n%s", d)
	}
	if req.SamplingParams.GetMaxTokens() != 16 {
		t.Errorf("max tokens %d, want max_tokens 16", req.SamplingParams.GetMaxTokens())
	}
	var msg struct {
		Type    string
		Content []struct{ Type, Text string }
		Usage   struct {
			InputTokens  int `json:"input_tokens"`
			CacheRead    int `json:"cache_read_input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
		StopReason string `json:"stop_reason"`
	}
	if err := json.Unmarshal([]byte(out), &msg); err != nil {
		t.Fatal(err)
	}
	n := len(want.TokenIDs)
	if msg.Type != "message" || len(msg.Content) != 1 || msg.Content[0].Text != "Paris." || msg.StopReason != "end_turn" ||
		msg.Usage.InputTokens != n-4 || msg.Usage.CacheRead != 4 || msg.Usage.OutputTokens != 6 {
		t.Errorf("message %+v, want Paris. with %d prompt tokens, 4 of them cached", msg, n)
	}
	resp, out = g.do(t, http.MethodPost, "/v1/messages/count_tokens", body, "")
	if resp.StatusCode != http.StatusOK || out != fmt.Sprintf(`{"input_tokens":%d}`+"\n", n) {
		t.Errorf("count_tokens: %d %s, want %d", resp.StatusCode, out, n)
	}
	resp, out = g.do(t, http.MethodPost, "/v1/messages", messagesBody(`,"stream":true`, "Capital of France?"), "")
	<-f.reqs
	var text strings.Builder
	for _, d := range sseData(out) {
		var ev struct {
			Type  string
			Delta struct{ Type, Text string }
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	if resp.StatusCode != http.StatusOK || text.String() != "Paris." || !strings.HasSuffix(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
		t.Errorf("stream: %d %q from %s", resp.StatusCode, text.String(), out)
	}
}

// TestMessagesErrors: bad input is a 400 in Anthropic's shape that never reaches a worker; an
// unknown model a 404 not_found_error; a worker's own 4xx keeps its status in Anthropic's shape.
func TestMessagesErrors(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}, MaxPromptTokens: 400}, fw.url())
	for _, tt := range []struct {
		name, path, body string
		status           int
		typ, contains    string
	}{
		{"no max_tokens", "/v1/messages", `{"model":"test-model","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "max_tokens"},
		{"unknown block", "/v1/messages", `{"model":"test-model","max_tokens":5,"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, 400, "invalid_request_error", "hologram"},
		{"orphan tool_result", "/v1/messages", `{"model":"test-model","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1"}]}]}`, 400, "invalid_request_error", "answers no tool_use"},
		{"template raises", "/v1/messages", messagesBody("", "raise"), 400, "invalid_request_error", "no raising allowed"},
		{"too long", "/v1/messages", messagesBody("", strings.Repeat("x", 500)), 400, "invalid_request_error", "prompt is too long: 621 tokens > 400 maximum"},
		{"tool_choice without tools", "/v1/messages", messagesBody(`,"tool_choice":{"type":"any"}`, "x"), 400, "invalid_request_error", "tool"},
		{"unknown model", "/v1/messages", `{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, 404, "not_found_error", "nope"},
		{"count_tokens bad", "/v1/messages/count_tokens", `{"model":"test-model","messages":[]}`, 400, "invalid_request_error", "at least one"},
		{"count_tokens unknown model", "/v1/messages/count_tokens", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "not_found_error", "nope"},
		{"not JSON", "/v1/messages", `{`, 400, "invalid_request_error", "JSON"},
	} {
		resp, body := g.do(t, http.MethodPost, tt.path, tt.body, "")
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, resp.StatusCode, tt.status, body)
			continue
		}
		if typ, msg := anthropicError(t, body); typ != tt.typ || !strings.Contains(msg, tt.contains) {
			t.Errorf("%s: got %s %q, want %s containing %q", tt.name, typ, msg, tt.typ, tt.contains)
		}
	}
	select {
	case r := <-fw.reqs:
		t.Errorf("a rejected request reached the worker: %v", r)
	default:
	}
	fw.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"This model's maximum context length is 10 tokens.","type":"BadRequestError","param":null,"code":400}}`)
	}
	resp, body := g.do(t, http.MethodPost, "/v1/messages", messagesBody("", "hi"), "")
	if typ, msg := anthropicError(t, body); resp.StatusCode != 400 || typ != "invalid_request_error" || !strings.Contains(msg, "maximum context length") {
		t.Errorf("worker 400: %d %s", resp.StatusCode, body)
	}
}

// TestCountTokensNeedsRenderer: without a chat template there is nothing to count with.
func TestCountTokensNeedsRenderer(t *testing.T) {
	g := newTestGateway(t, testConfig{}, newFakeWorker(t, "m").url())
	resp, body := g.do(t, http.MethodPost, "/v1/messages/count_tokens", messagesBody("", "x"), "")
	if typ, msg := anthropicError(t, body); resp.StatusCode != http.StatusNotImplemented || typ != "api_error" || !strings.Contains(msg, "chat template") {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}
}

// TestMessagesClientKeys: Anthropic clients send their key as x-api-key; the guard accepts it
// as it accepts a bearer token, and its 401 and 429 answers on /v1/messages are in Anthropic's
// shape (OpenAI's elsewhere).
func TestMessagesClientKeys(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}, APIKeys: mustKeySet(t, clientauth.APIKey{Name: "agent", Key: "sk-ant-1"}), MaxConcurrentPerKey: 1}, fw.url())
	body := messagesBody("", "hi")
	for _, tt := range []struct {
		name   string
		h      map[string]string
		status int
	}{
		{"x-api-key", map[string]string{"X-Api-Key": "sk-ant-1", "Anthropic-Version": "2023-06-01"}, 200},
		{"bearer", map[string]string{"Authorization": "Bearer sk-ant-1"}, 200},
		{"wrong x-api-key", map[string]string{"X-Api-Key": "sk-ant-2"}, 401},
		{"none", map[string]string{}, 401},
	} {
		resp, out := g.doHeaders(t, http.MethodPost, "/v1/messages", body, tt.h)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: got %d %s, want %d", tt.name, resp.StatusCode, out, tt.status)
			continue
		}
		if tt.status == 401 {
			if typ, _ := anthropicError(t, out); typ != "authentication_error" {
				t.Errorf("%s: error type %s, want authentication_error", tt.name, typ)
			}
		}
	}
	resp, out := g.doHeaders(t, http.MethodPost, "/v1/messages/count_tokens", body, map[string]string{"X-Api-Key": "sk-ant-1"})
	if resp.StatusCode != 200 || !strings.HasPrefix(out, `{"input_tokens":`) {
		t.Errorf("count_tokens with x-api-key: %d %s", resp.StatusCode, out)
	}
	resp, out = g.doHeaders(t, http.MethodPost, "/v1/chat/completions", chatBody(t, "", "hi"), nil)
	if resp.StatusCode != 401 || openAIError(t, out).Code == nil {
		t.Errorf("chat without a key: %d %s, want the OpenAI 401", resp.StatusCode, out)
	}
}

// TestMessagesDebugRoute: POST /debug/route?endpoint=messages explains a Messages body with the
// prompt its converted chat request renders to.
func TestMessagesDebugRoute(t *testing.T) {
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, newFakeWorker(t, "m").url())
	body := messagesBody("", "Explain the parser.")
	resp, out := g.do(t, http.MethodPost, "/debug/route?endpoint=messages", body, "")
	var ex struct {
		Prompt       string `json:"prompt"`
		PromptTokens int    `json:"prompt_tokens"`
	}
	if err := json.Unmarshal([]byte(out), &ex); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	want := "<system>" + strings.Repeat("You are a coding agent. ", 4) + "<user>Explain the parser.<assistant>"
	if ex.Prompt != want || ex.PromptTokens != len(want) {
		t.Errorf("explained prompt %q (%d tokens), want %q", ex.Prompt, ex.PromptTokens, want)
	}
	if resp, _ := g.do(t, http.MethodPost, "/debug/route?endpoint=messages", `{"model":"test-model","messages":[{"role":"user","content":"x"}]}`, ""); resp.StatusCode != 400 {
		t.Errorf("a Messages body without max_tokens: %d, want 400", resp.StatusCode)
	}
}
