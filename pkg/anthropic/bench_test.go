package anthropic

import (
	"fmt"
	"strings"
	"testing"
)

// agentBody is a coding agent's Messages body: a system prompt and n tool-calling turns, each
// a tool_use with an edit's input and a tool_result of text blocks.
func agentBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":4096,"system":"` + strings.Repeat("You are a coding agent. ", 200) + `","tools":[{"name":"edit","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],"messages":[{"role":"user","content":"Fix the bug."}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"text","text":"Editing file %d."},{"type":"tool_use","id":"toolu_%d","name":"edit","input":{"path":"pkg/f%d.go","old_string":"%s","new_string":"%s","replace_all":false,"ratio":0.75}}]}`,
			i, i, i, strings.Repeat(`func old() { return \"é\" }\n`, 12), strings.Repeat(`func new() { return 1 }\n`, 12))
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":[{"type":"text","text":"%s"},{"type":"text","text":"ok"}]}]}`, i, strings.Repeat("line of output\\n", 20))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkParseAgent is the conversion of a 40-turn agent conversation, paid on every request.
func BenchmarkParseAgent(b *testing.B) {
	body := agentBody(40)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, aerr := Parse(body, false); aerr != nil {
			b.Fatal(aerr)
		}
	}
}
