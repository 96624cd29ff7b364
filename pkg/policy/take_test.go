package policy

import (
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

func testWorkers(t *testing.T, n int) []*worker.Worker {
	t.Helper()
	ws := make([]*worker.Worker, n)
	for i := range ws {
		w, err := worker.New(worker.Spec{URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+i)})
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	return ws
}

// TestTakeHoldsLoadUntilDone: the chosen worker's in-flight count rises at the pick, so a
// request scored next sees it, and Done releases it exactly once.
func TestTakeHoldsLoadUntilDone(t *testing.T) {
	ws := testWorkers(t, 2)
	p := mustNew(t, NameLeastLoad, DefaultConfig())
	cands := []Candidate{{Worker: ws[0], Load: 0}, {Worker: ws[1], Load: 5}}
	r := Take(p, &Request{}, cands)
	if r.Index != 0 {
		t.Fatalf("picked %d, want 0 (least loaded)", r.Index)
	}
	if got := ws[0].InFlight(); got != 1 {
		t.Fatalf("in flight after Take: got %d, want 1", got)
	}
	r.Done()
	r.Done() // a second call must not release twice
	if got := ws[0].InFlight(); got != 0 {
		t.Fatalf("in flight after Done: got %d, want 0", got)
	}
	if got := ws[1].InFlight(); got != 0 {
		t.Fatalf("unchosen worker's in flight: got %d, want 0", got)
	}
}

// TestTakeHoldsBlocks: the pick takes the request's blocks as active KV and the blocks the
// worker lacks as prefill to do; Prefilled releases the prefill part at the first token and
// Done the rest, once, whichever came first.
func TestTakeHoldsBlocks(t *testing.T) {
	type counts struct{ InFlight, Prefill, Active int64 }
	read := func(w *worker.Worker) counts { return counts{w.InFlight(), w.PendingPrefill(), w.ActiveBlocks()} }
	tests := []struct {
		name                  string
		matched               int
		firstToken            bool
		afterTake, afterFirst counts
	}{
		{name: "cold worker", matched: 0, firstToken: true, afterTake: counts{1, 10, 10}, afterFirst: counts{1, 0, 10}},
		{name: "partial hit", matched: 6, firstToken: true, afterTake: counts{1, 4, 10}, afterFirst: counts{1, 0, 10}},
		{name: "a match past the request counts as full", matched: 12, firstToken: true, afterTake: counts{1, 0, 10}, afterFirst: counts{1, 0, 10}},
		{name: "ends before its first token", matched: 3, afterTake: counts{1, 7, 10}, afterFirst: counts{1, 7, 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := testWorkers(t, 1)
			p := mustNew(t, NameLeastLoad, DefaultConfig())
			r := Take(p, &Request{Blocks: 10}, []Candidate{{Worker: ws[0], Matched: tc.matched}})
			if got := read(ws[0]); got != tc.afterTake {
				t.Errorf("after Take: got %+v, want %+v", got, tc.afterTake)
			}
			if tc.firstToken {
				r.Prefilled()
				r.Prefilled()
			}
			if got := read(ws[0]); got != tc.afterFirst {
				t.Errorf("after the first token: got %+v, want %+v", got, tc.afterFirst)
			}
			r.Done()
			r.Prefilled() // after Done: nothing left to release
			r.Done()
			if got := read(ws[0]); got != (counts{}) {
				t.Errorf("after Done: got %+v, want all zero", got)
			}
		})
	}
}

// badPolicy returns an index outside the candidates.
type badPolicy struct{}

func (badPolicy) Pick(*Request, []Candidate) Decision {
	return Decision{Index: 7, Reason: ReasonNoMatch}
}

func TestTakeClampsABadIndex(t *testing.T) {
	ws := testWorkers(t, 2)
	r := Take(badPolicy{}, &Request{}, []Candidate{{Worker: ws[0]}, {Worker: ws[1]}})
	defer r.Done()
	if r.Index != 0 || ws[0].InFlight() != 1 {
		t.Fatalf("got index %d with in flight %d, want 0 and 1", r.Index, ws[0].InFlight())
	}
}

// TestTakeAllocs: a pick that takes load costs no allocation for any policy.
func TestTakeAllocs(t *testing.T) {
	ws := testWorkers(t, 3)
	for _, name := range Names() {
		if name == NameCost && raceEnabled {
			continue // see raceEnabled
		}
		cfg := DefaultConfig()
		cfg.Rand = splitmix(3)
		p := mustNew(t, name, cfg)
		cands := []Candidate{{Worker: ws[0], Key: 1, Load: 2, Matched: 10, Source: indexer.SourceEvents}, {Worker: ws[1], Key: 2, Load: 1}, {Worker: ws[2], Key: 3}}
		req := &Request{Blocks: 62, FirstBlock: 9, Tokens: 1000}
		w := Take(p, req, cands) // warm pools
		w.Done()
		if n := testing.AllocsPerRun(100, func() {
			r := Take(p, req, cands)
			r.Done()
		}); n != 0 {
			t.Errorf("%s: %v allocations per Take, want 0", name, n)
		}
	}
}

// TestPolicyNames: every policy New builds names itself as it was asked for.
func TestPolicyNames(t *testing.T) {
	for _, name := range Names() {
		p := mustNew(t, name, DefaultConfig())
		s, ok := p.(fmt.Stringer)
		if !ok || s.String() != name {
			t.Errorf("policy %q: String() = %v (Stringer %v), want %q", name, p, ok, name)
		}
	}
}

// TestExplainHasNoEffect: explaining round_robin does not advance the rotation, and random's
// explanation draws nothing from the source.
func TestExplainHasNoEffect(t *testing.T) {
	cands := []Candidate{{Key: 1}, {Key: 2}, {Key: 3}}
	cfg := DefaultConfig()
	cfg.Rand = seqRand(0)
	rr := mustNew(t, NameRoundRobin, cfg)
	first := rr.Pick(&Request{}, cands).Index
	for range 5 {
		if d, note := rr.(Explainer).Explain(&Request{}, cands); d.Index != -1 || d.Reason != ReasonRoundRobin || note == "" {
			t.Fatalf("round_robin Explain: got %+v %q", d, note)
		}
	}
	if next := rr.Pick(&Request{}, cands).Index; next != (first+1)%3 {
		t.Errorf("after explaining, round_robin picked %d, want %d", next, (first+1)%3)
	}
	draws := 0
	rcfg := DefaultConfig()
	rcfg.Rand = func() uint64 { draws++; return 0 }
	rnd := mustNew(t, NameRandom, rcfg)
	if d, _ := rnd.(Explainer).Explain(&Request{}, cands); d.Index != -1 || d.Reason != ReasonRandom || draws != 0 {
		t.Errorf("random Explain: got %+v after %d draws, want index -1 and no draw", d, draws)
	}
	for _, name := range Names() {
		_, ok := mustNew(t, name, DefaultConfig()).(Explainer)
		if want := name == NameRoundRobin || name == NameRandom; ok != want {
			t.Errorf("%s implements Explainer: %v, want %v", name, ok, want)
		}
	}
}
