package policy

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kvgate/kvgate/pkg/indexer"
)

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
			name: "load in request blocks offsets the match",
			req:  Request{Blocks: 10},
			// costs: 10+0, 0+2×10, 6+0
			cands: []Candidate{cand(0, 0, 0), cand(2, 10, indexer.SourceEvents), cand(0, 4, indexer.SourceTree)},
			want:  2,
		},
		{
			name: "exact tie broken at random",
			req:  Request{Blocks: 10},
			// costs 10, 0+10, 15
			cands: []Candidate{cand(0, 0, 0), cand(1, 10, indexer.SourceEvents), cand(1, 5, indexer.SourceEvents)},
			rand:  []uint64{nth(1, 2)},
			want:  1,
		},
		{
			name:  "exact tie, other draw",
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(0, 0, 0), cand(1, 10, indexer.SourceEvents), cand(1, 5, indexer.SourceEvents)},
			rand:  []uint64{nth(0, 2)},
			want:  0,
		},
		{
			name: "blocks per request overrides the request size",
			cfg:  func(c *Config) { c.LoadBlocksPerRequest = 2 },
			req:  Request{Blocks: 10},
			// costs: 0+3×2 = 6 vs 10+0
			cands: []Candidate{cand(3, 10, indexer.SourceEvents), cand(0, 0, 0)},
			want:  0,
		},
		{
			name: "prefill weight scales the cache term",
			cfg:  func(c *Config) { c.PrefillWeight = 3 },
			req:  Request{Blocks: 10},
			// costs: 3×0+2×10 = 20 vs 3×10+0 = 30
			cands: []Candidate{cand(2, 10, indexer.SourceEvents), cand(0, 0, 0)},
			want:  0,
		},
		{
			name:  "zero prefill weight is least load",
			cfg:   func(c *Config) { c.PrefillWeight = 0 },
			req:   Request{Blocks: 10},
			cands: []Candidate{cand(2, 10, indexer.SourceEvents), cand(1, 0, 0), cand(3, 10, 0)},
			want:  1,
		},
		{
			name:  "no blocks is least load",
			req:   Request{Blocks: 0},
			cands: []Candidate{cand(2, 0, 0), cand(1, 0, 0), cand(3, 0, 0)},
			want:  1,
		},
		{
			name: "balance filter drops the overloaded match",
			cfg:  func(c *Config) { c.LoadBlocksPerRequest = 0.001 },
			req:  Request{Blocks: 10},
			// cost alone prefers 0 (0.1 vs 10) but 100 is imbalanced against 10.
			cands: []Candidate{cand(100, 10, indexer.SourceEvents), cand(10, 0, 0)},
			want:  1,
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
// cost among the candidates that are not imbalanced against the least loaded.
func TestCostMinimises(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, lb := range []float64{0, 0.5, 3} {
		cfg := DefaultConfig()
		cfg.Rand = rng.Uint64
		cfg.LoadBlocksPerRequest = lb
		cfg.PrefillWeight = []float64{0, 1, 2.5}[rng.IntN(3)]
		p := mustNew(t, NameCost, cfg)
		var cands []Candidate
		for iter := range 10000 {
			req := Request{Blocks: rng.IntN(70)}
			cands = cands[:0]
			for range 1 + rng.IntN(8) {
				cands = append(cands, Candidate{Load: int64(rng.IntN(120)), Matched: rng.IntN(req.Blocks + 1)})
			}
			d := p.Pick(&req, cands)
			per := lb
			if per == 0 {
				per = float64(max(req.Blocks, 1))
			}
			costOf := func(c Candidate) float64 {
				return cfg.PrefillWeight*float64(req.Blocks-c.Matched) + float64(c.Load)*per
			}
			lo, _ := minMaxLoad(cands)
			if imbalanced(lo, cands[d.Index].Load, cfg.BalanceAbsThreshold, cfg.BalanceRelThreshold) {
				t.Fatalf("lb %g iter %d: picked an imbalanced candidate %+v (min load %d)", lb, iter, cands[d.Index], lo)
			}
			got := costOf(cands[d.Index])
			for _, c := range cands {
				if imbalanced(lo, c.Load, cfg.BalanceAbsThreshold, cfg.BalanceRelThreshold) {
					continue
				}
				if costOf(c) < got-1e-6 {
					t.Fatalf("lb %g iter %d: got cost %g, candidate %+v costs %g (req %+v, cands %+v)", lb, iter, got, c, costOf(c), req, cands)
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
