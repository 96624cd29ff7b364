package indexer

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func newTestPending(t *testing.T, ttl time.Duration, maxEntries int) (*Pending, *fakeClock) {
	t.Helper()
	clk := &fakeClock{}
	clk.ns.Store(1e12)
	p, err := NewPending(PendingConfig{TTL: ttl, MaxEntries: maxEntries, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

func TestNewPendingValidates(t *testing.T) {
	if _, err := NewPending(PendingConfig{MaxEntries: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewPending(MaxEntries -1) error = %v, want ErrInvalidConfig", err)
	}
}

func TestPendingAddMatchExpire(t *testing.T) {
	p, clk := newTestPending(t, 5*time.Second, 1000)
	keys := AppendBlockKeys(nil, seq(0, 64), 16, "") // 4 blocks
	p.Add(3, keys[:3])
	clk.advance(2 * time.Second)
	p.Add(70, keys)
	tests := []struct {
		name string
		keys []uint64
		want []WorkerMatch
	}{
		{"both", keys, []WorkerMatch{{3, 3}, {70, 4}}},
		{"hole", []uint64{keys[0], 99, keys[2]}, []WorkerMatch{{3, 1}, {70, 1}}},
		{"miss", []uint64{12345}, nil},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, sortMatches(p.Match(tt.keys, nil))); diff != "" {
				t.Errorf("Match (-want +got):\n%s", diff)
			}
		})
	}
	clk.advance(3 * time.Second) // worker 3's entries are exactly TTL old: expired
	if got := p.Match(keys, nil); !cmp.Equal(got, []WorkerMatch{{70, 4}}) {
		t.Errorf("after worker 3's TTL: Match = %v, want [{70 4}]", got)
	}
	p.RemoveWorker(70)
	if got := p.Match(keys, nil); len(got) != 0 {
		t.Errorf("after RemoveWorker: Match = %v, want none", got)
	}
	clk.advance(time.Minute)
	p.Add(1, keys[:1]) // expires everything older on the way
	if got := p.Len(); got != 1 {
		t.Errorf("Len = %d, want 1", got)
	}
}

func TestPendingBoundedAndWays(t *testing.T) {
	p, clk := newTestPending(t, time.Minute, 8)
	for i := range 100 {
		clk.advance(time.Millisecond)
		p.Add(WorkerID(i%10), []uint64{uint64(i), uint64(i + 1)})
		if got := p.Len(); got > 8 {
			t.Fatalf("Add %d: Len = %d > MaxEntries 8", i, got)
		}
	}
	// One key pending on more workers than it has ways keeps the latest ones.
	for w := range WorkerID(6) {
		clk.advance(time.Millisecond)
		p.Add(w, []uint64{1000})
	}
	got := sortMatches(p.Match([]uint64{1000}, nil))
	if diff := cmp.Diff([]WorkerMatch{{2, 1}, {3, 1}, {4, 1}, {5, 1}}, got); diff != "" {
		t.Errorf("ways (-want +got):\n%s", diff)
	}
}

// TestPendingMatchesReference compares Pending with a map of (worker, key) → expiry under
// random adds, clock steps and worker removals; capacity is large enough not to evict.
func TestPendingMatchesReference(t *testing.T) {
	const ttl = 5 * time.Second
	p, clk := newTestPending(t, ttl, 1<<20)
	type wk struct {
		w WorkerID
		k uint64
	}
	ref := map[wk]int64{}
	rng := rand.New(rand.NewPCG(5, 5))
	req := func() []uint64 {
		keys := make([]uint64, rng.IntN(8))
		for i := range keys {
			keys[i] = uint64(i*10 + rng.IntN(2)) // two variants per position: shared prefixes
		}
		return keys
	}
	for step := range 3000 {
		w := WorkerID(rng.IntN(3)) // at most 3 workers: within the ways, so the model is exact
		switch op := rng.IntN(20); {
		case op == 0:
			p.RemoveWorker(w)
			for x := range ref {
				if x.w == w {
					delete(ref, x)
				}
			}
		case op < 6:
			clk.advance(time.Duration(rng.IntN(int(2 * time.Second))))
		default:
			keys := req()
			p.Add(w, keys)
			for _, k := range keys {
				ref[wk{w, k}] = clk.ns.Load() + int64(ttl)
			}
		}
		keys := req()
		var want []WorkerMatch
		for w := range WorkerID(3) {
			n := 0
			for n < len(keys) && ref[wk{w, keys[n]}] > clk.ns.Load() {
				n++
			}
			if n > 0 {
				want = append(want, WorkerMatch{w, n})
			}
		}
		if diff := cmp.Diff(sortMatches(want), sortMatches(p.Match(keys, nil))); diff != "" {
			t.Fatalf("step %d: Match(%v) (-want +got):\n%s", step, keys, diff)
		}
	}
}

func TestPendingConcurrentAndAllocs(t *testing.T) {
	p, err := NewPending(PendingConfig{MaxEntries: 256})
	if err != nil {
		t.Fatal(err)
	}
	keys := AppendBlockKeys(nil, seq(0, 1024), 16, "")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []WorkerMatch
			for i := range 500 {
				if g%2 == 0 {
					p.Add(WorkerID(i%5), keys[:1+i%len(keys)])
				} else {
					dst = p.Match(keys, dst)
					if len(dst) > 5 {
						t.Errorf("Match returned %d workers, want at most 5", len(dst))
					}
				}
			}
		}()
	}
	wg.Wait()
	dst := make([]WorkerMatch, 0, 8)
	if a := testing.AllocsPerRun(50, func() { dst = p.Match(keys, dst) }); a != 0 {
		t.Errorf("Pending.Match: %v allocs per call, want 0", a)
	}
}
