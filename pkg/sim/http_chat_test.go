package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/openai"
)

var (
	qwenChatOnce sync.Once
	qwenChat     *chat.Renderer
	qwenChatErr  error
)

// qwen3Chat returns the renderer of the cached Qwen3 model directory (its template is in
// tokenizer_config.json).
func qwen3Chat(t testing.TB) *chat.Renderer {
	t.Helper()
	tok := loadQwen3(t)
	dir := modelDir(t, "qwen3")
	qwenChatOnce.Do(func() { qwenChat, qwenChatErr = chat.New(dir, chat.Options{Tokenizer: tok}) })
	if qwenChatErr != nil {
		t.Fatal(qwenChatErr)
	}
	return qwenChat
}

// scripted returns Replies emitting texts in turn, tokenized as the model emits them.
func scripted(t testing.TB, texts ...string) *Replies {
	t.Helper()
	r := &Replies{}
	for _, s := range texts {
		r.replies = append(r.replies, encodeOutput(t, s))
	}
	return r
}

// encodeOutput tokenizes text as the model emits it (no special tokens added).
func encodeOutput(t testing.TB, text string) []uint32 {
	t.Helper()
	ids, err := loadQwen3(t).Encode(nil, text, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// newChatEnv starts a Qwen3-tokenized simulator serving chat with the model's template.
func newChatEnv(t *testing.T, scfg ServerConfig) *testEnv {
	t.Helper()
	tok := loadQwen3(t)
	scfg.Codec, scfg.Chat = NewTokenizerCodec(tok), qwen3Chat(t)
	return newTestEnv(t, Config{VocabSize: tok.VocabSize()}, 0, 1, scfg)
}

func (env *testEnv) postPath(t *testing.T, path, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// render returns the ids the Qwen3 template gives a chat body.
func render(t *testing.T, body string) []uint32 {
	t.Helper()
	req, aerr := openai.ParseChat([]byte(body), openai.Limits{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	res, aerr := qwen3Chat(t).Render(req)
	if aerr != nil {
		t.Fatal(aerr)
	}
	return res.TokenIDs
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return m
}

// ignoreEnvelope drops the fields that change per response (id, created).
var ignoreEnvelope = cmpopts.IgnoreMapEntries(func(k string, _ any) bool { return k == "id" || k == "created" })

const chatMessages = `"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]`

// TestHTTPChatNonStreaming: the chat.completion body of vLLM, usage counting the rendered
// prompt, and a cache that holds the chat prompt's ids: the KV events carry them, a repeat
// hits them, and so does a completion sending those ids.
func TestHTTPChatNonStreaming(t *testing.T) {
	env := newChatEnv(t, ServerConfig{Replies: scripted(t, "Hello there.")})
	body := `{"model":"sim-model",` + chatMessages + `,"max_tokens":50}`
	ids := render(t, body)
	full := len(ids) / 16 * 16
	for i, wantCached := range []int{0, full} {
		code, b := env.postPath(t, "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("request %d: status %d: %s", i, code, b)
		}
		got := decodeJSON(t, b)
		if id, _ := got["id"].(string); !strings.HasPrefix(id, "chatcmpl-") {
			t.Errorf("id %q, want chatcmpl-...", id)
		}
		want := map[string]any{
			"object": "chat.completion", "model": "sim-model",
			"choices": []any{map[string]any{
				"index": 0.0, "logprobs": nil, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": "Hello there.", "tool_calls": []any{}},
			}},
			"usage": map[string]any{"prompt_tokens": float64(len(ids)), "completion_tokens": 3.0, "total_tokens": float64(len(ids) + 3),
				"prompt_tokens_details": map[string]any{"cached_tokens": float64(wantCached)}},
		}
		if d := cmp.Diff(want, got, ignoreEnvelope); d != "" {
			t.Errorf("request %d (-want +got):\n%s", i, d)
		}
		if i == 0 {
			var stored []uint32
			for _, ev := range env.sink.events() {
				if ev.Kind == "stored" {
					stored = append(stored, ev.Tokens...)
				}
			}
			if len(stored) < full || !slices.Equal(stored[:full], ids[:full]) {
				t.Errorf("stored blocks hold %v, want the rendered prompt's first %d ids %v", stored, full, ids[:full])
			}
		}
	}
	code, b := env.post(t, `{"prompt":`+idsJSON(ids)+`,"max_tokens":1}`)
	var c completionResp
	if err := json.Unmarshal(b, &c); code != 200 || err != nil || c.Usage.PromptTokensDetails.CachedTokens != full {
		t.Errorf("completion of the rendered ids: status %d, usage %+v (%v); want %d cached", code, c.Usage, err, full)
	}
}

type chatEvent struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int             `json:"index"`
		Delta        json.RawMessage `json:"delta"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

// TestHTTPChatStreaming: role chunks first, content deltas, each choice's last chunk with its
// finish reason, the usage chunk, [DONE]; one id over the stream.
func TestHTTPChatStreaming(t *testing.T) {
	env := newChatEnv(t, ServerConfig{Replies: scripted(t, "Hello there, friend.", "Bye now.")})
	body := `{` + chatMessages + `,"max_tokens":50,"n":2,"stream":true,"stream_options":{"include_usage":true}}`
	code, b := env.postPath(t, "/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	events := readSSE(t, strings.NewReader(string(b)))
	if len(events) < 6 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events: %q", events)
	}
	var id string
	content := map[int]string{}
	finish := map[int]string{}
	var usage *openai.Usage
	for k, ev := range events[:len(events)-1] {
		var c chatEvent
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if id == "" {
			id = c.ID
		}
		if c.ID != id || !strings.HasPrefix(id, "chatcmpl-") || c.Object != "chat.completion.chunk" || c.Model != "sim-model" {
			t.Errorf("event %d envelope: %s", k, ev)
		}
		if c.Usage != nil {
			if len(c.Choices) != 0 || k != len(events)-2 {
				t.Errorf("usage in event %d of %d with choices: %s", k, len(events), ev)
			}
			usage = c.Usage
			continue
		}
		if len(c.Choices) != 1 {
			t.Fatalf("event %q: want one choice", ev)
		}
		ch := c.Choices[0]
		if k < 2 {
			if d := cmp.Diff(`{"role":"assistant","content":""}`, string(ch.Delta)); d != "" || ch.Index != k || ch.FinishReason != nil {
				t.Errorf("event %d: want the role chunk of choice %d, got %s", k, k, ev)
			}
			continue
		}
		if _, done := finish[ch.Index]; done {
			t.Errorf("choice %d: chunk after its finish: %s", ch.Index, ev)
		}
		var d openai.ChatDelta
		if err := json.Unmarshal(ch.Delta, &d); err != nil || d.Role != "" {
			t.Errorf("event %d delta %s: %v", k, ch.Delta, err)
		}
		if d.Content != nil {
			content[ch.Index] += *d.Content
		}
		if ch.FinishReason != nil {
			finish[ch.Index] = *ch.FinishReason
		}
	}
	if d := cmp.Diff(map[int]string{0: "Hello there, friend.", 1: "Bye now."}, content); d != "" {
		t.Errorf("content (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[int]string{0: "stop", 1: "stop"}, finish); d != "" {
		t.Errorf("finish reasons (-want +got):\n%s", d)
	}
	prompt := len(render(t, body))
	out := len(encodeOutput(t, "Hello there, friend.")) + len(encodeOutput(t, "Bye now."))
	want := &openai.Usage{PromptTokens: prompt, CompletionTokens: out, TotalTokens: prompt + out, PromptTokensDetails: &openai.TokenDetails{}}
	if d := cmp.Diff(want, usage); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}
}

// TestHTTPChatGenerationParams: max_tokens, max_completion_tokens, stop, min_tokens and
// ignore_eos shape the output as on /v1/completions.
func TestHTTPChatGenerationParams(t *testing.T) {
	const reply = "Hello there. General Kenobi."
	env := newChatEnv(t, ServerConfig{Replies: scripted(t, reply)})
	n := len(encodeOutput(t, reply))
	tests := []struct {
		name, params string
		content      string // "" = do not check
		tokens       int
		finish       string
	}{
		{"script", ``, reply, n, "stop"},
		{"max_tokens", `,"max_tokens":2`, "Hello there", 2, "length"},
		{"max_completion_tokens wins", `,"max_tokens":1,"max_completion_tokens":3`, "Hello there.", 3, "length"},
		{"stop string", `,"stop":[" General"]`, "Hello there.", 0, "stop"},
		{"ignore_eos", `,"ignore_eos":true,"max_tokens":20`, "", 20, "length"},
		{"min_tokens", `,"min_tokens":12,"max_tokens":20`, "", 12, "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				body := `{` + chatMessages + tt.params + `}`
				if stream {
					body = `{` + chatMessages + tt.params + `,"stream":true,"stream_options":{"include_usage":true}}`
				}
				code, b := env.postPath(t, "/v1/chat/completions", body)
				if code != 200 {
					t.Fatalf("stream %v: status %d: %s", stream, code, b)
				}
				content, finish, usage := chatResult(t, b, stream)
				if tt.content != "" && content != tt.content {
					t.Errorf("stream %v: content %q, want %q", stream, content, tt.content)
				}
				if !strings.HasPrefix(content, "Hello there") {
					t.Errorf("stream %v: content %q does not start with the script", stream, content)
				}
				if tt.tokens > 0 && usage.CompletionTokens != tt.tokens {
					t.Errorf("stream %v: %d completion tokens, want %d", stream, usage.CompletionTokens, tt.tokens)
				}
				if finish != tt.finish {
					t.Errorf("stream %v: finish %q, want %q", stream, finish, tt.finish)
				}
			}
		})
	}
}

// chatResult returns choice 0's content and finish reason and the usage of a chat response.
func chatResult(t *testing.T, b []byte, stream bool) (content, finish string, usage openai.Usage) {
	t.Helper()
	if !stream {
		var c openai.ChatCompletion
		if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 || c.Usage == nil {
			t.Fatalf("body %s: %v", b, err)
		}
		if c.Choices[0].Message.Content != nil {
			content = *c.Choices[0].Message.Content
		}
		return content, c.Choices[0].FinishReason, *c.Usage
	}
	events := readSSE(t, strings.NewReader(string(b)))
	for _, ev := range events[:len(events)-1] {
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if c.Usage != nil {
			usage = *c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return content, finish, usage
}

// TestHTTPChatParsers: with Qwen3's parsers the scripted output becomes reasoning and a tool
// call, in the non-streaming message and in the stream's deltas alike.
func TestHTTPChatParsers(t *testing.T) {
	parsers, err := parse.NewParsers(parse.ReasoningQwen3, parse.ToolHermes)
	if err != nil {
		t.Fatal(err)
	}
	reply := "<think>\nLook it up.\n</think>\n\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n</tool_call>"
	env := newChatEnv(t, ServerConfig{Replies: scripted(t, reply), ChatParsers: parsers})
	body := `{"messages":[{"role":"user","content":"Weather in Oslo?"}],"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object"}}}]}`

	code, b := env.postPath(t, "/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	got := decodeJSON(t, b)
	choice := got["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	calls, _ := msg["tool_calls"].([]any)
	if len(calls) != 1 {
		t.Fatalf("message %v: want one tool call", msg)
	}
	call := calls[0].(map[string]any)
	if id, _ := call["id"].(string); !strings.HasPrefix(id, "chatcmpl-tool-") {
		t.Errorf("tool call id %q", id)
	}
	// Content is the text between reasoning and the call, as vLLM's hermes parser leaves it.
	want := map[string]any{"role": "assistant", "content": "\n\n", "reasoning": "\nLook it up.\n",
		"tool_calls": []any{map[string]any{"id": call["id"], "type": "function",
			"function": map[string]any{"name": "weather", "arguments": `{"city": "Oslo", "days": 2}`}}}}
	if d := cmp.Diff(want, msg); d != "" {
		t.Errorf("message (-want +got):\n%s", d)
	}
	if choice["finish_reason"] != "tool_calls" {
		t.Errorf("finish_reason %v, want tool_calls", choice["finish_reason"])
	}

	code, b = env.postPath(t, "/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`)
	if code != 200 {
		t.Fatalf("stream status %d: %s", code, b)
	}
	var reasoning, content, name, args, finish string
	events := readSSE(t, strings.NewReader(string(b)))
	for _, ev := range events[:len(events)-1] {
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Reasoning != nil {
				reasoning += *ch.Delta.Reasoning
			}
			if ch.Delta.Content != nil {
				content += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				name += tc.Function.Name
				args += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if reasoning != "\nLook it up.\n" || content != "\n\n" || name != "weather" || args != `{"city": "Oslo", "days": 2}` || finish != "tool_calls" {
		t.Errorf("stream: reasoning %q, content %q, call %q(%s), finish %q", reasoning, content, name, args, finish)
	}
}

// TestHTTPChatErrors: bad chat input is a 4xx in the OpenAI shape and the server keeps serving.
func TestHTTPChatErrors(t *testing.T) {
	env := newChatEnv(t, ServerConfig{MaxBodyBytes: 4096})
	tests := []struct {
		name, body string
		status     int
	}{
		{"bad json", `{"messages":`, 400},
		{"not an object", `[1]`, 400},
		{"no messages", `{"max_tokens":2}`, 400},
		{"unknown model", `{"model":"other",` + chatMessages + `}`, 404},
		{"bad role content", `{"messages":[{"role":"user","content":5}]}`, 400},
		{"empty tools", `{` + chatMessages + `,"tools":[]}`, 400},
		{"n 0", `{` + chatMessages + `,"n":0}`, 400},
		{"n too large", `{` + chatMessages + `,"n":129}`, 400},
		{"max_tokens 0", `{` + chatMessages + `,"max_tokens":0}`, 400},
		{"too long", `{` + chatMessages + `,"max_tokens":40000}`, 400},
		{"min_tokens above max_tokens", `{` + chatMessages + `,"max_tokens":2,"min_tokens":3}`, 400},
		{"stream_options without stream", `{` + chatMessages + `,"stream_options":{"include_usage":true}}`, 400},
		{"both generation prompt and continue", `{` + chatMessages + `,"continue_final_message":true}`, 400},
		{"request template untrusted", `{` + chatMessages + `,"chat_template":"{{ messages }}"}`, 400},
		{"body too large", `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}]}`, 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := env.postPath(t, "/v1/chat/completions", tc.body)
			checkError(t, code, body, tc.status)
		})
	}
	if code, body := env.postPath(t, "/v1/chat/completions", `{`+chatMessages+`,"max_tokens":2}`); code != 200 {
		t.Errorf("after errors: status %d: %s", code, body)
	}
}

// TestHTTPChatWithoutTemplate: a simulator without a renderer refuses chat as vLLM refuses a
// model without a chat template.
func TestHTTPChatWithoutTemplate(t *testing.T) {
	env := newTestEnv(t, Config{}, 0, 1, ServerConfig{})
	code, body := env.postPath(t, "/v1/chat/completions", `{`+chatMessages+`}`)
	checkError(t, code, body, 400)
	if !strings.Contains(string(body), "chat template") {
		t.Errorf("body %s does not mention the chat template", body)
	}
}

func checkError(t *testing.T, code int, body []byte, status int) {
	t.Helper()
	if code != status {
		t.Fatalf("status: got %d, want %d (%s)", code, status, body)
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Code != status || e.Error.Type == "" {
		t.Errorf("error body %s: %v", body, err)
	}
}
