package conversation

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

func mustParse(t testing.TB, body string) *openai.ResponsesRequest {
	t.Helper()
	req, err := openai.ParseResponses([]byte(body), openai.Limits{})
	if err != nil {
		t.Fatalf("parse %s: %s", body, err.Message)
	}
	return req
}

func newService(t testing.TB, st Store) *Service {
	t.Helper()
	if st == nil {
		m, err := NewMemory(MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		st = m
	}
	s, err := New(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// completion is a chat.completion body with the given message fields and finish reason.
func completion(content, reasoning string, calls [][2]string, finish string) []byte {
	msg := map[string]any{"role": "assistant", "content": nil}
	if content != "" {
		msg["content"] = content
	}
	if reasoning != "" {
		msg["reasoning"] = reasoning
	}
	var tcs []any
	for i, c := range calls {
		tcs = append(tcs, map[string]any{"id": "call_" + string(rune('a'+i)), "type": "function", "function": map[string]any{"name": c[0], "arguments": c[1]}})
	}
	msg["tool_calls"] = tcs
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": map[string]any{"cached_tokens": 64}}})
	return b
}

// turn runs one turn on s: Begin, a chat.completion answer, Finish; it returns the turn and
// the response object.
func turn(t testing.TB, s *Service, scope, body string, answer []byte) (*Turn, map[string]any) {
	t.Helper()
	tn, aerr := s.Begin(context.Background(), scope, mustParse(t, body))
	if aerr != nil {
		t.Fatalf("begin %s: %d %s", body, aerr.Status, aerr.Message)
	}
	tn.Model = "m"
	res, aerr := tn.FromCompletion(answer, func(s string) int { return len(s) / 4 })
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	out, aerr := s.Finish(context.Background(), tn, res)
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	var obj map[string]any
	if err := json.Unmarshal(out, &obj); err != nil {
		t.Fatalf("response object %s: %v", out, err)
	}
	return tn, obj
}

// jsonEqual compares two JSON texts as values.
func jsonDiff(t testing.TB, want, got []byte) string {
	t.Helper()
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got %s: %v", got, err)
	}
	return cmp.Diff(w, g)
}

// runTurn runs req to its end as the router does (Begin; Confirm, the store's answer on a
// streamed turn's chain begun from a replica's copies; a chat answer; Finish, which confirms
// the others') and returns the turn or the first error.
func runTurn(ctx context.Context, s *Service, scope string, req *openai.ResponsesRequest) (*Turn, *openai.Error) {
	t, aerr := s.Begin(ctx, scope, req)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := t.Confirm(); aerr != nil {
		return nil, aerr
	}
	res, aerr := t.FromCompletion(completion("ok", "", nil, "stop"), nil)
	if aerr != nil {
		return nil, aerr
	}
	if _, aerr := s.Finish(ctx, t, res); aerr != nil {
		return nil, aerr
	}
	return t, nil
}
