package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseChat(t *testing.T) {
	truth := true
	for _, tt := range []struct {
		name string
		body string
		want ChatRequest
	}{
		{
			name: "minimal",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			want: ChatRequest{Model: "m", Messages: []ChatMessage{{Role: "user", Content: Content{Kind: ContentString, Text: "hi"}}},
				ToolChoice: ToolChoice{Mode: ToolChoiceNone}, AddGenerationPrompt: true, Sampling: Sampling{N: 1}},
		},
		{
			name: "parts, null content, names, custom role",
			body: `{"messages":[{"role":"narrator","name":"n","content":[{"type":"text","text":"a"},"b",{"type":"refusal","refusal":null},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null}]}`,
			want: ChatRequest{Messages: []ChatMessage{
				{Role: "narrator", Name: "n", HasName: true, Content: Content{Kind: ContentParts, Parts: []ContentPart{
					{Type: "text", Text: "a"}, {Text: "b", IsString: true}, {Type: "refusal", TextNull: true}, {Type: "image_url", TextNull: true},
				}}},
				{Role: "assistant"},
			}, ToolChoice: ToolChoice{Mode: ToolChoiceNone}, AddGenerationPrompt: true, Sampling: Sampling{N: 1}},
		},
		{
			name: "tool calls, reasoning_content renamed, tool result",
			body: `{"messages":[{"role":"assistant","reasoning_content":"think","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2},"strict":true}}]}`,
			want: ChatRequest{Messages: []ChatMessage{
				{Role: "assistant", Reasoning: "think", HasReasoning: true, HasToolCalls: true, ToolCalls: []ToolCall{{ID: "c1", HasID: true, Type: "function", Name: "f", HasName: true, Arguments: json.RawMessage(`"{\"a\":1}"`)}}},
				{Role: "tool", ToolCallID: "c1", HasToolCallID: true, Content: Content{Kind: ContentString, Text: "r"}},
			},
				Tools:               []ChatTool{{Type: "function", Name: "f", Parameters: json.RawMessage(`{"z":1,"a":2}`), Extra: []RawMember{{"strict", json.RawMessage(`true`)}}}},
				ToolChoice:          ToolChoice{Mode: ToolChoiceAuto},
				AddGenerationPrompt: true, Sampling: Sampling{N: 1}},
		},
		{
			name: "vLLM extensions and sampling",
			body: `{"messages":[],"add_generation_prompt":false,"continue_final_message":true,"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"low","documents":[{"title":"t","text":"x"}],"chat_template":"{{x}}","add_special_tokens":true,"max_completion_tokens":5,"max_tokens":7,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2,"min_tokens":1,"parallel_tool_calls":true,"temperature":0.5}`,
			want: ChatRequest{Messages: []ChatMessage{}, ToolChoice: ToolChoice{Mode: ToolChoiceNone},
				ContinueFinalMessage: true, ChatTemplateKwargs: json.RawMessage(`{"enable_thinking":false}`), ReasoningEffort: "low",
				Documents: json.RawMessage(`[{"title":"t","text":"x"}]`), ChatTemplate: "{{x}}", HasChatTemplate: true, AddSpecialTokens: true,
				MaxCompletionTokens: 5, Logprobs: true, TopLogprobs: 2, MinTokens: 1, ParallelToolCalls: &truth,
				Sampling: Sampling{N: 1, MaxTokens: 7, Stream: true, IncludeUsage: true, Temperature: ptr(0.5)}},
		},
		{
			name: "empty stream_options without stream is allowed (vLLM checks truthiness)",
			body: `{"messages":[],"stream_options":{}}`,
			want: ChatRequest{Messages: []ChatMessage{}, ToolChoice: ToolChoice{Mode: ToolChoiceNone}, AddGenerationPrompt: true, Sampling: Sampling{N: 1}},
		},
		{
			name: "named tool choice",
			body: `{"messages":[],"tools":[{"function":{"name":"a"}},{"function":{"name":"b","description":null}}],"tool_choice":{"type":"function","function":{"name":"b"}}}`,
			want: ChatRequest{Messages: []ChatMessage{}, Tools: []ChatTool{{Type: "function", Name: "a"}, {Type: "function", Name: "b"}},
				ToolChoice: ToolChoice{Mode: ToolChoiceFunction, Name: "b"}, AddGenerationPrompt: true, Sampling: Sampling{N: 1}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseChat([]byte(tt.body), Limits{})
			if err != nil {
				t.Fatalf("got error %q, want none", err.Message)
			}
			opts := []cmp.Option{cmpopts.IgnoreUnexported(ChatRequest{}), cmpopts.IgnoreFields(ContentPart{}, "Raw"), cmpopts.EquateEmpty()}
			if d := cmp.Diff(tt.want, *got, opts...); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestParseChatErrors(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"no messages", `{"model":"m"}`, 400, "messages is required"},
		{"messages not a list", `{"messages":{}}`, 400, "messages must be a list of messages"},
		{"role missing", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role is required"},
		{"bad content", `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content must be a string, a list of content parts or null"},
		{"bad part", `{"messages":[{"role":"user","content":[5]}]}`, 400, "messages[0].content[0] must be a string or an object"},
		{"bad text", `{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, 400, "messages[0].content[0].text must be a string"},
		{"empty tools", `{"messages":[],"tools":[]}`, 400, "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely."},
		{"tool choice without tools", `{"messages":[],"tool_choice":"auto"}`, 400, "When using `tool_choice`, `tools` must be set."},
		{"bad tool choice", `{"messages":[],"tools":[{"function":{"name":"a"}}],"tool_choice":"always"}`, 400, `Invalid value for ` + "`tool_choice`" + `: always! Only named tools, "none", "auto" or "required" are supported.`},
		{"unknown named tool", `{"messages":[],"tools":[{"function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"z"}}}`, 400, "The tool specified in `tool_choice` does not match any of the specified `tools`"},
		{"named tool without name", `{"messages":[],"tools":[{"function":{"name":"a"}}],"tool_choice":{"type":"function","function":{}}}`, 400, "Expected field `name` in `function` in `tool_choice`! Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`"},
		{"both prompts", `{"messages":[],"continue_final_message":true}`, 400, "Cannot set both `continue_final_message` and `add_generation_prompt` to True."},
		{"stream options without stream", `{"messages":[],"stream_options":{"include_usage":true}}`, 400, "Stream options can only be defined when `stream=True`."},
		{"bad effort", `{"messages":[],"reasoning_effort":"huge"}`, 400, "reasoning_effort must be one of none, minimal, low, medium, high, xhigh, max"},
		{"top_logprobs without logprobs", `{"messages":[],"top_logprobs":3}`, 400, "when using `top_logprobs`, `logprobs` must be set to true."},
		{"tool without name", `{"messages":[],"tools":[{"function":{}}]}`, 400, "tools[0].function.name is required"},
		{"tool parameters not an object", `{"messages":[],"tools":[{"function":{"name":"a","parameters":[]}}]}`, 400, "tools[0].function.parameters must be an object"},
		{"documents not objects", `{"messages":[],"documents":["x"]}`, 400, "documents must be a list of objects with string values"},
		{"too deep", `{"messages":[],"chat_template_kwargs":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, 400, "request body nests 71 levels deep, more than the 64 allowed"},
		{"too many messages", `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user"},`, 9), ",") + `]}`, 413, "a chat request may carry at most 8 messages, got 9"},
		{"invalid JSON", `{"messages":[}`, 400, "invalid JSON body: syntax error at offset 14"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseChat([]byte(tt.body), Limits{MaxMessages: 8})
			if err == nil {
				t.Fatalf("got no error, want %d %q", tt.status, tt.msg)
			}
			if err.Status != tt.status || err.Message != tt.msg {
				t.Errorf("got %d %q, want %d %q", err.Status, err.Message, tt.status, tt.msg)
			}
		})
	}
}

func TestChatAppendUpstream(t *testing.T) {
	body := `{"model":"client","messages":[{"role":"user","content":"hi"}],"tools":[{"function":{"name":"f","parameters":{"b":1,"a":2}}}],"x_extra":1.50}`
	req, err := ParseChat([]byte(body), Limits{})
	if err != nil {
		t.Fatal(err.Message)
	}
	got := string(req.AppendUpstream(nil, "worker", nil))
	want := `{"messages":[{"role":"user","content":"hi"}],"model":"worker","tools":[{"function":{"name":"f","parameters":{"b":1,"a":2}}}],"x_extra":1.50}`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func FuzzParseChat(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},"b",{"type":"image_url"}]}],"tools":[{"function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":null}],"chat_template_kwargs":{"enable_thinking":true},"documents":[{"a":"b"}]}`,
		`{"messages":[],"stream":true,"stream_options":{"include_usage":true},"reasoning_effort":"high","continue_final_message":true,"add_generation_prompt":false}`,
		`{"messages":[{"role":"x","reasoning_content":"r","name":"\u00e9"}],"tool_choice":{"type":"function","function":{"name":"q"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ParseChat(b, Limits{MaxMessages: 64})
		if err != nil {
			if err.Status != 400 && err.Status != 413 {
				t.Fatalf("status %d for a parse error", err.Status)
			}
			return
		}
		if req.ContinueFinalMessage && req.AddGenerationPrompt {
			t.Fatalf("accepted both continue_final_message and add_generation_prompt: %q", b)
		}
		if req.Tools != nil && len(req.Tools) == 0 {
			t.Fatalf("accepted an empty tools list: %q", b)
		}
		for _, raw := range []json.RawMessage{req.ChatTemplateKwargs, req.Documents, req.ResponseFormat} {
			if raw != nil && !json.Valid(raw) {
				t.Fatalf("kept invalid raw JSON %q", raw)
			}
		}
		out := req.AppendUpstream(nil, "m\"x", nil)
		if !json.Valid(out) {
			t.Fatalf("upstream body is not JSON: %q", out)
		}
	})
}

// FuzzSkipTrusted checks the trusted skipper against the validating scanner on every valid
// JSON value: both must find the same end.
func FuzzSkipTrusted(f *testing.F) {
	for _, s := range []string{`"a\"b\\"`, `{"a":[1,"]",{"b":"\\\\"}]}`, `-1.5e3`, `[ true , null ]`, `"\\\"}"`, `{"k\u00e9":"v"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = []byte(strings.TrimLeft(string(b), " \t\r\n"))
		if len(b) == 0 || !json.Valid(b) {
			return
		}
		want, err := scanValue(b, 0, 1)
		if err != nil {
			return // deeper than the scanner allows
		}
		if got := skipTrusted(b, 0); got != want {
			t.Fatalf("%q: skipTrusted ends at %d, scanValue at %d", b, got, want)
		}
	})
}

func TestAppendUpstreamEdits(t *testing.T) {
	tests := []struct {
		name  string
		edits Edits
		want  string
	}{
		{"none", nil, `{"max_tokens":200,"messages":[],"min_tokens":3,"model":"w","stream":true}`},
		{"replace, remove and add", Edits{{"max_tokens", json.RawMessage(`1`)}, {"min_tokens", nil}, {"stream", json.RawMessage(`false`)}, {"kv_transfer_params", json.RawMessage(`{"a":1}`)}},
			`{"kv_transfer_params":{"a":1},"max_tokens":1,"messages":[],"model":"w","stream":false}`},
		{"a later edit wins", Edits{{"n", json.RawMessage(`2`)}, {"n", json.RawMessage(`1`)}, {"stream", nil}, {"stream", json.RawMessage(`true`)}},
			`{"max_tokens":200,"messages":[],"min_tokens":3,"model":"w","n":1,"stream":true}`},
		{"removing an absent key and the model", Edits{{"stop", nil}, {"model", json.RawMessage(`"x"`)}}, `{"max_tokens":200,"messages":[],"min_tokens":3,"model":"w","stream":true}`},
	}
	req, aerr := ParseChat([]byte(`{"model":"c","messages":[],"max_tokens":200,"min_tokens":3,"stream":true}`), Limits{})
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(req.AppendUpstream(nil, "w", tt.edits))
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("%s is not valid JSON", got)
			}
		})
	}
}
