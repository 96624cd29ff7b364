package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestParseResponsesErrors: what the gateway does not serve, and malformed input, is a 400
// (413 past the item bound) naming the field.
func TestParseResponsesErrors(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		status     int
		param, msg string
	}{
		{"no input", `{"model":"m"}`, 400, "input", "input is required"},
		{"not an object", `[1]`, 400, "", "body must be a JSON object"},
		{"bad json", `{"input":`, 400, "", "invalid JSON body"},
		{"built-in tool", `{"input":"x","tools":[{"type":"web_search"}]}`, 400, "tools[0].type", `built-in tool "web_search" is not supported`},
		{"code interpreter", `{"input":"x","tools":[{"type":"function","name":"f"},{"type":"code_interpreter","container":{"type":"auto"}}]}`, 400, "tools[1].type", `built-in tool "code_interpreter"`},
		{"mcp", `{"input":"x","tools":[{"type":"mcp","server_label":"s"}]}`, 400, "tools[0].type", `built-in tool "mcp"`},
		{"background", `{"input":"x","background":true}`, 400, "background", "background mode is not supported"},
		{"prompt template", `{"input":"x","prompt":{"id":"p"}}`, 400, "prompt", "prompt templates are not supported"},
		{"unknown item type", `{"input":[{"type":"hologram"}]}`, 400, "input[0].type", `unknown item type "hologram"`},
		{"built-in item", `{"input":[{"type":"web_search_call","id":"w"}]}`, 400, "input[0].type", "web_search_call items are not supported"},
		{"unknown part type", `{"input":[{"role":"user","content":[{"type":"input_hologram"}]}]}`, 400, "input[0].content[0].type", "unknown content part type"},
		{"file part", `{"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, 400, "input[0].content[0].type", "input_file parts are not supported"},
		{"bad role", `{"input":[{"role":"wizard","content":"x"}]}`, 400, "input[0].role", "role must be"},
		{"call without call_id", `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "input[0].call_id", "call_id is required"},
		{"output without output", `{"input":[{"type":"function_call_output","call_id":"c"}]}`, 400, "input[0].output", "output is required"},
		{"encrypted reasoning", `{"input":[{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}]}`, 400, "input[0].encrypted_content", "encrypted reasoning"},
		{"item not an object", `{"input":[1]}`, 400, "input[0]", "must be an object"},
		{"both chain and conversation", `{"input":"x","previous_response_id":"resp_a","conversation":"conv_b"}`, 400, "previous_response_id", "cannot both be set"},
		{"tool choice unknown", `{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice", `names function "g"`},
		{"allowed tools", `{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, 400, "tool_choice", "allowed_tools"},
		{"bad effort", `{"input":"x","reasoning":{"effort":"extreme"}}`, 400, "reasoning.effort", "reasoning.effort must be"},
		{"bad truncation", `{"input":"x","truncation":"sometimes"}`, 400, "truncation", "truncation must be"},
		{"bad include", `{"input":"x","include":["everything"]}`, 400, "include", `unknown include value "everything"`},
		{"bad metadata", `{"input":"x","metadata":{"a":1}}`, 400, "metadata", "metadata values must be strings"},
		{"schema without name", `{"input":"x","text":{"format":{"type":"json_schema","schema":{}}}}`, 400, "text.format", "needs a name"},
		{"max output tokens", `{"input":"x","max_output_tokens":0}`, 400, "max_output_tokens", "max_output_tokens must be"},
		{"deep nesting", `{"input":"x","metadata":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, 400, "", "nests 101 levels"},
		{"too many items", `{"input":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"x"},`, 9000), ",") + `]}`, 413, "input", "at most 8192 items"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseResponses([]byte(tt.body), Limits{})
			if err == nil {
				t.Fatal("accepted")
			}
			if err.Status != tt.status || err.Param != tt.param || !strings.Contains(err.Message, tt.msg) {
				t.Errorf("got %d %q %q, want %d %q containing %q", err.Status, err.Param, err.Message, tt.status, tt.param, tt.msg)
			}
		})
	}
}

func TestParseResponses(t *testing.T) {
	req, err := ParseResponses([]byte(`{"model":"m","input":"hi","tools":[{"type":"function","name":"f","strict":true,"parameters":{"b":1,"a":2}}],"tool_choice":"required",`+
		`"service_tier":"auto","seed":3,"store":false,"stream":true,"conversation":{"id":"conv_1"}}`), Limits{})
	if err != nil {
		t.Fatal(err.Message)
	}
	if !req.InputString || req.Input[0].Parts[0].Text != "hi" || req.Store || !req.Stream || req.Conversation != "conv_1" || req.ToolChoice != "required" {
		t.Errorf("parsed %+v", req)
	}
	if got := string(req.Tools[0].Function); got != `{"name":"f","strict":true,"parameters":{"b":1,"a":2}}` {
		t.Errorf("chat function object: got %s (members but type, in request order)", got)
	}
	if len(req.Echo) != 1 || req.Echo[0].Key != "service_tier" || len(req.Extra) != 1 || req.Extra[0].Key != "seed" {
		t.Errorf("echo %v extra %v", req.Echo, req.Extra)
	}
	obj := req.AppendResponse(nil, &ResponseState{ID: "resp_1", Model: "m", Status: ResponseCompleted, Usage: &ResponseUsage{InputTokens: 3, OutputTokens: 2}})
	var v map[string]any
	if e := json.Unmarshal(obj, &v); e != nil {
		t.Fatalf("response object %s: %v", obj, e)
	}
	if v["store"] != false || v["service_tier"] != "auto" || v["conversation"].(map[string]any)["id"] != "conv_1" || v["usage"].(map[string]any)["total_tokens"] != 5.0 {
		t.Errorf("response object %s", obj)
	}
}

// FuzzParseResponses: any body is either a 400/413 or a request whose items re-encode to
// canonical items that parse back to the same, and whose response object is valid JSON.
func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{`{"input":"hi"}`, `{"model":"m","instructions":"s","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}]}`,
		`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}]}`,
		`{"input":[{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"t"}]},{"type":"item_reference","id":"msg_1"}]}`,
		`{"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"},"text":{"format":{"type":"json_schema","name":"n","schema":{}}}}`,
		`{"input":"x","metadata":{"a":"b"},"include":["message.output_text.logprobs"],"reasoning":{"effort":"high"},"truncation":"auto"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ParseResponses(b, Limits{})
		if err != nil {
			if err.Status != 400 && err.Status != 413 {
				t.Fatalf("status %d for a parse error", err.Status)
			}
			return
		}
		enc := AppendItems(nil, req.Input)
		items, perr := ParseItems(enc, "input", 0)
		if perr != nil {
			t.Fatalf("canonical items %s do not parse: %s", enc, perr.Message)
		}
		if again := AppendItems(nil, items); !bytes.Equal(again, enc) {
			t.Fatalf("canonical form is not stable:\n%s\n%s", enc, again)
		}
		if obj := req.AppendResponse(nil, &ResponseState{ID: "r", Output: enc}); !json.Valid(obj) {
			t.Fatalf("response object is not JSON: %s", obj)
		}
	})
}
