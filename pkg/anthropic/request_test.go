package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

// jsonValue decodes s for comparison (key order aside; ordered checks use strings).
func jsonValue(t *testing.T, s []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(s, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	return v
}

// TestParseConverts checks the conversion into the chat request on Anthropic's documented
// request shapes, against the chat body vLLM's Anthropic serving builds for them.
func TestParseConverts(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"basic", `{"model":"m","max_tokens":1024,"messages":[{"role":"user","content":"Hello, world"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Hello, world"}],"max_tokens":1024,"max_completion_tokens":1024}`},
		{"system string and sampling", `{"model":"m","max_tokens":5,"system":"Be brief.","temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["\n\nHuman:"],"metadata":{"user_id":"u1"},"stream":true,"messages":[{"role":"user","content":"Hi"}]}`,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":5,"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true},"temperature":0.5,"top_p":0.9,"top_k":40,"stop":["\n\nHuman:"],"user":"u1"}`},
		{"system blocks joined, cache_control ignored", `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"You are a coder. "},{"type":"text","text":"Use tools.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"Hi","cache_control":{"type":"ephemeral"}}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":"You are a coder. Use tools."},{"role":"user","content":"Hi"}],"max_tokens":5,"max_completion_tokens":5}`},
		{"multi-turn, prefill", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"Hello there."},{"role":"assistant","content":"Hi, I'm Claude. How can I help you?"},{"role":"user","content":"Can you explain LLMs in plain English?"},{"role":"assistant","content":"The best answer is ("}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Hello there."},{"role":"assistant","content":"Hi, I'm Claude. How can I help you?"},{"role":"user","content":"Can you explain LLMs in plain English?"},{"role":"assistant","content":"The best answer is ("}],"max_tokens":5,"max_completion_tokens":5}`},
		{"images", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ"}},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},{"type":"text","text":"What is in these images?"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4AAQ"}},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}},{"type":"text","text":"What is in these images?"}]}],"max_tokens":5,"max_completion_tokens":5}`},
		{"tool use and result", `{"model":"m","max_tokens":5,
			"tools":[{"name":"get_weather","description":"Get the current weather in a given location","input_schema":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}],
			"messages":[{"role":"user","content":"What's the weather like in San Francisco?"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"I should call the tool.","signature":"abc"},{"type":"text","text":"I'll check."},{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"location":"San Francisco, CA", "unit": "c"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01A","content":"15 degrees"},{"type":"text","text":"And tomorrow?"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"What's the weather like in San Francisco?"},{"role":"assistant","reasoning":"I should call the tool.","tool_calls":[{"id":"toolu_01A","type":"function","function":{"name":"get_weather","arguments":"{\"location\": \"San Francisco, CA\", \"unit\": \"c\"}"}}],"content":"I'll check."},{"role":"tool","tool_call_id":"toolu_01A","content":"15 degrees"},{"role":"user","content":"And tomorrow?"}],"max_tokens":5,"max_completion_tokens":5,"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a given location","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}],"tool_choice":"auto"}`},
		{"tool result blocks, is_error, no text left", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"ConnectionError"}]}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"t1","content":"ConnectionError"}],"max_tokens":5,"max_completion_tokens":5}`},
		{"schema without type, tool_choice any", `{"model":"m","max_tokens":5,"tool_choice":{"type":"any","disable_parallel_tool_use":true},"tools":[{"name":"f","input_schema":{"properties":{}}},{"type":"custom","name":"g","input_schema":{}}],"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":5,"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{},"type":"object"}}},{"type":"function","function":{"name":"g","parameters":{"type":"object"}}}],"tool_choice":"required","parallel_tool_calls":false}`},
		{"tool_choice tool", `{"model":"m","max_tokens":5,"tool_choice":{"type":"tool","name":"f"},"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":5,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`},
		{"thinking enabled, empty text dropped, redacted thinking dropped, the assistant message kept empty as vLLM keeps it", `{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"Why?"}]},{"role":"assistant","content":[{"type":"redacted_thinking","data":"EmwK"}]},{"role":"user","content":"ok"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Why?"},{"role":"assistant"},{"role":"user","content":"ok"}],"max_tokens":2048,"max_completion_tokens":2048,"thinking_token_budget":1024}`},
		{"chat_template_kwargs passed on", `{"model":"m","max_tokens":16,"chat_template_kwargs":{"enable_thinking":false,"x":[1,2]},"messages":[{"role":"user","content":"Hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":16,"max_completion_tokens":16,"chat_template_kwargs":{"enable_thinking":false,"x":[1,2]}}`},
		{"Claude Code's billing header dropped", `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.3; cch=9f2e1;"},{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"x"},{"role":"system","content":"x-anthropic-billing-header: cch=1"},{"role":"system","content":[{"type":"text","text":"x-anthropic-billing-header: cch=2"},{"type":"text","text":"Be terse."}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":"You are Claude Code."},{"role":"user","content":"x"},{"role":"system","content":"Be terse."}],"max_tokens":5,"max_completion_tokens":5}`},
		{"thinking disabled", `{"model":"m","max_tokens":5,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":5,"reasoning_effort":"none"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, aerr := Parse([]byte(tt.body), false)
			if aerr != nil {
				t.Fatalf("Parse: %v", aerr)
			}
			if got := string(req.ChatBody()); got != tt.want {
				t.Errorf("chat body:\ngot  %s\nwant %s\ndiff (-want +got):\n%s", got, tt.want, cmp.Diff(jsonValue(t, []byte(tt.want)), jsonValue(t, req.ChatBody())))
			}
			if _, perr := openai.ParseChat(req.ChatBody(), openai.Limits{}); perr != nil {
				t.Errorf("ParseChat rejects the converted body: %v", perr)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	req, aerr := Parse([]byte(`{"model":"claude-x","max_tokens":7,"stream":true,"stop_sequences":["a","b"],"messages":[{"role":"user","content":"x"}]}`), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if req.Model != "claude-x" || req.MaxTokens != 7 || !req.Stream || !cmp.Equal(req.StopSequences, []string{"a", "b"}) {
		t.Errorf("got %+v", req)
	}
	// count_tokens: no max_tokens, and stream means nothing.
	req, aerr = Parse([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`), true)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if req.MaxTokens != 0 || req.Stream || strings.Contains(string(req.ChatBody()), "stream") {
		t.Errorf("count_tokens request %+v body %s", req, req.ChatBody())
	}
}

