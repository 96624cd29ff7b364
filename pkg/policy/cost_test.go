package policy

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// costCand builds a cost candidate: in-flight load, matched blocks, blocks its in-flight
// requests have not prefilled, and the blocks they hold.
func costCand(load int64, matched int, prefill, active int64) Candidate {
	return Candidate{Key: uint64(load)<<32 | uint64(matched), Load: load, Matched: matched, Source: indexer.SourceEvents, Prefill: prefill, Active: active}
}

func TestCostPick(t *testing.T) {
	tests := []struct {
		name  string
		cfg   func(*Config)
		req   Request
		cands []Candidate
		rand  []uint64
		want  int
	}{
		{
			name: "cheaper prefill wins at equal load",
			req:  Request{Blocks: 10},
			// costs 10, 2, 5
			cands: []Candidate{cand(0, 0, 0), cand(0, 8, indexer.SourceEvents), cand(0, 5, indexer.SourceEvents)},
			want:  1,
		},
		{
			name: "queued prefill at weight 1 counts like the request's own",
			cfg:  func(c *Config) { c.QueueWeight = 1 },
			req:  Request{Blocks: 10},
			// costs 0 + 12 vs 10 + 0 vs 4 + 7
			cands: []Candidate{costCand(1, 10, 12, 20), costCand(1, 0, 0, 20), costCand(1, 6, 7, 20)},
			want:  1,
		},
		{
			name: "a hit stays unless about four of its size are queued ahead",
			req:  Request{Blocks: 10},
			// costs 0 + 36/4 = 9 vs 10 + 0, then 0 + 44/4 = 11 vs 10
			cands: []Candidate{costCand(1, 10, 36, 20), costCand(1, 0, 0, 20)},
			want:  0,
		},
		{
			name:  "a hit moves when more are queued ahead",
			req:   Request{Blocks: 10},
			cands: []Candidate{costCand(1, 10, 44, 20), costCand(1, 0, 0, 20)},
			want:  1,
		},
		{
			name: "a hit beats a cold worker with many decoding requests less",
			cfg:  func(c *Config) { c.BoundedLoadFactor = 0 }, // the decode term alone
			req:  Request{Blocks: 62},
			// 60 more requests of 64 blocks decoding weigh 60 blocks at 1/64: less than the
			// 62 the hit saves (the in-flight count used to weigh 60 × 62 blocks).
			cands: []Candidate{costCand(70, 62, 0, 70*64), costCand(10, 0, 0, 10*64)},
			want:  0,
		},
		{
			name:  "decoding load outweighs the hit when it is large enough",
			cfg:   func(c *Config) { c.BalanceAbsThreshold, c.BoundedLoadFactor = 1000, 0 },
			req:   Request{Blocks: 62},
			cands: []Candidate{costCand(80, 62, 0, 80*64), costCand(10, 0, 0, 10*64)},
			want:  1,
		},
		{
			name: "exact tie broken at random",
			req:  Request{Blocks: 10},
			// costs 10, 0 + 40/4, 5 + 40/4
			cands: []Candidate{costCand(0, 0, 0, 0), costCand(1, 10, 40, 0), costCand(1, 5, 40, 0)},
			rand:  []uint64{nth(1, 2)},
			want:  1,
		},
		{
			name:  "exact tie, other draw",
			req:   Request{Blocks: 10},
			cands: []Candidate{costCand(0, 0, 0, 0), costCand(1, 10, 40, 0), costCand(1, 5, 40, 0)},
			rand:  []uint64{nth(0, 2)},
			want:  0,
		},
		{
			name: "prefill weight scales the prefill term",
			cfg:  func(c *Config) { c.PrefillWeight = 3 },
			req:  Request{Blocks: 10},
			// costs: 3×0 + 640/64 = 10 vs 3×10 + 0 = 30
			cands: []Candidate{costCand(2, 10, 0, 640), costCand(0, 0, 0, 0)},
			want:  0,
		},
		{
			name: "decode weight scales the decode term",
			cfg:  func(c *Config) { c.DecodeWeight = 1 },
			req:  Request{Blocks: 10},
			// costs: 0 + 20 vs 10 + 0
			cands: []Candidate{costCand(2, 10, 0, 20), costCand(0, 0, 0, 0)},
			want:  1,
		},
		{
			name:  "only the decode term: fewest active blocks",
			cfg:   func(c *Config) { c.PrefillWeight, c.QueueWeight = 0, 0 },
			req:   Request{Blocks: 10},
			cands: []Candidate{costCand(2, 10, 0, 30), costCand(1, 0, 9, 10), costCand(3, 10, 0, 40)},
			want:  1,
		},
		{
			name:  "no blocks: least queued prefill",
			cfg:   func(c *Config) { c.DecodeWeight = 0 },
			req:   Request{Blocks: 0},
			cands: []Candidate{costCand(2, 0, 5, 0), costCand(1, 0, 1, 0), costCand(3, 0, 9, 0)},
			want:  1,
		},
		{
			name: "balance filter drops the imbalanced match",
			cfg:  func(c *Config) { c.DecodeWeight = 0; c.BoundedLoadFactor = 0 },
			req:  Request{Blocks: 10},
			// cost alone prefers 0, but 100 is imbalanced against 10.
			cands: []Candidate{costCand(100, 10, 0, 0), costCand(10, 0, 0, 0)},
			want:  1,
		},
		{
			name: "bound filter drops the match above the bounded load",
			cfg:  func(c *Config) { c.DecodeWeight = 0 },
			req:  Request{Blocks: 10},
			// loads 30, 10, 10: bound ⌈1.25 × 51 / 3⌉ + 8 = 30, so the hit on 0 is not
			// taken and the partial match on 2 is the cheapest left.
			cands: []Candidate{costCand(30, 10, 0, 0), costCand(10, 0, 0, 0), costCand(10, 4, 0, 0)},
			want:  2,
		},
		{
			name: "bound on: a joiner at load 0 does not drop the workers within the bound",
			cfg:  func(c *Config) { c.DecodeWeight = 0 },
			req:  Request{Blocks: 10},
			// 70 − 0 > 64 and 70 > 1.5 × 0 (SMG's imbalance), but the bound ⌈1.25 × 211 / 4⌉ + 8
			// = 74 keeps the three: the full match on 0 is the cheapest.
			cands: []Candidate{costCand(70, 10, 0, 0), costCand(70, 0, 0, 0), costCand(70, 0, 0, 0), costCand(0, 0, 0, 0)},
			want:  0,
		},
		{
			name: "bound on: a joiner at load 0 does not take the hits of holders within abs of the bound",
			req:  Request{Blocks: 62},
			// Two workers at 120 with prefills queued and 120 requests decoding, a joiner at 0:
			// bound ⌈1.25 × 241 / 3⌉ + 8 = 109 ≤ 120, raised by 64 while imbalanced. On cost
			// alone the joiner would win (62 vs 0 + 300/4 + 120 × 64/64 = 195).
			cands: []Candidate{costCand(120, 0, 300, 120*64), costCand(120, 62, 300, 120*64), costCand(0, 0, 0, 0)},
			want:  1,
		},
		{
			name:  "bound on: the joiner takes what the holders ahead do not hold",
			req:   Request{Blocks: 62},
			cands: []Candidate{costCand(120, 0, 300, 120*64), costCand(120, 0, 300, 120*64), costCand(0, 0, 0, 0)},
			want:  2,
		},
		{
			name: "bound on: the joiner takes the hits of a holder abs beyond the bound",
			req:  Request{Blocks: 62},
			// 250 and 120 against 0: bound ⌈1.25 × 371 / 3⌉ + 8 = 163, raised to 227 ≤ 250.
			cands: []Candidate{costCand(120, 0, 300, 120*64), costCand(250, 62, 300, 250*64), costCand(0, 0, 0, 0)},
			want:  2,
		},
		{
			name: "bound on: the joiner takes the hits of a holder with a long prefill queue",
			req:  Request{Blocks: 62},
			// As above, but the holder has 65 prompts of 62 blocks still to prefill (> 64).
			cands: []Candidate{costCand(120, 0, 300, 120*64), costCand(120, 62, 65*62, 120*64), costCand(0, 0, 0, 0)},
			want:  2,
		},
		{
			name: "bound on: a holder with a long prefill queue does not keep the joiner out",
			req:  Request{Blocks: 62},
			// Loads 150, 90 and 0: the holder at 90 is under the bound (⌈1.25 × 241 / 3⌉ + 8 =
			// 109) and not behind (150 − 90 ≤ 64), but 65 prompts wait on it: the joiner
			// competes, and its cost (62) beats the holder's queue (65 × 62 / 4 + 90).
			cands: []Candidate{costCand(150, 0, 300, 150*64), costCand(90, 62, 65*62, 90*64), costCand(0, 0, 0, 0)},
			want:  2,
		},
		{
			name:  "bound off: the same joiner takes it (SMG's imbalance guard)",
			cfg:   func(c *Config) { c.DecodeWeight = 0; c.BoundedLoadFactor = 0 },
			req:   Request{Blocks: 10},
			cands: []Candidate{costCand(70, 10, 0, 0), costCand(70, 0, 0, 0), costCand(70, 0, 0, 0), costCand(0, 0, 0, 0)},
			want:  3,
		},
		{
			name:  "without the bound the hit is taken",
			cfg:   func(c *Config) { c.DecodeWeight = 0; c.BoundedLoadFactor = 0 },
			req:   Request{Blocks: 10},
			cands: []Candidate{costCand(30, 10, 0, 0), costCand(10, 0, 0, 0), costCand(10, 4, 0, 0)},
			want:  0,
		},
		{
			name:  "all idle and unmatched: random",
			req:   Request{Blocks: 4},
			cands: []Candidate{cand(0, 0, 0), cand(0, 0, 0), cand(0, 0, 0)},
			rand:  []uint64{nth(2, 3)},
			want:  2,
		},
		{
			name:  "softmax with u=0 takes the first candidate",
			cfg:   func(c *Config) { c.Temperature = 0.1 },
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(0, 0, 0), cand(0, 10, indexer.SourceEvents)},
			rand:  []uint64{0},
			want:  0,
		},
		{
			name:  "softmax with u near 1 takes the last candidate",
			cfg:   func(c *Config) { c.Temperature = 0.1 },
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(0, 10, indexer.SourceEvents), cand(0, 0, 0)},
			rand:  []uint64{^uint64(0)},
			want:  1,
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
			p := mustNew(t, NameCost, cfg)
			got := p.Pick(&tc.req, tc.cands)
			if diff := cmp.Diff(Decision{Index: tc.want, Reason: ReasonCost}, got); diff != "" {
				t.Errorf("Pick() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCostMinimises checks on random instances that the deterministic pick has the minimal
// cost among the candidates that pass the filter: below the bounded load, or with the bound off
// (factor 0), not imbalanced against the least loaded.
func TestCostMinimises(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dw := range []float64{0, DefaultDecodeWeight, 0.5, 3} {
		cfg := DefaultConfig()
		cfg.Rand = rng.Uint64
		cfg.DecodeWeight = dw
		cfg.PrefillWeight = []float64{0, 1, 2.5}[rng.IntN(3)]
		cfg.QueueWeight = []float64{0, DefaultQueueWeight, 1}[rng.IntN(3)]
		cfg.BoundedLoadFactor = []float64{0, 1, DefaultBoundedLoadFactor, 2}[rng.IntN(4)]
		cfg.BoundedLoadSlack = int64(rng.IntN(10))
		p := mustNew(t, NameCost, cfg)
		var cands, kept []Candidate
		for iter := range 10000 {
			req := Request{Blocks: rng.IntN(70)}
			cands = cands[:0]
			for range 1 + rng.IntN(8) {
				load := int64(rng.IntN(120))
				cands = append(cands, Candidate{Load: load, Matched: rng.IntN(req.Blocks + 1),
					Prefill: int64(rng.IntN(200)) << (3 * rng.IntN(4)), Active: load * int64(rng.IntN(80))})
			}
			d := p.Pick(&req, cands)
			costOf := func(c Candidate) float64 {
				return cfg.PrefillWeight*float64(req.Blocks-c.Matched) + cfg.QueueWeight*float64(c.Prefill) + cfg.DecodeWeight*float64(c.Active)
			}
			// The reference filters: the same rules written out again.
			kept = append(kept[:0], cands...)
			bound := loadBound(kept, cfg.BoundedLoadFactor, cfg.BoundedLoadSlack)
			abs, rel := cfg.BalanceAbsThreshold, cfg.BalanceRelThreshold
			lo, hi := minMaxLoad(cands)
			joining := cfg.BoundedLoadFactor > 0 && imbalanced(lo, hi, abs, rel)
			// While imbalanced, a worker over the bound stays in unless it is abs beyond it or
			// has abs or more prefills of the request's size queued; the workers far behind
			// the busiest one compete only when no worker ahead of them without such a queue
			// holds more of the request.
			long := func(c Candidate) bool { return c.Prefill >= abs*int64(max(req.Blocks, 1)) }
			within := func(c Candidate) bool {
				return c.Load < bound || (joining && c.Load < bound+abs && !long(c))
			}
			behind := func(c Candidate) bool { return imbalanced(c.Load, hi, abs, rel) }
			aheadM, behindM := -1, -1
			for _, c := range cands {
				switch {
				case !within(c):
				case behind(c):
					behindM = max(behindM, c.Matched)
				case !long(c):
					aheadM = max(aheadM, c.Matched)
				}
			}
			passes := func(c Candidate) bool {
				if cfg.BoundedLoadFactor == 0 {
					return !imbalanced(lo, c.Load, abs, rel)
				}
				if joining && behind(c) && aheadM > behindM {
					return false
				}
				return within(c)
			}
			if !passes(cands[d.Index]) {
				t.Fatalf("dw %g iter %d: picked %+v, which a filter drops (min load %d, bound %d)", dw, iter, cands[d.Index], lo, bound)
			}
			got := costOf(cands[d.Index])
			for _, c := range cands {
				if passes(c) && costOf(c) < got-1e-6 {
					t.Fatalf("dw %g iter %d: got cost %g, candidate %+v costs %g (req %+v, cands %+v)", dw, iter, got, c, costOf(c), req, cands)
				}
			}
		}
	}
}

// TestCostTemperature: a low temperature nearly always takes the cheapest worker, a high one
// spreads picks almost uniformly.
func TestCostTemperature(t *testing.T) {
	cands := []Candidate{cand(0, 10, indexer.SourceEvents), cand(0, 5, indexer.SourceEvents), cand(0, 0, 0)}
	tests := []struct {
		temp             float64
		minBest, maxBest int
	}{
		{temp: 0.01, minBest: 2990, maxBest: 3000},
		{temp: 100, minBest: 850, maxBest: 1150},
	}
	for _, tc := range tests {
		cfg := DefaultConfig()
		cfg.Temperature = tc.temp
		cfg.Rand = splitmix(9)
		p := mustNew(t, NameCost, cfg)
		best := 0
		for range 3000 {
			if p.Pick(&Request{Blocks: 10}, cands).Index == 0 {
				best++
			}
		}
		if best < tc.minBest || best > tc.maxBest {
			t.Errorf("temperature %g: cheapest chosen %d of 3000 times, want in [%d,%d]", tc.temp, best, tc.minBest, tc.maxBest)
		}
	}
}
