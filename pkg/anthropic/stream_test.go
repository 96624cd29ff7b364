package anthropic

import (
	"strings"
	"testing"
)

// chunks is a chat stream with reasoning, content, two tool calls (the first split across
// chunks) and the final usage chunk, as vLLM streams it.
var chunks = strings.Join([]string{
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"reasoning":"Let me"}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"reasoning":" think."}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"content":"Checking."}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"chatcmpl-tool-a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"chatcmpl-tool-b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}}]}`,
	`data: {"id":"chatcmpl-s1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls","stop_reason":null}]}`,
	`data: {"id":"chatcmpl-s1","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":16}}}`,
	`data: [DONE]`, ``, ``}, "\n\n")

const wantEvents = `event: message_start
data: {"type":"message_start","message":{"id":"msg_s1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":30,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}

event: ping
data: {"type":"ping"}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" think."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_a","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_b","name":"get_time","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":14,"cache_creation_input_tokens":0,"cache_read_input_tokens":16,"output_tokens":12}}

event: message_stop
data: {"type":"message_stop"}

`

// TestStream feeds the chat stream cut at every byte and whole: the events are the same.
func TestStream(t *testing.T) {
	o := &Output{Model: "claude-x", PromptTokens: 30}
	for cut := 0; cut <= len(chunks); cut += max(1, len(chunks)/97) {
		s := o.NewStream()
		out, aerr := s.Feed(nil, []byte(chunks[:cut]))
		if aerr == nil {
			out, aerr = s.Feed(out, []byte(chunks[cut:]))
		}
		if aerr != nil {
			t.Fatal(aerr)
		}
		out = s.End(out)
		if got := signature.ReplaceAllString(string(out), `"signature":"SIG"`); got != wantEvents {
			t.Fatalf("cut at %d:\n%s\nwant\n%s", cut, got, wantEvents)
		}
	}
}

func TestStreamStopSequenceAndEmpty(t *testing.T) {
	o := &Output{Model: "m", StopSequences: []string{"END"}, PromptTokens: 3}
	s := o.NewStream()
	out, _ := s.Feed(nil, []byte("data: {\"id\":\"chatcmpl-q\",\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\",\"stop_reason\":\"END\"}]}\n\n"))
	out = s.End(out)
	if !strings.Contains(string(out), `"delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"input_tokens":3,`) {
		t.Errorf("stop sequence: %s", out)
	}
	// A stream with no chunk at all still starts and ends as a message.
	out = o.NewStream().End(nil)
	for _, ev := range []string{"message_start", "ping", "message_delta", "message_stop"} {
		if !strings.Contains(string(out), "event: "+ev+"\n") {
			t.Errorf("empty stream lacks %s: %s", ev, out)
		}
	}
	if strings.Contains(string(out), "content_block") {
		t.Errorf("empty stream has blocks: %s", out)
	}
}

func TestStreamErrors(t *testing.T) {
	o := &Output{Model: "m"}
	_, aerr := o.NewStream().Feed(nil, []byte("data: {\"error\":{\"message\":\"engine died\",\"code\":500}}\n\n"))
	if aerr == nil || aerr.Message != "engine died" || aerr.Status != 502 {
		t.Errorf("error chunk: %v", aerr)
	}
	if _, aerr = o.NewStream().Feed(nil, []byte("data: {nope\n\n")); aerr == nil || aerr.Status != 502 {
		t.Errorf("malformed chunk: %v", aerr)
	}
	// Arguments of a call that never opened are dropped, not attached to the text block.
	s := o.NewStream()
	out, _ := s.Feed(nil, []byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n"))
	if strings.Contains(string(out), "input_json_delta") {
		t.Errorf("orphan arguments written: %s", out)
	}
}
