package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

func TestCacheAwarePick(t *testing.T) {
	tests := []struct {
		name  string
		cfg   func(*Config)
		req   Request
		cands []Candidate
		rand  []uint64
		want  Decision
	}{
		{
			name:  "best match above threshold from events",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(0, 0, indexer.SourceNone), cand(5, 8, indexer.SourceEvents), cand(1, 2, indexer.SourceEvents)},
			want:  Decision{Index: 1, Reason: ReasonCacheHit},
		},
		{
			name:  "tree source gives tree_hit",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(0, 0, indexer.SourceNone), cand(5, 8, indexer.SourceTree)},
			want:  Decision{Index: 1, Reason: ReasonTreeHit},
		},
		{
			name:  "pending source gives pending_hit",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(2, 3, indexer.SourcePending), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonPendingHit},
		},
		{
			name:  "exactly at threshold is a hit",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(0, 0, indexer.SourceNone), cand(3, 3, indexer.SourceEvents)},
			want:  Decision{Index: 1, Reason: ReasonCacheHit},
		},
		{
			name:  "below threshold goes least loaded",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(4, 0, indexer.SourceNone), cand(3, 2, indexer.SourceEvents), cand(1, 0, indexer.SourceNone)},
			want:  Decision{Index: 2, Reason: ReasonNoMatch},
		},
		{
			name:  "zero threshold still needs a matched block",
			cfg:   func(c *Config) { c.CacheThreshold = 0 },
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(4, 0, indexer.SourceNone), cand(1, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonNoMatch},
		},
		{
			name:  "zero threshold takes any match",
			cfg:   func(c *Config) { c.CacheThreshold = 0 },
			req:   Request{Blocks: 100},
			cands: []Candidate{cand(4, 1, indexer.SourceEvents), cand(1, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonCacheHit},
		},
		{
			name:  "no blocks goes least loaded",
			req:   Request{Blocks: 0, Tokens: 7},
			cands: []Candidate{cand(4, 0, indexer.SourceNone), cand(1, 0, indexer.SourceNone), cand(2, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonNoMatch},
		},
		{
			name: "imbalance overrides a full match beyond the raised bound",
			req:  Request{Blocks: 10},
			// max−min = 190 > 64 and 200 > 1.5×10; bound ⌈1.25 × 261 / 3⌉ + 8 = 117, raised by
			// 64 while imbalanced to 181 ≤ 200.
			cands: []Candidate{cand(200, 10, indexer.SourceEvents), cand(10, 0, indexer.SourceNone), cand(50, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonImbalance},
		},
		{
			name: "imbalanced: a hit over the bound but within abs of it stays",
			req:  Request{Blocks: 10},
			// max−min = 90 > 64 and 100 > 1.5×10: bound ⌈1.25 × 161 / 3⌉ + 8 = 76 ≤ 100, but
			// 100 < 76 + 64: the holder is not abs requests beyond the bound.
			cands: []Candidate{cand(100, 10, indexer.SourceEvents), cand(10, 0, indexer.SourceNone), cand(50, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonCacheHit},
		},
		{
			name:  "SMG: imbalance overrides a full match",
			cfg:   smg,
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(100, 10, indexer.SourceEvents), cand(10, 0, indexer.SourceNone), cand(50, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonImbalance},
		},
		{
			name: "large spread but not relatively imbalanced",
			req:  Request{Blocks: 10},
			// max−min = 70 > 64 but 270 ≤ 1.5×200.
			cands: []Candidate{cand(270, 10, indexer.SourceEvents), cand(200, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonCacheHit},
		},
		{
			name: "SMG: relatively imbalanced but small spread",
			cfg:  smg,
			req:  Request{Blocks: 10},
			// 60 > 1.5×0 but max−min = 60 ≤ 64.
			cands: []Candidate{cand(60, 10, indexer.SourceEvents), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonCacheHit},
		},
		{
			name: "bounded load: the full worker's hit spills to the least loaded",
			req:  Request{Blocks: 10},
			// Same loads: bound ⌈1.25 × 61 / 2⌉ + 8 = 47 ≤ 60.
			cands: []Candidate{cand(60, 10, indexer.SourceEvents), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonOverloaded},
		},
		{
			name: "bounded load: just under the bound still wins",
			req:  Request{Blocks: 10},
			// bound ⌈1.25 × 47 / 2⌉ + 8 = 38 > 37.
			cands: []Candidate{cand(37, 10, indexer.SourceEvents), cand(9, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonCacheHit},
		},
		{
			name: "bounded load: at the bound it spills",
			req:  Request{Blocks: 10},
			// bound ⌈1.25 × 49 / 2⌉ + 8 = 39.
			cands: []Candidate{cand(39, 10, indexer.SourceEvents), cand(9, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonOverloaded},
		},
		{
			name: "bounded load: a copy on a worker under the bound wins",
			req:  Request{Blocks: 10},
			// A hot prefix already copied to worker 2: bound ⌈1.25 × 91 / 3⌉ + 8 = 46.
			cands: []Candidate{cand(60, 10, indexer.SourceEvents), cand(10, 0, indexer.SourceNone), cand(20, 10, indexer.SourceEvents)},
			want:  Decision{Index: 2, Reason: ReasonCacheHit},
		},
		{
			name:  "bounded load: a partial match under the bound beats a spill",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(60, 10, indexer.SourceEvents), cand(10, 0, indexer.SourceNone), cand(20, 4, indexer.SourceEvents)},
			want:  Decision{Index: 2, Reason: ReasonCacheHit},
		},
		{
			name:  "bounded load: a full worker below the threshold is no_match",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(60, 2, indexer.SourceEvents), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonNoMatch},
		},
		{
			name: "bounded load: the slack keeps a small pile-up",
			req:  Request{Blocks: 10},
			// 8 of 8 requests on one worker: bound ⌈1.25 × 9 / 3⌉ + 8 = 12.
			cands: []Candidate{cand(8, 10, indexer.SourceEvents), cand(0, 0, indexer.SourceNone), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonCacheHit},
		},
		{
			name: "a joiner at load 0: hits within the bound stay on their holders",
			req:  Request{Blocks: 10},
			// 70 − 0 > 64 and 70 > 1.5 × 0 (SMG's imbalance), but 70 < bound ⌈1.25 × 211 / 4⌉ + 8 = 74.
			cands: []Candidate{cand(70, 10, indexer.SourceEvents), cand(70, 0, indexer.SourceNone), cand(70, 0, indexer.SourceNone), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonCacheHit},
		},
		{
			name:  "a joiner at load 0 takes what nobody caches, reason imbalance",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(70, 0, indexer.SourceNone), cand(70, 2, indexer.SourceEvents), cand(70, 0, indexer.SourceNone), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 3, Reason: ReasonImbalance},
		},
		{
			name:  "SMG: a joiner at load 0 takes everything",
			cfg:   smg,
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(70, 10, indexer.SourceEvents), cand(70, 0, indexer.SourceNone), cand(70, 0, indexer.SourceNone), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 3, Reason: ReasonImbalance},
		},
		{
			name: "imbalance with zero minimum",
			req:  Request{Blocks: 10},
			// 200 − 0 > 64 and 200 > 0; bound ⌈1.25 × 201 / 2⌉ + 8 = 134, raised to 198 ≤ 200.
			cands: []Candidate{cand(200, 10, indexer.SourceEvents), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonImbalance},
		},
		{
			name: "a joiner at load 0 behind holders over the bound: their hits stay",
			req:  Request{Blocks: 10},
			// Two workers at 120 and one joined at 0: bound ⌈1.25 × 241 / 3⌉ + 8 = 109 ≤ 120,
			// raised to 173 while imbalanced (the scale-up of issue 21's late scenario).
			cands: []Candidate{cand(120, 0, indexer.SourceNone), cand(120, 10, indexer.SourceEvents), cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 1, Reason: ReasonCacheHit},
		},
		{
			name: "a joiner at load 0 takes the hits of a holder with a long prefill queue",
			req:  Request{Blocks: 10},
			// As above, but the holder has 64 prompts of 10 blocks left to prefill (and one block):
			// its hit would wait behind them, so only the plain bound (109) counts.
			cands: []Candidate{cand(120, 0, indexer.SourceNone), {Load: 120, Matched: 10, Source: indexer.SourceEvents, Prefill: 641}, cand(0, 0, indexer.SourceNone)},
			want:  Decision{Index: 2, Reason: ReasonImbalance},
		},
		{
			name: "the joiner ahead at its peak keeps its hits from the workers behind",
			req:  Request{Blocks: 10},
			// The joiner at 150 took the new prefixes; the others fell to 60 and 70: 150 − 60 > 64
			// and 150 > 90; bound ⌈1.25 × 281 / 3⌉ + 8 = 126, raised to 190.
			cands: []Candidate{cand(60, 0, indexer.SourceNone), cand(70, 0, indexer.SourceNone), cand(150, 10, indexer.SourceEvents)},
			want:  Decision{Index: 2, Reason: ReasonCacheHit},
		},
		{
			name:  "equal match: lower load wins",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(5, 6, indexer.SourceEvents), cand(2, 6, indexer.SourceTree), cand(3, 6, indexer.SourceEvents)},
			want:  Decision{Index: 1, Reason: ReasonTreeHit},
		},
		{
			name:  "equal match and load: random picks the second tie",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(2, 6, indexer.SourceEvents), cand(2, 1, indexer.SourceEvents), cand(2, 6, indexer.SourceTree), cand(2, 6, indexer.SourcePending)},
			rand:  []uint64{nth(1, 3)},
			want:  Decision{Index: 2, Reason: ReasonTreeHit},
		},
		{
			name:  "equal match and load: random picks the third tie",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(2, 6, indexer.SourceEvents), cand(2, 1, indexer.SourceEvents), cand(2, 6, indexer.SourceTree), cand(2, 6, indexer.SourcePending)},
			rand:  []uint64{nth(2, 3)},
			want:  Decision{Index: 3, Reason: ReasonPendingHit},
		},
		{
			name:  "least-load ties broken at random",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(1, 0, indexer.SourceNone), cand(3, 0, indexer.SourceNone), cand(1, 0, indexer.SourceNone)},
			rand:  []uint64{nth(1, 2)},
			want:  Decision{Index: 2, Reason: ReasonNoMatch},
		},
		{
			name:  "matched beyond blocks is still a hit",
			req:   Request{Blocks: 2},
			cands: []Candidate{cand(0, 0, indexer.SourceNone), cand(1, 5, indexer.SourceEvents)},
			want:  Decision{Index: 1, Reason: ReasonCacheHit},
		},
		{
			name:  "single candidate",
			req:   Request{Blocks: 3},
			cands: []Candidate{cand(7, 0, indexer.SourceNone)},
			want:  Decision{Index: 0, Reason: ReasonNoMatch},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			r := tc.rand
			if r == nil {
				r = []uint64{0}
			}
			cfg.Rand = seqRand(r...)
			p := mustNew(t, NameCacheAware, cfg)
			got := p.Pick(&tc.req, tc.cands)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Pick() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// smg turns the bounded-load rule off: SMG's cascade exactly.
func smg(c *Config) { c.BoundedLoadFactor = 0 }

// TestCacheAwareProperties checks the cascade's invariants on random instances, with the
// bounded-load rule on and off: with it off, an imbalance sends the request to the least
// loaded; otherwise, when the best ratio among the workers under the load bound (abs higher
// while imbalanced) reaches the
// threshold, the winner has that match and, among those, the lowest load; otherwise the winner
// is least loaded, with reason imbalance when the fleet is imbalanced.
func TestCacheAwareProperties(t *testing.T) {
	for _, factor := range []float64{0, DefaultBoundedLoadFactor, 1} {
		t.Run(fmt.Sprint("factor=", factor), func(t *testing.T) { cacheAwareProperties(t, factor) })
	}
}

func cacheAwareProperties(t *testing.T, factor float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := DefaultConfig()
	cfg.Rand = rng.Uint64
	cfg.BoundedLoadFactor = factor
	p := mustNew(t, NameCacheAware, cfg)
	cands := make([]Candidate, 0, 8)
	for iter := range 20000 {
		req := Request{Blocks: rng.IntN(40)}
		cands = cands[:0]
		for range 1 + rng.IntN(8) {
			m := 0
			if req.Blocks > 0 {
				m = rng.IntN(req.Blocks + 1)
			}
			cands = append(cands, Candidate{Load: int64(rng.IntN(150)), Matched: m, Source: indexer.Source(1 + rng.IntN(3)),
				Prefill: int64(rng.IntN(64*40)) * int64(rng.IntN(2))})
		}
		d := p.Pick(&req, cands)
		if d.Index < 0 || d.Index >= len(cands) {
			t.Fatalf("iter %d: got index %d, want in [0,%d)", iter, d.Index, len(cands))
		}
		lo, hi := minMaxLoad(cands)
		bound := loadBound(cands, factor, cfg.BoundedLoadSlack)
		abs := cfg.BalanceAbsThreshold
		joining := factor > 0 && imbalanced(lo, hi, abs, cfg.BalanceRelThreshold)
		// While imbalanced, a worker over the bound still wins on its cache unless it is abs
		// beyond the bound or has abs or more prefills of the request's size queued.
		within := func(c Candidate) bool {
			return c.Load < bound || (joining && c.Load < bound+abs && c.Prefill < abs*int64(max(req.Blocks, 1)))
		}
		bestM, fullM := 0, 0
		for _, c := range cands {
			if within(c) {
				bestM = max(bestM, c.Matched)
			} else {
				fullM = max(fullM, c.Matched)
			}
		}
		hit := func(m int) bool {
			return req.Blocks > 0 && m > 0 && float64(m)/float64(req.Blocks) >= cfg.CacheThreshold
		}
		w := cands[d.Index]
		switch {
		case factor == 0 && imbalanced(lo, hi, cfg.BalanceAbsThreshold, cfg.BalanceRelThreshold):
			if d.Reason != ReasonImbalance || w.Load != lo {
				t.Fatalf("iter %d: imbalanced %v: got %+v (load %d), want least loaded %d with reason imbalance", iter, cands, d, w.Load, lo)
			}
		case hit(bestM):
			if w.Matched != bestM || !within(w) {
				t.Fatalf("iter %d: %v: got worker with match %d, want the best match %d", iter, cands, w.Matched, bestM)
			}
			for _, c := range cands {
				if c.Matched == bestM && c.Load < w.Load && within(c) {
					t.Fatalf("iter %d: %v: got load %d, a best-match worker has load %d", iter, cands, w.Load, c.Load)
				}
			}
			if d.Reason != hitReason(w.Source) {
				t.Fatalf("iter %d: got reason %q, want %q", iter, d.Reason, hitReason(w.Source))
			}
		default:
			want := ReasonNoMatch
			switch {
			case imbalanced(lo, hi, cfg.BalanceAbsThreshold, cfg.BalanceRelThreshold):
				want = ReasonImbalance
			case fullM > bestM && hit(fullM):
				want = ReasonOverloaded
			}
			if d.Reason != want || w.Load != lo {
				t.Fatalf("iter %d: %v: got %+v (load %d), want least loaded %d with reason %s", iter, cands, d, w.Load, lo, want)
			}
		}
	}
}

// TestCacheAwareTieFairness checks that exact ties are spread evenly by the random source.
func TestCacheAwareTieFairness(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rand = splitmix(42)
	p := mustNew(t, NameCacheAware, cfg)
	cands := []Candidate{cand(1, 5, indexer.SourceEvents), cand(1, 5, indexer.SourceEvents), cand(0, 1, indexer.SourceEvents), cand(1, 5, indexer.SourceEvents)}
	counts := make([]int, len(cands))
	const n = 30000
	for range n {
		counts[p.Pick(&Request{Blocks: 8}, cands).Index]++
	}
	if counts[2] != 0 {
		t.Fatalf("lower match chosen %d times, want 0", counts[2])
	}
	for _, i := range []int{0, 1, 3} {
		if counts[i] < n/3-n/30 || counts[i] > n/3+n/30 {
			t.Errorf("tie %d chosen %d times, want about %d (counts %v)", i, counts[i], n/3, counts)
		}
	}
}
