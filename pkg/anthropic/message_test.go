package anthropic

import (
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

// signatures are random: tests compare them as a placeholder.
var signature = regexp.MustCompile(`"signature":"[0-9a-f]{32}"`)

func TestMessage(t *testing.T) {
	o := &Output{Model: "claude-x", StopSequences: []string{"STOP"}, PromptTokens: 99}
	tests := []struct{ name, chat, want string }{
		{"text", `{"id":"chatcmpl-abc","choices":[{"message":{"role":"assistant","content":"Hi!"},"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":20,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}}`,
			`{"id":"msg_abc","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Hi!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":16,"output_tokens":3}}`},
		{"thinking and tool use", `{"id":"chatcmpl-1","choices":[{"message":{"content":null,"reasoning":"Need the tool.","tool_calls":[{"id":"chatcmpl-tool-9f","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":7}}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"thinking","thinking":"Need the tool.","signature":"SIG"},{"type":"tool_use","id":"toolu_9f","name":"get_weather","input":{"city":"Paris","unit":"c"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}}`},
		{"reasoning_content, max_tokens, no usage", `{"id":"x","choices":[{"message":{"content":"Long","reasoning_content":"hm"},"finish_reason":"length"}]}`,
			`{"id":"msg_x","type":"message","role":"assistant","model":"claude-x","content":[{"type":"thinking","thinking":"hm","signature":"SIG"},{"type":"text","text":"Long"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":99,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`},
		{"stop sequence", `{"id":"y","choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_reason":"STOP"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`,
			`{"id":"msg_y","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"STOP","usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}`},
		{"stop token id is end_turn, malformed arguments", `{"id":"z","choices":[{"message":{"content":"","tool_calls":[{"id":"call_1","function":{"name":"f","arguments":"{oops"}}]},"finish_reason":"stop","stop_reason":151645}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`,
			`{"id":"msg_z","type":"message","role":"assistant","model":"claude-x","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, aerr := o.Message([]byte(tt.chat))
			if aerr != nil {
				t.Fatal(aerr)
			}
			if s := signature.ReplaceAllString(string(got), `"signature":"SIG"`); s != tt.want {
				t.Errorf("got  %s\nwant %s", s, tt.want)
			}
		})
	}
	for _, bad := range []string{`{`, `{"choices":[]}`} {
		if _, aerr := o.Message([]byte(bad)); aerr == nil || aerr.Status != 502 {
			t.Errorf("%s: got %v, want a 502", bad, aerr)
		}
	}
}

func TestIDs(t *testing.T) {
	for in, want := range map[string]string{"chatcmpl-tool-abc": "toolu_abc", "call_x": "toolu_x", "toolu_k": "toolu_k", "weird": "toolu_weird"} {
		if got := ToolUseID(in); got != want {
			t.Errorf("ToolUseID(%q) = %q, want %q", in, got, want)
		}
	}
	if got := MessageID("chatcmpl-7"); got != "msg_7" {
		t.Errorf("MessageID = %q", got)
	}
	if a, b := ToolUseID(""), ToolUseID(""); a == b || !strings.HasPrefix(a, "toolu_") {
		t.Errorf("empty ids: %q %q, want distinct toolu_ ids", a, b)
	}
}

func TestWriteError(t *testing.T) {
	for status, typ := range map[int]string{400: TypeInvalidRequest, 401: TypeAuthentication, 403: TypePermission, 404: TypeNotFound, 405: TypeInvalidRequest,
		413: TypeTooLarge, 429: TypeRateLimit, 500: TypeAPI, 502: TypeAPI, 503: TypeOverloaded, 529: TypeOverloaded, 504: TypeAPI} {
		rec := httptest.NewRecorder()
		WriteError(rec, &openai.Error{Status: status, Message: `bad "x"`, Type: openai.TypeServer})
		var body struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		want := struct {
			Type  string
			Error struct{ Type, Message string }
		}{"error", struct{ Type, Message string }{typ, `bad "x"`}}
		if rec.Code != status || !cmp.Equal(body, want) || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("status %d: got %d %+v, want %+v", status, rec.Code, body, want)
		}
	}
	if got := string(AppendErrorEvent(nil, &openai.Error{Status: 502, Message: "m"})); got != "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"m\"}}\n\n" {
		t.Errorf("error event %q", got)
	}
}
