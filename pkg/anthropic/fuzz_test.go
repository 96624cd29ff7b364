package anthropic

import (
	"bytes"
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
		`{"model":"m","max_tokens":4096,"output_config":{"effort":"high"},"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"é":1.50,"a":"\ud83c","a":[1e400]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"},{"type":"image","source":{"type":"url","url":"u"}}]}]}]}`,
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

// FuzzPyJSON: every valid JSON value is rewritten as valid, ASCII-only JSON without panicking;
// invalid input is refused.
func FuzzPyJSON(f *testing.F) {
	for _, s := range pyInputs {
		f.Add([]byte(s))
	}
	f.Add([]byte(`[1e999,"\ud800",{"a":{"a":[]}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, ok := appendPyJSON(nil, b)
		if ok != json.Valid(b) {
			t.Fatalf("ok %v for %q", ok, b)
		}
		if !ok {
			return
		}
		for _, c := range out {
			if c >= 0x80 {
				t.Fatalf("non-ASCII output %q for %q", out, b)
			}
		}
		// Infinity is Python's spelling of an out-of-range float, not JSON.
		if !bytes.Contains(out, []byte("Infinity")) && !json.Valid(out) {
			t.Fatalf("invalid output %q for %q", out, b)
		}
	})
}
