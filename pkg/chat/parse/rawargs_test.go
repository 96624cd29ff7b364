package parse

import (
	"strings"
	"testing"
)

// TestRawArguments: with WithRawArguments every JSON format sends a call's arguments exactly as
// the model wrote them, whole or streamed byte by byte: every kind of value, the byte that
// closes it included, and nothing of the envelope around it.
func TestRawArguments(t *testing.T) {
	args := []string{`{"x":1.50}`, `{"a": [1, {"b": "c"}], "n": null}`, `{}`, `[1,2]`, `"s\u00e9"`, `5`, `-1.5e3`, `true`, `null`}
	formats := []struct {
		name, reasoning, tool string
		req                   RequestInfo
		text                  string // ARGS stands for the arguments
	}{
		{"hermes", "", ToolHermes, RequestInfo{ToolsGiven: true}, "<tool_call>\n{\"name\": \"f\", \"arguments\": ARGS}\n</tool_call>"},
		{"hermes, arguments before the name", "", ToolHermes, RequestInfo{ToolsGiven: true}, "<tool_call>\n{\"arguments\": ARGS, \"name\": \"f\"}\n</tool_call>"},
		{"llama3_json", "", ToolLlama3JSON, RequestInfo{ToolsGiven: true}, `{"name": "f", "parameters": ARGS}`},
		{"mistral array", "", ToolMistral, RequestInfo{ToolsGiven: true}, `[TOOL_CALLS] [{"name": "f", "arguments": ARGS}]`},
		{"tool_choice required", "", "", RequestInfo{ToolsGiven: true, ToolChoice: "required"}, `[{"name": "f", "parameters": ARGS}]`},
		{"openai", ReasoningGptOss, ToolOpenAI, RequestInfo{ToolsGiven: true}, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>ARGS<|call|>"},
	}
	for _, f := range formats {
		p := newTestParsers(t, f.reasoning, f.tool, WithRawArguments())
		for _, a := range args {
			text := strings.Replace(f.text, "ARGS", a, 1)
			whole := p.parse(f.req, text)
			streamed, _, _ := streamParts(p, f.req, strings.Split(text, ""))
			for how, m := range map[string]Message{"whole": whole, "streamed": streamed} {
				if len(m.ToolCalls) != 1 || m.ToolCalls[0].Name != "f" || m.ToolCalls[0].Arguments != a {
					t.Errorf("%s %s, %s: got calls %+v, want f with arguments %s", f.name, how, a, m.ToolCalls, a)
				}
			}
		}
	}
}
