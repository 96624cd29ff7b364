package router

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// tagRenderer renders each message as <role>content and ends with <assistant> (the generation
// prompt); its ids are the prompt's bytes, as byteTokenizer encodes them. A message with content
// "raise" fails as a template's raise_exception does.
type tagRenderer struct{}

func (tagRenderer) Render(req *openai.ChatRequest) (chat.Result, *openai.Error) {
	var b strings.Builder
	for _, m := range req.Messages {
		c := m.Content.Text
		if c == "raise" {
			return chat.Result{}, openai.BadRequest("", "template raised: no raising allowed")
		}
		b.WriteString("<" + m.Role + ">" + c)
	}
	b.WriteString("<assistant>")
	ids := make([]uint32, 0, b.Len())
	for _, c := range []byte(b.String()) {
		ids = append(ids, uint32(c))
	}
	return chat.Result{Prompt: b.String(), TokenIDs: ids}, nil
}

// chatBody builds a chat request body from alternating user/assistant contents after a system
// prompt.
func chatBody(t *testing.T, extra string, turns ...string) string {
	t.Helper()
	msgs := []map[string]string{{"role": "system", "content": strings.Repeat("You are a careful assistant. ", 4)}}
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": c})
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	return `{"model":"test-model","messages":` + string(b) + extra + `}`
}

func (g *testGateway) postChat(t *testing.T, body string) (*http.Response, string) {
	t.Helper()
	return g.do(t, http.MethodPost, "/v1/chat/completions", body, "")
}

