package conversation

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestConfirmAcrossReplicas: a follow-up on the replica holding its chain is expanded from the
// copies at once; Redis confirms them later, for a streamed turn at Turn.Confirm (before it
// goes upstream), for another at Finish, in the round trip of its write. A record deleted on
// another replica or gone from Redis by its own means is missing all the same, and a turn on
// a cut chain leaves nothing stored.
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
	stored := func(id string) bool {
		recs, err := reps[1].GetResponses(ctx, "k", []string{id})
		return err == nil && recs[0] != nil
	}
	for _, stream := range []bool{false, true} {
		follow := func(prev any) string {
			return fmt.Sprintf(`{"input":"q3","previous_response_id":%q,"stream":%v}`, prev, stream)
		}
		chain := func() [2]any { // a 2-turn chain written by a: its first and last ids
			_, r1 := turn(t, a, "k", `{"input":"q1"}`, completion("a1", "", nil, "stop"))
			_, r2 := turn(t, a, "k", fmt.Sprintf(`{"input":"q2","previous_response_id":%q}`, r1["id"]), completion("a2", "", nil, "stop"))
			return [2]any{r1["id"], r2["id"]}
		}
		ids := chain()
		tn, aerr := a.Begin(ctx, "k", mustParse(t, follow(ids[1])))
		if aerr != nil || (tn.confirm == nil) != !stream || (tn.unconfirmed == nil) != stream {
			t.Fatalf("stream %v: a follow-up on the replica that wrote the chain was not begun from its copies (%v)", stream, aerr)
		}
		if !strings.Contains(string(tn.ChatBody(nil, 0)), `"a1"`) {
			t.Errorf("chat body from the copies misses the chain: %s", tn.ChatBody(nil, 0))
		}
		if tn, aerr = runTurn(ctx, a, "k", mustParse(t, follow(ids[1]))); aerr != nil || !stored(tn.ID) {
			t.Fatalf("stream %v: follow-up of a live chain: %v", stream, aerr)
		}
		if tn, aerr = b.Begin(ctx, "k", mustParse(t, follow(ids[1]))); aerr != nil || tn.confirm != nil || tn.unconfirmed != nil {
			t.Fatalf("stream %v: follow-up on the other replica: %v; want read from Redis", stream, aerr)
		}

		// The first turn deleted through the other replica: a's copy must not count.
		if _, aerr := b.DeleteResponse(ctx, "k", ids[0].(string)); aerr != nil {
			t.Fatal(aerr.Message)
		}
		tn, _ = a.Begin(ctx, "k", mustParse(t, follow(ids[1])))
		if aerr := tn.Confirm(); stream && (aerr == nil || aerr.Status != 404 || !strings.Contains(aerr.Message, "expired or was deleted")) {
			t.Errorf("confirm of a streamed turn on a chain another replica cut: got %v, want 404", aerr)
		}
		res, _ := tn.FromCompletion(completion("a3", "", nil, "stop"), nil)
		if _, aerr := a.Finish(ctx, tn, res); aerr == nil || aerr.Status != 404 || !strings.Contains(aerr.Message, "expired or was deleted") {
			t.Errorf("stream %v: finish on a chain another replica cut: got %v, want 404", stream, aerr)
		}
		if stored(tn.ID) {
			t.Errorf("stream %v: a turn on a cut chain was stored", stream)
		}
		if _, aerr := a.Begin(ctx, "k", mustParse(t, follow(ids[1]))); aerr == nil || aerr.Status != 404 {
			t.Errorf("stream %v: the next follow-up of the cut chain: got %v, want 404 (the copy dropped)", stream, aerr)
		}

		// The head gone by Redis's own means (expiry, eviction).
		ids = chain()
		reps[1].c.Del(ctx, reps[1].respKey("k", ids[1].(string)))
		if _, aerr := runTurn(ctx, a, "k", mustParse(t, follow(ids[1]))); aerr == nil || aerr.Status != 404 || !strings.Contains(aerr.Message, "not found") {
			t.Errorf("stream %v: follow-up of a head gone from Redis: got %v, want 404", stream, aerr)
		}
		// store: false confirms alone.
		ids = chain()
		_, _ = b.DeleteResponse(ctx, "k", ids[0].(string))
		req := mustParse(t, follow(ids[1]))
		req.Store = false
		if _, aerr := runTurn(ctx, a, "k", req); aerr == nil || aerr.Status != 404 {
			t.Errorf("stream %v: store: false follow-up on a cut chain: got %v, want 404", stream, aerr)
		}
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
	t1, _ := s.Begin(ctx, "k", mustParse(t, follow))
	t2, _ := s.Begin(ctx, "k", mustParse(t, follow))
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

// TestRoundTripsPerTurn: a follow-up on the replica that wrote its chain waits for Redis once
// when not streamed (the chain's renewal joins the write's pipeline) and twice when streamed (the
// chain confirmed before it goes upstream, then the write); on another replica, reading the chain
// adds two. Counted by kvgate_responses_store_round_trip_seconds.
func TestRoundTripsPerTurn(t *testing.T) {
	rs := testutil.StartRedis(t, 0)
	ctx := context.Background()
	var svcs [2]*Service
	var regs [2]*prometheus.Registry
	for i := range svcs {
		regs[i] = prometheus.NewRegistry()
		r, err := NewRedis(RedisConfig{URL: rs.URL, Registerer: regs[i]})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		svcs[i] = newService(t, r)
	}
	trips := func(i int) uint64 {
		mfs, err := regs[i].Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "kvgate_responses_store_round_trip_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		t.Fatal("no kvgate_responses_store_round_trip_seconds")
		return 0
	}
	_, r1 := turn(t, svcs[0], "k", `{"input":"q1"}`, completion("a1", "", nil, "stop"))
	_, r2 := turn(t, svcs[0], "k", fmt.Sprintf(`{"input":"q2","previous_response_id":%q}`, r1["id"]), completion("a2", "", nil, "stop"))
	for _, tc := range []struct {
		replica int
		stream  bool
		want    uint64
	}{{0, false, 1}, {0, true, 2}, {1, false, 3}} {
		before := trips(tc.replica)
		req := fmt.Sprintf(`{"input":"q3","previous_response_id":%q,"stream":%v}`, r2["id"], tc.stream)
		if _, aerr := runTurn(ctx, svcs[tc.replica], "k", mustParse(t, req)); aerr != nil {
			t.Fatal(aerr.Message)
		}
		if got := trips(tc.replica) - before; got != tc.want {
			t.Errorf("replica %d, stream %v: %d round trips, want %d", tc.replica, tc.stream, got, tc.want)
		}
	}
}
