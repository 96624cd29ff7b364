package conversation

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestConfirmAcrossReplicas: a follow-up on the replica holding its chain is expanded from the
// copies at once and confirmed by Redis later (Turn.Confirm); a record deleted on another
// replica or gone from Redis by its own means is missing all the same, at Confirm and at
// Finish (nothing is stored on an unconfirmed chain).
func TestConfirmAcrossReplicas(t *testing.T) {
	rs := testutil.StartRedis(t, 0)
	ctx := context.Background()
	var svcs [2]*Service
	var reps [2]*Redis
	for i := range svcs {
		r, err := NewRedis(RedisConfig{URL: rs.URL})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		reps[i], svcs[i] = r, newService(t, r)
	}
	a, b := svcs[0], svcs[1]
	_, r1 := turn(t, a, "k", `{"input":"q1"}`, completion("a1", "", nil, "stop"))
	_, r2 := turn(t, a, "k", fmt.Sprintf(`{"input":"q2","previous_response_id":%q}`, r1["id"]), completion("a2", "", nil, "stop"))
	follow := func(prev any) string { return fmt.Sprintf(`{"input":"q3","previous_response_id":%q}`, prev) }

	tn, aerr := a.Begin(ctx, "k", mustParse(t, follow(r2["id"])))
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	if tn.confirm == nil {
		t.Fatal("a follow-up on the replica that wrote the chain was not begun from its copies")
	}
	if !strings.Contains(string(tn.ChatBody(nil, 0)), `"a1"`) {
		t.Errorf("chat body from the copies misses the chain: %s", tn.ChatBody(nil, 0))
	}
	if aerr := tn.Confirm(); aerr != nil {
		t.Fatalf("confirm of a live chain: %v", aerr.Message)
	}
	if tn, aerr = b.Begin(ctx, "k", mustParse(t, follow(r2["id"]))); aerr != nil || tn.confirm != nil {
		t.Fatalf("follow-up on the other replica: %v, pending %v; want read from Redis", aerr, tn != nil && tn.confirm != nil)
	}

	// r1 deleted through the other replica: a's copy must not count, whether the turn is
	// confirmed (the router) or goes straight to Finish.
	if _, aerr := b.DeleteResponse(ctx, "k", r1["id"].(string)); aerr != nil {
		t.Fatal(aerr.Message)
	}
	tn, aerr = a.Begin(ctx, "k", mustParse(t, follow(r2["id"])))
	if aerr != nil || tn.confirm == nil {
		t.Fatalf("begin from copies: %v", aerr)
	}
	res, _ := tn.FromCompletion(completion("a3", "", nil, "stop"), nil)
	if _, aerr := a.Finish(ctx, tn, res); aerr == nil || aerr.Status != 404 || !strings.Contains(aerr.Message, "expired or was deleted") {
		t.Errorf("finish without confirm on a chain another replica cut: got %v, want 404", aerr)
	}
	if recs, _ := reps[0].GetResponses(ctx, "k", []string{tn.ID}); recs[0] != nil {
		t.Error("a turn on a deleted chain was stored")
	}
	_, r5 := turn(t, a, "k", `{"input":"q5"}`, completion("a5", "", nil, "stop"))
	_, r6 := turn(t, a, "k", fmt.Sprintf(`{"input":"q6","previous_response_id":%q}`, r5["id"]), completion("a6", "", nil, "stop"))
	if _, aerr := b.DeleteResponse(ctx, "k", r5["id"].(string)); aerr != nil {
		t.Fatal(aerr.Message)
	}
	if tn, aerr = a.Begin(ctx, "k", mustParse(t, follow(r6["id"]))); aerr != nil || tn.confirm == nil {
		t.Fatalf("begin from copies: %v", aerr)
	}
	if aerr := tn.Confirm(); aerr == nil || aerr.Status != 404 || !strings.Contains(aerr.Message, "expired or was deleted") {
		t.Errorf("confirm of a chain whose first turn another replica deleted: got %v, want 404", aerr)
	}
	if _, aerr := a.Begin(ctx, "k", mustParse(t, follow(r6["id"]))); aerr == nil || aerr.Status != 404 {
		t.Errorf("the next follow-up of the cut chain: got %v, want 404 (the copy dropped)", aerr)
	}

	// The head gone by Redis's own means (expiry, eviction).
	_, r4 := turn(t, a, "k", `{"input":"q4"}`, completion("a4", "", nil, "stop"))
	reps[1].c.Del(ctx, reps[1].respKey("k", r4["id"].(string)))
	if _, aerr := beginConfirmed(ctx, a, "k", mustParse(t, follow(r4["id"]))); aerr == nil || aerr.Status != 404 || !strings.Contains(aerr.Message, "not found") {
		t.Errorf("follow-up of a head gone from Redis: got %v, want 404", aerr)
	}
}

// TestItemMemo: a chain's records are parsed once and the parse is shared by its follow-ups,
// and dropped with the records.
func TestItemMemo(t *testing.T) {
	m, _ := NewMemory(MemoryConfig{})
	s := newService(t, m)
	ctx := context.Background()
	_, r1 := turn(t, s, "k", `{"input":"q1"}`, completion("a1", "", nil, "stop"))
	_, r2 := turn(t, s, "k", fmt.Sprintf(`{"input":"q2","previous_response_id":%q}`, r1["id"]), completion("a2", "", nil, "stop"))
	follow := fmt.Sprintf(`{"input":"q3","previous_response_id":%q}`, r2["id"])
	t1, _ := beginConfirmed(ctx, s, "k", mustParse(t, follow))
	t2, _ := beginConfirmed(ctx, s, "k", mustParse(t, follow))
	if len(t1.History) != 4 || len(t2.History) != 4 {
		t.Fatalf("history: got %d and %d items, want 4", len(t1.History), len(t2.History))
	}
	if &t1.History[2].Parts[0] != &t2.History[2].Parts[0] {
		t.Error("the second follow-up parsed the chain again")
	}
	if n := s.memo.len(); n != 2 {
		t.Errorf("memo: got %d records, want 2", n)
	}
	for _, id := range []any{r1["id"], r2["id"]} {
		if _, aerr := s.DeleteResponse(ctx, "k", id.(string)); aerr != nil {
			t.Fatal(aerr.Message)
		}
	}
	testutil.WaitFor(t, "the memo to drop deleted records", func() bool { runtime.GC(); return s.memo.len() == 0 })
}
