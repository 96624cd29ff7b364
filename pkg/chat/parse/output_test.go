package parse

import (
	"encoding/json"
	"testing"

	"github.com/kvgate/kvgate/pkg/openai"
)

// TestOutput: the API's shapes of one response, streamed (the deltas a client concatenates)
// and whole, with and without parsers, for each choice of reasoning fields.
func TestOutput(t *testing.T) {
	const text = "<think>why</think>Hi<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1.50}}\n</tool_call>"
	p := newTestParsers(t, ReasoningQwen3, ToolHermes)
	tools := RequestInfo{ToolsGiven: true}
	tests := []struct {
		name   string
		p      *Parsers
		fields ReasoningFields
		// want is the whole choice's message and finish reason as JSON, which the streamed
		// deltas must add up to.
		want string
	}{
		{"no parsers", nil, ReasoningFields{Reasoning: true},
			`{"index":1,"message":{"role":"assistant","content":` + jsonString(text) + `,"tool_calls":[]},"logprobs":null,"finish_reason":"stop"}`},
		{"reasoning", p, ReasoningFields{Reasoning: true},
			`{"index":1,"message":{"role":"assistant","content":"Hi","reasoning":"why","tool_calls":[{"id":"ID","type":"function","function":{"name":"f","arguments":"{\"a\": 1.5}"}}]},"logprobs":null,"finish_reason":"tool_calls"}`},
		{"reasoning_content", p, ReasoningFields{ReasoningContent: true},
			`{"index":1,"message":{"role":"assistant","content":"Hi","reasoning_content":"why","tool_calls":[{"id":"ID","type":"function","function":{"name":"f","arguments":"{\"a\": 1.5}"}}]},"logprobs":null,"finish_reason":"tool_calls"}`},
		{"both", p, ReasoningFields{Reasoning: true, ReasoningContent: true},
			`{"index":1,"message":{"role":"assistant","content":"Hi","reasoning":"why","reasoning_content":"why","tool_calls":[{"id":"ID","type":"function","function":{"name":"f","arguments":"{\"a\": 1.5}"}}]},"logprobs":null,"finish_reason":"tool_calls"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole := NewOutput(tt.p, tools, tt.fields).Choice(1, "assistant", text, "stop")
			if got := choiceJSON(t, whole); got != tt.want {
				t.Errorf("whole:\n got %s\nwant %s", got, tt.want)
			}

			o := NewOutput(tt.p, tools, tt.fields)
			var deltas []*openai.ChatDelta
			for i := 0; i < len(text); i += 3 {
				if d := o.Delta(1, []byte(text[i:min(i+3, len(text))]), false); d != nil {
					deltas = append(deltas, d)
				}
			}
			if d := o.Delta(1, nil, true); d != nil {
				deltas = append(deltas, d)
			}
			streamed := accumulate(deltas)
			streamed.Index, streamed.FinishReason = 1, o.FinishReason(1, "stop")
			if got := choiceJSON(t, streamed); got != tt.want {
				t.Errorf("streamed:\n got %s\nwant %s", got, tt.want)
			}
			if d := o.Delta(0, nil, false); d != nil {
				t.Errorf("nothing fed to choice 0: got delta %+v, want none", d)
			}
			if got := o.FinishReason(0, "length"); got != "length" {
				t.Errorf("choice 0 finish reason: got %q, want the engine's %q", got, "length")
			}
		})
	}
}

// accumulate adds streamed deltas up into a choice, as a client does.
func accumulate(deltas []*openai.ChatDelta) openai.ChatChoice {
	ch := openai.ChatChoice{Message: openai.ChatResponseMessage{Role: "assistant", ToolCalls: []openai.ResponseToolCall{}}}
	add := func(dst **string, s *string) {
		if s == nil {
			return
		}
		if *dst == nil {
			*dst = new(string)
		}
		**dst += *s
	}
	for _, d := range deltas {
		add(&ch.Message.Content, d.Content)
		add(&ch.Message.Reasoning, d.Reasoning)
		add(&ch.Message.ReasoningContent, d.ReasoningContent)
		for _, tc := range d.ToolCalls {
			for tc.Index >= len(ch.Message.ToolCalls) {
				ch.Message.ToolCalls = append(ch.Message.ToolCalls, openai.ResponseToolCall{})
			}
			c := &ch.Message.ToolCalls[tc.Index]
			if tc.ID != "" {
				c.ID, c.Type, c.Function.Name = tc.ID, tc.Type, tc.Function.Name
			}
			c.Function.Arguments += tc.Function.Arguments
		}
	}
	return ch
}

// choiceJSON is ch as JSON with tool-call ids replaced by "ID" (they are random).
func choiceJSON(t *testing.T, ch openai.ChatChoice) string {
	t.Helper()
	for i := range ch.Message.ToolCalls {
		if ch.Message.ToolCalls[i].ID == "" {
			t.Errorf("tool call %d has no id", i)
		}
		ch.Message.ToolCalls[i].ID = "ID"
	}
	b, err := json.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
