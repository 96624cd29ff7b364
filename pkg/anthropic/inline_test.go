package anthropic

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

// TestInlineSystemPlacement checks both placements of system messages inside messages, each
// conversation's messages written by hand from vLLM's normalize_inline_system
// (entrypoints/anthropic/inline_system.py) and _convert_messages.
func TestInlineSystemPlacement(t *testing.T) {
	const tool = `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}`
	const calls = `{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	tests := []struct {
		name, system, messages string
		preserve, fold         string // fold "" when the request has nothing to fold
	}{
		{"Claude Code reminder after the last user turn", `"S"`,
			`{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"},{"role":"system","content":"<system-reminder>r</system-reminder>"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"},{"role":"system","content":"<system-reminder>r</system-reminder>"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2\n\n<system-reminder>r</system-reminder>"}`},
		{"no system prompt: folded in both modes", ``,
			`{"role":"user","content":"q"},{"role":"system","content":"r"}`,
			`{"role":"user","content":"q\n\nr"}`, ``},
		{"leading system messages join the system prompt", `[{"type":"text","text":"T"}]`,
			`{"role":"system","content":"A"},{"role":"system","content":[{"type":"text","text":"B"},{"type":"text","text":"C"}]},{"role":"system","content":""},{"role":"user","content":"q"}`,
			`{"role":"system","content":"T\n\nA\n\nBC"},{"role":"user","content":"q"}`, ``},
		{"leading system messages are a system prompt", ``,
			`{"role":"system","content":"A"},{"role":"user","content":"q"},{"role":"system","content":[{"type":"text","text":"x-anthropic-billing-header: h"},{"type":"text","text":"B"},{"type":"text","text":"C"}]}`,
			`{"role":"system","content":"A"},{"role":"user","content":"q"},{"role":"system","content":"BC"}`,
			`{"role":"system","content":"A"},{"role":"user","content":"q\n\nBC"}`},
		{"between tool_use and its result: after the result, into its content", `"S"`,
			`{"role":"user","content":"q"},` + tool + `,{"role":"system","content":"n"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out"}]}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},` + calls + `,{"role":"tool","tool_call_id":"t1","content":"out"},{"role":"system","content":"n"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},` + calls + `,{"role":"tool","tool_call_id":"t1","content":"out\n\nn"}`},
		{"tool result blocks: onto the last text item, or a new one", `"S"`,
			`{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r1"}]},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}]},{"role":"system","content":"n"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"t2","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"t1","content":"r1"},{"role":"tool","tool_call_id":"t2","content":""},{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]},{"role":"system","content":"n"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"t2","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"t1","content":"r1"},{"role":"tool","tool_call_id":"t2","content":"n"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}`},
		{"user with results and text: onto its own text", `"S"`,
			`{"role":"user","content":"q"},` + tool + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out"},{"type":"text","text":"more"}]},{"role":"system","content":"n1"},{"role":"system","content":"n2"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},` + calls + `,{"role":"tool","tool_call_id":"t1","content":"out"},{"role":"user","content":"more"},{"role":"system","content":"n1"},{"role":"system","content":"n2"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},` + calls + `,{"role":"tool","tool_call_id":"t1","content":"out"},{"role":"user","content":"more\n\nn1\n\nn2"}`},
		{"after an assistant: the start of the next user message", `"S"`,
			`{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"system","content":"n1"},{"role":"system","content":"n2"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"system","content":"n1"},{"role":"system","content":"n2"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":[{"type":"text","text":"n1\n\nn2\n\nx"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}`},
		{"between assistants and at the end: a user message of its own", `"S"`,
			`{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"system","content":"n"},{"role":"assistant","content":"b"},{"role":"system","content":"m"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"system","content":"n"},{"role":"assistant","content":"b"},{"role":"system","content":"m"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"n"},{"role":"assistant","content":"b"},{"role":"user","content":"m"}`},
		{"a billing header alone folds nothing", `"S"`,
			`{"role":"user","content":"q"},{"role":"system","content":"x-anthropic-billing-header: h"}`,
			`{"role":"system","content":"S"},{"role":"user","content":"q"}`, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","max_tokens":5,`
			if tt.system != "" {
				body += `"system":` + tt.system + `,`
			}
			body += `"messages":[` + tt.messages + `]}`
			req, aerr := Parse([]byte(body), false)
			if aerr != nil {
				t.Fatalf("Parse: %v", aerr)
			}
			wrap := func(msgs string) string {
				return `{"model":"m","messages":[` + msgs + `],"max_tokens":5,"max_completion_tokens":5}`
			}
			check := func(what string, got []byte, want string) {
				t.Helper()
				if string(got) != wrap(want) {
					t.Errorf("%s:\ngot  %s\nwant %s\ndiff (-want +got):\n%s", what, got, wrap(want), cmp.Diff(jsonValue(t, []byte(wrap(want))), jsonValue(t, got)))
				}
				if _, perr := openai.ParseChat(got, openai.Limits{}); perr != nil {
					t.Errorf("%s: ParseChat rejects it: %v", what, perr)
				}
			}
			check("preserve", req.ChatBody(), tt.preserve)
			if tt.fold == "" {
				if req.FoldedChatBody() != nil {
					t.Errorf("folded body %s, want none", req.FoldedChatBody())
				}
				return
			}
			check("fold", req.FoldedChatBody(), tt.fold)
		})
	}
}

// TestInlineSystemErrors: what the placement reads is validated with the converter's messages,
// naming the client's index.
func TestInlineSystemErrors(t *testing.T) {
	for _, tt := range []struct{ messages, param string }{
		{`{"role":"user","content":"q"},{"role":"system"}`, "messages[1].content"},
		{`{"role":"user","content":"q"},{"role":"system","content":[{"type":"video"}]}`, "messages[1].content[0].type"},
		{`{"role":"user","content":"q"},{"role":"tool","content":"x"}`, "messages[1].role"},
		{`{"role":"system","content":7},{"role":"user","content":"q"}`, "messages[0].content"},
	} {
		_, aerr := Parse([]byte(`{"model":"m","max_tokens":5,"system":"S","messages":[`+tt.messages+`]}`), false)
		if aerr == nil || aerr.Param != tt.param {
			t.Errorf("%s: got %v, want a 400 on %s", tt.messages, aerr, tt.param)
		}
	}
}