// TestChatHTTPWorkers: http:// workers get the client's chat body (model renamed) at their
// /v1/chat/completions; the gateway routes on the rendered ids, so a conversation's next turn,
// whose prompt extends the last one, goes where the last one went (tree hit).
func TestChatHTTPWorkers(t *testing.T) {
	a, b := newFakeWorker(t, "wa"), newFakeWorker(t, "wb")
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, a.url(), b.url())
	first := chatBody(t, "", "What is the capital of France, and why is it there?")
	resp, body := g.postChat(t, first)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"content":"hi"`) {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	w1 := resp.Header.Get(pipeline.HeaderWorker)
	var got map[string]any
	select {
	case got = <-a.reqs:
	case got = <-b.reqs:
	}
	if got["_path"] != "/v1/chat/completions" || got["model"] == "test-model" || got["messages"] == nil || got["prompt"] != nil {
		t.Errorf("worker got %v: want the chat body at /v1/chat/completions with the model renamed", got)
	}
	for turn := 0; turn < 3; turn++ {
		next := chatBody(t, "", "What is the capital of France, and why is it there?", "Paris, on the Seine.", "And of Italy?")
		resp, body = g.postChat(t, next)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("turn 2: got %d %s", resp.StatusCode, body)
		}
		if w := resp.Header.Get(pipeline.HeaderWorker); w != w1 || resp.Header.Get(pipeline.HeaderReason) != "tree_hit" {
			t.Errorf("turn 2 (try %d): went to %s (%s), want %s by tree_hit", turn, w, resp.Header.Get(pipeline.HeaderReason), w1)
		}
	}
}

// TestChatErrors: request and render errors are 400s in the OpenAI shape, never forwarded.
func TestChatErrors(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}, MaxPromptTokens: 200}, fw.url())
	for _, tt := range []struct{ name, body, contains string }{
		{"not json", `{"messages":`, "invalid JSON"},
		{"no messages", `{"model":"test-model"}`, "messages"},
		{"template raises", chatBody(t, "", "raise"), "no raising allowed"},
		{"too long", chatBody(t, "", strings.Repeat("x", 300)), "more than the limit of 200"},
		{"empty tools", chatBody(t, `,"tools":[]`, "hi"), "tools"},
	} {
		resp, body := g.postChat(t, tt.body)
		if resp.StatusCode/100 != 4 || !strings.Contains(openAIError(t, body).Message, tt.contains) {
			t.Errorf("%s: got %d %s, want a 4xx error containing %q", tt.name, resp.StatusCode, body, tt.contains)
		}
	}
	select {
	case r := <-fw.reqs:
		t.Errorf("a rejected request reached the worker: %v", r)
	default:
	}
}

// scriptedVLLM answers every Generate with the bytes of text as tokens, one chunk per byte when
// streaming.
func scriptedVLLM(text string) func(*vllm.GenerateRequest, grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	return func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		p := uint32(len(r.GetTokenized().GetInputIds()))
		var out []uint32
		for _, c := range []byte(text) {
			out = append(out, uint32(c))
		}
		if !r.Stream {
			return s.Send(vComplete(0, "stop", p, 4, out...))
		}
		for _, o := range out {
			if err := s.Send(vChunk(0, p, 4, o)); err != nil {
				return err
			}
		}
		return s.Send(vComplete(0, "stop", p, 4, out[len(out)-1]))
	}
}

// TestChatGRPCPlain: a grpc:// worker gets the rendered ids; its tokens become a chat.completion
// (or chunks: role first, content deltas, finish, usage, [DONE]) with the content as detokenized.
func TestChatGRPCPlain(t *testing.T) {
	f := newFakeVLLM()
	f.gen = scriptedVLLM("<b>Paris.")
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, "url=grpc://"+addr+",runtime=vllm")
	body := chatBody(t, `,"max_completion_tokens":9,"max_tokens":3`, "Capital of France?")
	resp, out := g.postChat(t, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, out)
	}
	req := <-f.reqs
	want, _ := tagRenderer{}.Render(mustParseChat(t, body))
	if d := cmp.Diff(want.TokenIDs, req.GetTokenized().GetInputIds()); d != "" {
		t.Errorf("input ids are not the rendered prompt's (-want +got):\n%s", d)
	}
	if req.SamplingParams.GetMaxTokens() != 9 {
		t.Errorf("max tokens: got %d, want max_completion_tokens 9 (preferred over max_tokens)", req.SamplingParams.GetMaxTokens())
	}
	var cc openai.ChatCompletion
	if err := json.Unmarshal([]byte(out), &cc); err != nil {
		t.Fatal(err)
	}
	if cc.Object != openai.ObjectChatCompletion || !strings.HasPrefix(cc.ID, "chatcmpl-") || cc.Model != "test-model" || len(cc.Choices) != 1 {
		t.Fatalf("envelope: got %s", out)
	}
	m := cc.Choices[0].Message
	if strings.Contains(out, `\u003c`) {
		t.Errorf("body escapes '<' (the engines write it raw): %s", out)
	}
	if m.Role != "assistant" || m.Content == nil || *m.Content != "<b>Paris." || m.ToolCalls == nil || len(m.ToolCalls) != 0 || cc.Choices[0].FinishReason != "stop" {
		t.Errorf("message: got %s", out)
	}
	if u := cc.Usage; u == nil || u.PromptTokens != len(want.TokenIDs) || u.CompletionTokens != 9 || u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != 4 {
		t.Errorf("usage: got %s", out)
	}

	_, out = g.postChat(t, chatBody(t, `,"stream":true,"stream_options":{"include_usage":true}`, "Capital of France?"))
	chunks, done := chatChunks(t, out)
	if !done {
		t.Fatalf("stream does not end with [DONE]: %s", out)
	}
	if d := chunks[0].Choices[0].Delta; d.Role != "assistant" || d.Content == nil || *d.Content != "" {
		t.Errorf("first chunk: want role assistant and empty content, got %+v", d)
	}
	var text strings.Builder
	var finish []string
	for _, c := range chunks {
		if c.Object != openai.ObjectChatCompletionChunk {
			t.Errorf("chunk object %q", c.Object)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = append(finish, *ch.FinishReason)
			}
		}
	}
	last := chunks[len(chunks)-1]
	if text.String() != "<b>Paris." || !cmp.Equal(finish, []string{"stop"}) || last.Usage == nil || len(last.Choices) != 0 || last.Usage.CompletionTokens != 9 {
		t.Errorf("stream: text %q finish %v, last chunk %+v", text.String(), finish, last)
	}
}

// TestChatGRPCParsers: with output parsers, a grpc:// worker's reasoning and tool calls come back
// split as vLLM's serving layer splits them, streaming or not, into the fields ReasoningField asks
// for.
func TestChatGRPCParsers(t *testing.T) {
	const reply = "<think>weather needs a tool</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	f := newFakeVLLM()
	f.gen = scriptedVLLM(reply)
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	ps, err := parse.NewParsers(parse.ReasoningQwen3, parse.ToolHermes)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}, ChatParsers: ps, ReasoningField: engine.ReasoningContentOnly}, "url=grpc://"+addr+",runtime=vllm")
	tools := `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`

	_, out := g.postChat(t, chatBody(t, tools, "Weather in Paris?"))
	req := <-f.reqs
	if req.SamplingParams.SkipSpecialTokens {
		t.Errorf("with a tool parser and tools, special tokens must be kept for the parser (vLLM's adjust_request)")
	}
	var cc openai.ChatCompletion
	if err := json.Unmarshal([]byte(out), &cc); err != nil || len(cc.Choices) != 1 {
		t.Fatalf("body %s: %v", out, err)
	}
	m := cc.Choices[0].Message
	if m.ReasoningContent == nil || *m.ReasoningContent != "weather needs a tool" || m.Reasoning != nil {
		t.Errorf("reasoning: want only reasoning_content %q, got %s", "weather needs a tool", out)
	}
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[0].Function.Arguments != `{"city": "Paris"}` ||
		m.ToolCalls[0].Type != "function" || !strings.HasPrefix(m.ToolCalls[0].ID, "chatcmpl-tool-") || cc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("tool calls: got %s", out)
	}

	_, out = g.postChat(t, chatBody(t, tools+`,"stream":true`, "Weather in Paris?"))
	chunks, done := chatChunks(t, out)
	if !done {
		t.Fatalf("stream does not end with [DONE]: %s", out)
	}
	var reasoning, args strings.Builder
	var name, finish string
	for _, c := range chunks {
		for _, ch := range c.Choices {
			if ch.Delta.ReasoningContent != nil {
				reasoning.WriteString(*ch.Delta.ReasoningContent)
			}
			if ch.Delta.Reasoning != nil {
				t.Errorf("reasoning field written with ReasoningField %q", engine.ReasoningContentOnly)
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Function != nil {
					name += tc.Function.Name
					args.WriteString(tc.Function.Arguments)
				}
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if reasoning.String() != "weather needs a tool" || name != "get_weather" || args.String() != `{"city": "Paris"}` || finish != "tool_calls" {
		t.Errorf("stream: reasoning %q, call %q(%s), finish %q", reasoning.String(), name, args.String(), finish)
	}
}

// TestChatDebugRoute: /debug/route explains a chat body on its rendered ids, like a completion
// of the same prompt.
func TestChatDebugRoute(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}}, fw.url())
	body := chatBody(t, "", "hello there")
	want, _ := tagRenderer{}.Render(mustParseChat(t, body))
	resp, out := g.do(t, http.MethodPost, "/debug/route", body, "")
	var ex pipeline.RouteExplanation
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(out), &ex) != nil {
		t.Fatalf("got %d %s", resp.StatusCode, out)
	}
	if ex.PromptTokens != len(want.TokenIDs) || len(ex.Workers) != 1 {
		t.Errorf("explanation: got %s, want %d prompt tokens", out, len(want.TokenIDs))
	}
	resp, out = g.do(t, http.MethodPost, "/debug/route", chatBody(t, "", "raise"), "")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(out, "no raising") {
		t.Errorf("a failing render: got %d %s, want its 400", resp.StatusCode, out)
	}
}

func mustParseChat(t testing.TB, body string) *openai.ChatRequest {
	t.Helper()
	req, err := openai.ParseChat([]byte(body), openai.Limits{})
	if err != nil {
		t.Fatal(err.Message)
	}
	return req
}

// chatChunks decodes a chat SSE body; done reports a final [DONE].
func chatChunks(t *testing.T, body string) ([]openai.ChatChunk, bool) {
	t.Helper()
	data := sseData(body)
	var out []openai.ChatChunk
	for i, d := range data {
		if d == "[DONE]" {
			return out, i == len(data)-1
		}
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		out = append(out, c)
	}
	return out, false
}
