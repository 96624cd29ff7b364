package conversation

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/openai"
)

// TestChain: follow-ups by previous_response_id expand every stored turn, in the key's scope.
func TestChain(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := newService(t, st)
			ctx := context.Background()
			t1, r1 := turn(t, s, "alice", `{"input":"q1","instructions":"sys"}`, completion("a1", "r1", nil, "stop"))
			t2, r2 := turn(t, s, "alice", fmt.Sprintf(`{"input":"q2","previous_response_id":%q}`, r1["id"]), completion("", "", [][2]string{{"f", "{}"}}, "tool_calls"))
			callID := r2["output"].([]any)[0].(map[string]any)["call_id"].(string)
			t3, _ := turn(t, s, "alice", fmt.Sprintf(`{"input":[{"type":"function_call_output","call_id":%q,"output":"42"}],"previous_response_id":%q}`, callID, r2["id"]), completion("done", "", nil, "stop"))
			if diff := cmp.Diff([]string{t1.ID, t2.ID}, t3.Ancestors); diff != "" {
				t.Errorf("ancestors (-want +got):\n%s", diff)
			}
			want := `{"messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"a1","reasoning":"r1"},{"role":"user","content":"q2"},` +
				`{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"42","tool_call_id":"call_a"}]}`
			if d := jsonDiff(t, []byte(want), t3.ChatBody(nil, 0)); d != "" {
				t.Errorf("third turn (-want +got):\n%s", d)
			}
			if _, aerr := s.Begin(ctx, "bob", mustParse(t, fmt.Sprintf(`{"input":"x","previous_response_id":%q}`, t1.ID))); aerr == nil || aerr.Status != 404 {
				t.Errorf("another key's follow-up: got %v, want 404", aerr)
			}
			if _, aerr := s.Response(ctx, "bob", t1.ID); aerr == nil || aerr.Status != 404 {
				t.Errorf("another key's retrieve: got %v, want 404", aerr)
			}
			if b, aerr := s.Response(ctx, "alice", t1.ID); aerr != nil || !json.Valid(b) {
				t.Errorf("retrieve: %v", aerr)
			}
			list, aerr := s.InputItems(ctx, "alice", t3.ID, ListQuery{Limit: 20, Order: "asc"})
			if aerr != nil {
				t.Fatal(aerr.Message)
			}
			var l struct {
				Data []map[string]any `json:"data"`
			}
			_ = json.Unmarshal(list, &l)
			if len(l.Data) != 1 || l.Data[0]["type"] != "function_call_output" {
				t.Errorf("input items: got %s, want the function_call_output only", list)
			}
			// Deleting a turn breaks the chains through it.
			if _, aerr := s.DeleteResponse(ctx, "alice", t1.ID); aerr != nil {
				t.Fatal(aerr.Message)
			}
			if _, aerr := s.Begin(ctx, "alice", mustParse(t, fmt.Sprintf(`{"input":"x","previous_response_id":%q}`, t3.ID))); aerr == nil || aerr.Status != 404 {
				t.Errorf("follow-up through a deleted turn: got %v, want 404", aerr)
			}
		})
	}
}

func TestStoreFalseAndReferences(t *testing.T) {
	s := newService(t, nil)
	ctx := context.Background()
	tn, _ := turn(t, s, "", `{"input":"q","store":false}`, completion("a", "", nil, "stop"))
	if _, aerr := s.Response(ctx, "", tn.ID); aerr == nil || aerr.Status != 404 {
		t.Errorf("store false retrieve: got %v, want 404", aerr)
	}
	if _, aerr := s.Begin(ctx, "", mustParse(t, fmt.Sprintf(`{"input":"x","previous_response_id":%q}`, tn.ID))); aerr == nil || aerr.Status != 404 {
		t.Errorf("follow-up of a store false turn: got %v, want 404", aerr)
	}
	// An item_reference names an item of any stored response of the key (the AI SDK sends them).
	_, r := turn(t, s, "", `{"input":"q"}`, completion("answer", "why", nil, "stop"))
	out := r["output"].([]any)
	ref, _ := s.Begin(ctx, "", mustParse(t, fmt.Sprintf(`{"input":[{"role":"user","content":"q"},{"type":"item_reference","id":%q},{"type":"item_reference","id":%q},{"role":"user","content":"more"}]}`,
		out[0].(map[string]any)["id"], out[1].(map[string]any)["id"])))
	want := `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"answer","reasoning":"why"},{"role":"user","content":"more"}]}`
	if d := jsonDiff(t, []byte(want), ref.ChatBody(nil, 0)); d != "" {
		t.Errorf("resolved references (-want +got):\n%s", d)
	}
	for _, id := range []string{"msg_nope", "msg_0123456789abcdef0123456789abcdef0001"} {
		if _, aerr := s.Begin(ctx, "", mustParse(t, fmt.Sprintf(`{"input":[{"type":"item_reference","id":%q}]}`, id))); aerr == nil || aerr.Status != 404 || aerr.Param != "input[0].id" {
			t.Errorf("reference %s: got %v, want 404 on input[0].id", id, aerr)
		}
	}
}