// TestParseRejects: every bad body is a 400 naming the member, never a panic or a pass.
func TestParseRejects(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"x"}]`
	tests := []struct{ name, body, param, msg string }{
		{"not JSON", `{`, "", "not valid JSON"},
		{"not an object", `[1]`, "", "JSON object"},
		{"no model", `{"max_tokens":5,` + msgs + `}`, "model", "Field required"},
		{"no max_tokens", `{"model":"m",` + msgs + `}`, "max_tokens", "max_tokens: Field required"},
		{"zero max_tokens", `{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens", "positive"},
		{"float max_tokens", `{"model":"m","max_tokens":1.5,` + msgs + `}`, "max_tokens", "integer"},
		{"string max_tokens", `{"model":"m","max_tokens":"5",` + msgs + `}`, "max_tokens", "integer"},
		{"no messages", `{"model":"m","max_tokens":5}`, "messages", "at least one"},
		{"bad role", `{"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}`, "messages[0].role", "expected"},
		{"no content", `{"model":"m","max_tokens":5,"messages":[{"role":"user"}]}`, "messages[0].content", "Field required"},
		{"chat_template_kwargs not an object", `{"model":"m","max_tokens":5,"chat_template_kwargs":[1],` + msgs + `}`, "chat_template_kwargs", "expected an object"},
		{"unknown block", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, "messages[0].content[0].type", `"document" are not supported`},
		{"block without type", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type", "Field required"},
		{"text without text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text", "Field required"},
		{"tool_result without tool_use", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"r"}]}]}`, "messages[0].content[0].tool_use_id", "answers no tool_use"},
		{"tool_result before its tool_use", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "messages[0].content[0].tool_use_id", "answers no tool_use"},
		{"tool_result in assistant", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`, "messages[0].content[0]", "only allowed in user"},
		{"tool_use in user", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "messages[0].content[0]", "only allowed in assistant"},
		{"tool_use input not object", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":[1]}]}]}`, "messages[0].content[0].input", "object"},
		{"image without source", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, "messages[0].content[0].source", "Field required"},
		{"image file source", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`, "messages[0].content[0].source.type", "not supported"},
		{"server tool", `{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + msgs + `}`, "tools[0].type", "not supported"},
		{"tool without schema", `{"model":"m","max_tokens":5,"tools":[{"name":"f"}],` + msgs + `}`, "tools[0].input_schema", "object"},
		{"tool_choice bad", `{"model":"m","max_tokens":5,"tool_choice":{"type":"some"},` + msgs + `}`, "tool_choice.type", "expected"},
		{"tool_choice tool without name", `{"model":"m","max_tokens":5,"tool_choice":{"type":"tool"},` + msgs + `}`, "tool_choice.name", "Field required"},
		{"thinking without budget", `{"model":"m","max_tokens":5,"thinking":{"type":"enabled"},` + msgs + `}`, "thinking.budget_tokens", "at least 1024"},
		{"thinking budget under 1024", `{"model":"m","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":1023},` + msgs + `}`, "thinking.budget_tokens", "at least 1024"},
		{"thinking budget not under max_tokens", `{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":2048},` + msgs + `}`, "thinking.budget_tokens", "less than max_tokens"},
		{"thinking type unknown", `{"model":"m","max_tokens":5,"thinking":{"type":"on"},` + msgs + `}`, "thinking.type", "expected"},
		{"effort unknown", `{"model":"m","max_tokens":5,"output_config":{"effort":"none"},` + msgs + `}`, "output_config.effort", "expected"},
		{"tool_result block unknown", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"document"}]}]}]}`, "messages[1].content[0].content[0].type", "not supported"},
		{"system number", `{"model":"m","max_tokens":5,"system":5,` + msgs + `}`, "system", "expected a string"},
		{"system image block", `{"model":"m","max_tokens":5,"system":[{"type":"image"}],` + msgs + `}`, "system[0]", "text block"},
		{"stop_sequences not strings", `{"model":"m","max_tokens":5,"stop_sequences":[1],` + msgs + `}`, "stop_sequences[0]", "expected a string"},
		{"role not a string", `{"model":"m","max_tokens":5,"messages":[{"role":1,"content":"x"}]}`, "messages[0].role", "expected a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, aerr := Parse([]byte(tt.body), false)
			if aerr == nil {
				t.Fatalf("accepted %s", tt.body)
			}
			if aerr.Status != 400 || aerr.Param != tt.param || !strings.Contains(aerr.Message, tt.msg) {
				t.Errorf("got %d %q %q, want 400 %q containing %q", aerr.Status, aerr.Param, aerr.Message, tt.param, tt.msg)
			}
		})
	}
}
