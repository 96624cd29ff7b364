package conversation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestLRU(t *testing.T) {
	now := time.Unix(1000, 0)
	var evicted []string
	l := newLRU(100, time.Minute, func(r string) { evicted = append(evicted, r) })
	l.put("a", 1, 40, now)
	l.put("b", 2, 40, now.Add(time.Second))
	if _, ok := l.get("a", now.Add(2*time.Second)); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	l.put("c", 3, 40, now.Add(3*time.Second)) // 120 > 100: b, the least recently used, goes
	if _, ok := l.get("b", now.Add(3*time.Second)); ok {
		t.Error("b kept past the bound, want it evicted (least recently used)")
	}
	if _, ok := l.get("a", now.Add(4*time.Second)); !ok {
		t.Error("a evicted, want kept (used after b)")
	}
	if _, ok := l.get("c", now.Add(time.Minute+3*time.Second)); ok {
		t.Error("c kept past its ttl")
	}
	l.put("d", 4, 10, now.Add(10*time.Minute)) // a expired too: trimmed from the tail
	if diff := cmp.Diff([]string{"bytes", "ttl", "ttl"}, evicted); diff != "" {
		t.Errorf("evictions (-want +got):\n%s", diff)
	}
	if l.len() != 1 || l.bytes != 10 {
		t.Errorf("got %d entries, %d bytes; want 1, 10", l.len(), l.bytes)
	}
	if !l.remove("d", now.Add(10*time.Minute)) || l.remove("d", now) {
		t.Error("remove")
	}
}

// TestMemoryBoundsAndMetrics: the memory store holds what fits, drops the least recently used
// first, counts it, and refuses what could never fit.
func TestMemoryBoundsAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	now := time.Unix(0, 0)
	m, err := NewMemory(MemoryConfig{MaxBytes: 1000, TTL: time.Hour, Registerer: reg, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := func(id string, n int) *Record {
		return &Record{ID: id, Response: make([]byte, n), Input: []byte("[]"), Output: []byte("[]")}
	}
	for i, id := range []string{"r1", "r2", "r3"} {
		now = now.Add(time.Duration(i) * time.Second)
		if err := m.PutResponse(ctx, "", rec(id, 250)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := m.GetResponses(ctx, "", []string{"r1"}) // r1 renewed: r2 is the oldest in use now
	if got[0] == nil {
		t.Fatal("r1 missing")
	}
	_ = m.PutResponse(ctx, "", rec("r4", 250))
	got, _ = m.GetResponses(ctx, "", []string{"r1", "r2", "r3", "r4"})
	if got[0] == nil || got[1] != nil || got[2] == nil || got[3] == nil {
		t.Errorf("after the bound: got %v, want r2 dropped only", got)
	}
	if n := testutil.ToFloat64(m.met.evictions.WithLabelValues("bytes")); n != 1 {
		t.Errorf("bytes evictions: got %v, want 1", n)
	}
	if err := m.PutResponse(ctx, "", rec("huge", 2000)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a record over the bound: got %v, want ErrTooLarge", err)
	}
	now = now.Add(2 * time.Hour)
	got, _ = m.GetResponses(ctx, "", []string{"r1"})
	if got[0] != nil {
		t.Error("r1 kept past the ttl")
	}
	if n := testutil.ToFloat64(m.met.evictions.WithLabelValues("ttl")); n != 1 {
		t.Errorf("ttl evictions: got %v, want 1", n)
	}
}