func TestChainBound(t *testing.T) {
	m, _ := NewMemory(MemoryConfig{})
	s, err := New(Config{Store: m, MaxChain: 3})
	if err != nil {
		t.Fatal(err)
	}
	_, r := turn(t, s, "", `{"input":"1"}`, completion("a", "", nil, "stop"))
	_, r = turn(t, s, "", fmt.Sprintf(`{"input":"2","previous_response_id":%q}`, r["id"]), completion("a", "", nil, "stop"))
	_, r = turn(t, s, "", fmt.Sprintf(`{"input":"3","previous_response_id":%q}`, r["id"]), completion("a", "", nil, "stop"))
	_, aerr := s.Begin(context.Background(), "", mustParse(t, fmt.Sprintf(`{"input":"4","previous_response_id":%q}`, r["id"])))
	if aerr == nil || aerr.Status != 400 || aerr.Param != "previous_response_id" {
		t.Errorf("a fourth turn on a bound of 3: got %v, want 400", aerr)
	}
}

func TestConversations(t *testing.T) {
	s := newService(t, nil)
	ctx := context.Background()
	b, aerr := s.CreateConversation(ctx, "k", []byte(`{"metadata":{"topic":"demo"},"items":[{"type":"message","role":"user","content":"Hello!"}]}`))
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	var conv map[string]any
	_ = json.Unmarshal(b, &conv)
	id := conv["id"].(string)
	if conv["object"] != "conversation" || conv["metadata"].(map[string]any)["topic"] != "demo" {
		t.Errorf("conversation %s", b)
	}
	tn, _ := turn(t, s, "k", fmt.Sprintf(`{"input":"next","conversation":%q}`, id), completion("hi there", "", nil, "stop"))
	if d := jsonDiff(t, []byte(`{"messages":[{"role":"user","content":"Hello!"},{"role":"user","content":"next"}]}`), tn.ChatBody(nil, 0)); d != "" {
		t.Errorf("turn on a conversation (-want +got):\n%s", d)
	}
	list, _ := s.ListItems(ctx, "k", id, ListQuery{Limit: 2, Order: "asc"})
	var l struct {
		Data    []map[string]any `json:"data"`
		HasMore bool             `json:"has_more"`
		LastID  string           `json:"last_id"`
	}
	_ = json.Unmarshal(list, &l)
	if len(l.Data) != 2 || !l.HasMore {
		t.Fatalf("items page: %s", list)
	}
	rest, _ := s.ListItems(ctx, "k", id, ListQuery{Limit: 20, Order: "asc", After: l.LastID})
	_ = json.Unmarshal(rest, &l)
	if len(l.Data) != 1 || l.Data[0]["role"] != "assistant" || l.HasMore {
		t.Errorf("after %s: %s, want the answer", l.LastID, rest)
	}
	if _, aerr := s.GetConversation(ctx, "other", id); aerr == nil || aerr.Status != 404 {
		t.Errorf("another key: %v", aerr)
	}
	if _, aerr := s.DeleteConversation(ctx, "k", id); aerr != nil {
		t.Fatal(aerr.Message)
	}
	if _, aerr := s.Begin(ctx, "k", mustParse(t, fmt.Sprintf(`{"input":"x","conversation":%q}`, id))); aerr == nil || aerr.Status != 404 {
		t.Errorf("turn on a deleted conversation: got %v, want 404", aerr)
	}
}

// TestOutage: with Redis gone, turns that need the store answer 503 (fast, once the window is
// open), store: false turns that continue nothing keep working, and the service recovers when
// Redis is back.
func TestOutage(t *testing.T) {
	rs := testutil.StartRedis(t, 0)
	r, err := NewRedis(RedisConfig{URL: rs.URL, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	now := time.Unix(100, 0)
	s, _ := New(Config{Store: r, Now: func() time.Time { return now }})
	ctx := context.Background()
	_, r1 := turn(t, s, "", `{"input":"q"}`, completion("a", "", nil, "stop"))
	if err := rs.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	_, aerr := runTurn(ctx, s, "", mustParse(t, fmt.Sprintf(`{"input":"x","previous_response_id":%q}`, r1["id"])))
	if aerr == nil || aerr.Status != 503 || aerr.Code != "store_unavailable" {
		t.Fatalf("follow-up with Redis down: got %v, want 503 store_unavailable", aerr)
	}
	if _, aerr := s.Begin(ctx, "", mustParse(t, `{"input":"x"}`)); aerr == nil || aerr.Status != 503 {
		t.Errorf("a store: true turn inside the outage window: got %v, want 503", aerr)
	}
	if _, aerr := s.Begin(ctx, "", mustParse(t, `{"input":"x","store":false}`)); aerr != nil {
		t.Errorf("store: false turn with Redis down: %v", aerr.Message)
	}
	testutil.StartRedis(t, rs.Port)
	now = now.Add(2 * outage)
	if _, aerr := s.Begin(ctx, "", mustParse(t, `{"input":"x"}`)); aerr != nil {
		t.Errorf("after Redis returned: %v", aerr.Message)
	}
	turn(t, s, "", `{"input":"again"}`, completion("a", "", nil, "stop"))
	_ = openai.ObjectResponse
}
