package conversation

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

func beginTurn(t *testing.T, body string) *Turn {
	t.Helper()
	tn, aerr := newService(t, nil).Begin(context.Background(), "", mustParse(t, body))
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	tn.ID, tn.Model = "resp_00000000000000000000000000000001", "m"
	return tn
}

func TestFromCompletion(t *testing.T) {
	tn := beginTurn(t, `{"input":"w?"}`)
	res, aerr := tn.FromCompletion(completion("\n\n", "think", [][2]string{{"get_weather", `{"city": "Paris"}`}}, "tool_calls"), func(s string) int { return 2 })
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	want := `[{"id":"rs_000000000000000000000000000000010001","type":"reasoning","status":"completed","summary":[],"content":[{"type":"reasoning_text","text":"think"}]},` +
		`{"id":"msg_000000000000000000000000000000010002","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"\n\n","annotations":[]}]},` +
		`{"id":"fc_000000000000000000000000000000010003","type":"function_call","status":"completed","call_id":"call_a","name":"get_weather","arguments":"{\"city\": \"Paris\"}"}]`
	if d := jsonDiff(t, []byte(want), openai.AppendItems(nil, res.Items)); d != "" {
		t.Errorf("items (-want +got):\n%s", d)
	}
	if diff := cmp.Diff(openai.ResponseUsage{InputTokens: 100, CachedTokens: 64, OutputTokens: 20, ReasoningTokens: 2}, res.Usage); diff != "" || res.Status != "completed" {
		t.Errorf("status %q usage (-want +got):\n%s", res.Status, diff)
	}
	cut, _ := beginTurn(t, `{"input":"w?"}`).FromCompletion(completion("partial", "", nil, "length"), nil)
	if cut.Status != "incomplete" || cut.IncompleteReason != "max_output_tokens" || cut.Items[0].Status != "incomplete" {
		t.Errorf("length: got %q %q item %q, want incomplete max_output_tokens", cut.Status, cut.IncompleteReason, cut.Items[0].Status)
	}
	if _, aerr := tn.FromCompletion([]byte(`{"choices":[]}`), nil); aerr == nil || aerr.Status != 502 {
		t.Errorf("no choices: got %v, want 502", aerr)
	}
}

// chunkStream is the chat chunk stream of reasoning, then content, then two tool calls.
func chunkStream() string {
	var b strings.Builder
	ev := func(v any) {
		j, _ := json.Marshal(v)
		b.WriteString("data: " + string(j) + "\n\n")
	}
	delta := func(d map[string]any, finish any) {
		ev(map[string]any{"object": "chat.completion.chunk", "choices": []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}})
	}
	delta(map[string]any{"role": "assistant", "content": ""}, nil)
	delta(map[string]any{"reasoning": "thi"}, nil)
	delta(map[string]any{"reasoning": "nk", "reasoning_content": "nk"}, nil)
	delta(map[string]any{"content": "\n\n"}, nil)
	delta(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": "call_a", "type": "function", "function": map[string]any{"name": "get_weather"}}}}, nil)
	delta(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `{"city": `}}}}, nil)
	delta(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `"Paris"}`}}}}, nil)
	delta(map[string]any{"tool_calls": []any{map[string]any{"index": 1, "id": "call_b", "type": "function", "function": map[string]any{"name": "f", "arguments": "[]"}}}}, nil)
	delta(map[string]any{}, "tool_calls")
	ev(map[string]any{"choices": []any{}, "usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": map[string]any{"cached_tokens": 64}}})
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// TestStream: the events of a chunk stream cut at every possible byte, their order and
// sequence numbers, and the items they add up to, which equal the non-streaming conversion of
// the same answer.
func TestStream(t *testing.T) {
	in := chunkStream()
	var first []string
	for cut := 1; cut < len(in); cut += 7 {
		st := beginTurn(t, `{"input":"w?","stream":true}`).NewStream()
		out := st.Begin(nil)
		var aerr *openai.Error
		for _, piece := range []string{in[:cut], in[cut:]} {
			if out, aerr = st.Feed(out, []byte(piece)); aerr != nil {
				t.Fatal(aerr.Message)
			}
		}
		out, res := st.End(out, nil)
		out = st.Terminal(out, res.Status, []byte(`{}`))
		types := eventTypes(t, out)
		if first == nil {
			first = types
		} else if !cmp.Equal(first, types) {
			t.Fatalf("cut at %d: events differ:\n%v\n%v", cut, first, types)
		}
		whole, _ := beginTurn(t, `{"input":"w?"}`).FromCompletion(completion("\n\n", "think", [][2]string{{"get_weather", `{"city": "Paris"}`}, {"f", "[]"}}, "tool_calls"), nil)
		whole.Items[2].CallID, whole.Items[3].CallID = "call_a", "call_b"
		if d := jsonDiff(t, openai.AppendItems(nil, whole.Items), openai.AppendItems(nil, res.Items)); d != "" {
			t.Fatalf("cut at %d: streamed items differ from the whole answer's (-whole +streamed):\n%s", cut, d)
		}
		if res.Usage.CachedTokens != 64 || res.Usage.InputTokens != 100 {
			t.Errorf("usage %+v", res.Usage)
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
		"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// eventTypes checks the framing of every event (event: line equal to the data's type,
// sequence numbers 0, 1, 2, ...) and returns their types.
func eventTypes(t *testing.T, out []byte) []string {
	t.Helper()
	var types []string
	for _, ev := range bytes.Split(bytes.TrimSpace(out), []byte("\n\n")) {
		name, data, ok := bytes.Cut(ev, []byte("\n"))
		if !ok || !bytes.HasPrefix(name, []byte("event: ")) || !bytes.HasPrefix(data, []byte("data: ")) {
			t.Fatalf("bad event %q", ev)
		}
		var e struct {
			Type string `json:"type"`
			Seq  int    `json:"sequence_number"`
		}
		if err := json.Unmarshal(data[6:], &e); err != nil {
			t.Fatalf("event data %q: %v", data, err)
		}
		if e.Type != string(name[7:]) || e.Seq != len(types) {
			t.Fatalf("event %d: type %q (event: %q) sequence %d", len(types), e.Type, name[7:], e.Seq)
		}
		types = append(types, e.Type)
	}
	return types
}

func TestStreamUpstreamError(t *testing.T) {
	st := beginTurn(t, `{"input":"w?","stream":true}`).NewStream()
	_, aerr := st.Feed(nil, []byte(`data: {"error":{"message":"boom","type":"upstream_error","code":"x"}}`+"\n\n"))
	if aerr == nil || aerr.Message != "boom" {
		t.Fatalf("got %v, want the worker's error", aerr)
	}
	out := st.Error(nil, aerr)
	if !bytes.HasPrefix(out, []byte("event: error\ndata: {\"type\":\"error\",\"sequence_number\":0,\"code\":\"x\",\"message\":\"boom\"")) {
		t.Errorf("error event %q", out)
	}
}
