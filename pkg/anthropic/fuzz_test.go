package anthropic

import (
	"encoding/json"
	"testing"

	"github.com/kvgate/kvgate/pkg/openai"
)

// FuzzParse: any body is a 400 or a request whose chat body is JSON that ParseChat reads
// without panicking; nothing else.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}]}]}`,
		`{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{"properties":{}}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"t1","name":"f","input":{"a":[1,{"b":null}]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}]}]}]}`,
		`{"model":"m","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":9},"stop_sequences":["\u0000"],"metadata":{"user_id":"u"},"messages":[{"role":"system","content":"s"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"}]}]}`,
		`{"model":"m","max_tokens":1.0,"messages":[]}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, countTokens bool) {
		req, aerr := Parse(b, countTokens)
		if aerr != nil {
			if aerr.Status != 400 || aerr.Message == "" {
				t.Fatalf("error %d %q for %q", aerr.Status, aerr.Message, b)
			}
			return
		}
		if !json.Valid(req.ChatBody()) {
			t.Fatalf("chat body is not JSON: %q from %q", req.ChatBody(), b)
		}
		if !countTokens && req.MaxTokens < 1 {
			t.Fatalf("accepted max_tokens %d", req.MaxTokens)
		}
		if _, perr := openai.ParseChat(req.ChatBody(), openai.Limits{}); perr != nil && perr.Status >= 500 {
			t.Fatalf("ParseChat %d on %q", perr.Status, req.ChatBody())
		}
	})
}
