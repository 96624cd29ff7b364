package conversation

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/pkg/openai"
)

// TestChatBody: Responses requests (the reference's documented examples and vLLM's merging
// rules) and the chat request each turn runs as.
func TestChatBody(t *testing.T) {
	weather := `{"type":"function","name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}`
	for _, tt := range []struct{ name, body, want string }{
		{"text input", `{"model":"m","input":"Tell me a three sentence bedtime story about a unicorn."}`,
			`{"model":"m","messages":[{"role":"user","content":"Tell me a three sentence bedtime story about a unicorn."}]}`},
		{"instructions", `{"model":"m","instructions":"Talk like a pirate.","input":"Are semicolons optional in JavaScript?"}`,
			`{"model":"m","messages":[{"role":"system","content":"Talk like a pirate."},{"role":"user","content":"Are semicolons optional in JavaScript?"}]}`},
		{"message items and parts", `{"input":[{"role":"developer","content":"Talk like a pirate."},{"type":"message","role":"user","content":[{"type":"input_text","text":"what is in this image?"},{"type":"input_image","image_url":"https://x/y.jpg","detail":"low"}]}]}`,
			`{"messages":[{"role":"developer","content":"Talk like a pirate."},{"role":"user","content":[{"type":"text","text":"what is in this image?"},{"type":"image_url","image_url":{"url":"https://x/y.jpg","detail":"low"}}]}]}`},
		{"function calling round trip", `{"input":[{"role":"user","content":"What is the weather like in Paris today?"},` +
			`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
			`{"type":"function_call_output","call_id":"call_1","output":"{\"temperature\": 14}"}],"tools":[` + weather + `]}`,
			`{"messages":[{"role":"user","content":"What is the weather like in Paris today?"},` +
				`{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
				`{"role":"tool","content":"{\"temperature\": 14}","tool_call_id":"call_1"}],` +
				`"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}}]}`},
		{"reasoning, text and calls of one turn merge", `{"input":[{"role":"user","content":"hi"},` +
			`{"type":"reasoning","summary":[{"type":"summary_text","text":"sum"}],"content":[{"type":"reasoning_text","text":"think"}]},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A"},{"type":"output_text","text":"ignored"}]},` +
			`{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"g","arguments":"[]"},` +
			`{"type":"message","role":"assistant","content":"B"},{"type":"reasoning","summary":[{"type":"summary_text","text":"only summary"}]}]}`,
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"A","reasoning":"think","tool_calls":[` +
				`{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"[]"}}]},` +
				`{"role":"assistant","content":"B","reasoning":"only summary"}]}`},
		{"sampling and format", `{"model":"m","input":"x","max_output_tokens":64,"temperature":0.2,"top_p":0.9,"user":"u1","reasoning":{"effort":"low"},` +
			`"text":{"format":{"type":"json_schema","name":"r","schema":{"type":"object"},"strict":true}},"include":["message.output_text.logprobs"],"top_logprobs":3,` +
			`"stream":true,"seed":7,"stop":["\n\n"],"metadata":{"k":"v"},"store":false,"prompt_cache_key":"pk"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object"},"strict":true}},` +
				`"max_completion_tokens":64,"temperature":0.2,"top_p":0.9,"logprobs":true,"top_logprobs":3,"reasoning_effort":"low","user":"u1","seed":7,"stop":["\n\n"],` +
				`"stream":true,"stream_options":{"include_usage":true}}`},
		{"tool choice named, no parallel calls", `{"input":"x","tools":[` + weather + `],"tool_choice":{"type":"function","name":"get_weather"},"parallel_tool_calls":false,"text":{"format":{"type":"json_object"}}}`,
			`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}}],` +
				`"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,"response_format":{"type":"json_object"}}`},
		{"partial assistant message is continued", `{"input":[{"role":"user","content":"count"},{"type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"1, 2,"}]}]}`,
			`{"messages":[{"role":"user","content":"count"},{"role":"assistant","content":"1, 2,"}],"continue_final_message":true,"add_generation_prompt":false}`},
		{"tool output as parts", `{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]}`,
			`{"messages":[{"role":"tool","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"tool_call_id":"c"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, nil)
			tn, aerr := s.Begin(context.Background(), "", mustParse(t, tt.body))
			if aerr != nil {
				t.Fatal(aerr.Message)
			}
			got := tn.ChatBody(nil, 0)
			if d := jsonDiff(t, []byte(tt.want), got); d != "" {
				t.Errorf("chat body (-want +got):\n%s\n%s", d, got)
			}
			if _, perr := openai.ParseChat(got, openai.Limits{}); perr != nil {
				t.Errorf("the chat body does not parse as chat: %s", perr.Message)
			}
		})
	}
}

// TestChatBodyTruncation: dropping the oldest messages keeps the instructions and leaves no
// tool result at the front without its call.
func TestChatBodyTruncation(t *testing.T) {
	s := newService(t, nil)
	tn, aerr := s.Begin(context.Background(), "", mustParse(t, `{"instructions":"sys","input":[{"role":"user","content":"q1"},`+
		`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"},{"role":"user","content":"q2"}]}`))
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	if n := tn.Droppable(); n != 3 {
		t.Fatalf("droppable: got %d, want 3", n)
	}
	for drop, want := range map[int]string{
		1: `{"messages":[{"role":"system","content":"sys"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c"},{"role":"user","content":"q2"}]}`,
		2: `{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"q2"}]}`,
		3: `{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"q2"}]}`,
	} {
		if d := jsonDiff(t, []byte(want), tn.ChatBody(nil, drop)); d != "" {
			t.Errorf("drop %d (-want +got):\n%s", drop, d)
		}
	}
}
