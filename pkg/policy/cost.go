package policy

import (
	"fmt"
	"math"
	"sync"
)

// cost is the Dynamo-style policy: it minimises
//
//	prefill_weight × (request_blocks − matched) + in-flight load in blocks
//
// where load in blocks is Candidate.Load × LoadBlocksPerRequest (or × the request's own blocks).
// It is built as a pipeline (STYLE rule 5): filters drop candidates, scorers map each remaining
// candidate to [0,1] (higher is better, aligned with the filtered slice), the weighted sum is
// clamped to [0,1], and the picker takes the best score (ties at random) or samples a softmax
// when Temperature > 0.
//
// The two scorers are the cost's terms normalised by S = prefill_weight × blocks + max_load ×
// blocks_per_load: prefill = matched ÷ blocks with weight prefill_weight × blocks ÷ S, and
// load = 1 − load ÷ max_load with weight max_load × blocks_per_load ÷ S. Their weighted sum is
// exactly 1 − cost ÷ S, a decreasing function of the cost, so its argmax is the cost's argmin
// (and it lies in [0,1] because no filtered candidate's cost exceeds S). It is immutable after
// construction and must not be copied; scratch space comes from a pool so Pick does not
// allocate in steady state.
type cost struct {
	prefillWeight float64
	loadBlocks    float64 // 0: use the request's blocks
	temperature   float64
	filters       []costFilter
	scorers       []costScorer
	rnd           func() uint64
	scratch       sync.Pool // of *costScratch
}

// costFilter removes candidates by compacting s.cands and s.index in place. It must keep at
// least one candidate.
type costFilter interface {
	filter(req *Request, s *costScratch)
}

// costScorer writes one score in [0,1] per filtered candidate into out (len(out) ==
// len(s.cands)) and returns its weight for this request.
type costScorer interface {
	score(req *Request, s *costScratch, out []float64) (weight float64)
}

// costScratch is per-Pick working space: the filtered candidates, their original indices, the
// running total and one scorer's output.
type costScratch struct {
	cands []Candidate
	index []int
	total []float64
	out   []float64
	// Computed once per Pick for the scorers: the largest filtered load, the blocks per unit of
	// load, and S = prefill_weight × blocks + maxLoad × perLoad (the largest possible cost).
	maxLoad float64
	perLoad float64
	scale   float64
}

func newCost(cfg Config) (*cost, error) {
	if err := cfg.validateCost(); err != nil {
		return nil, err
	}
	p := &cost{
		prefillWeight: cfg.PrefillWeight,
		loadBlocks:    cfg.LoadBlocksPerRequest,
		temperature:   cfg.Temperature,
		filters:       []costFilter{balanceFilter{abs: cfg.BalanceAbsThreshold, rel: cfg.BalanceRelThreshold}},
		scorers:       []costScorer{prefillScorer{weight: cfg.PrefillWeight}, loadScorer{}},
		rnd:           cfg.rand(),
	}
	p.scratch.New = func() any { return new(costScratch) }
	return p, nil
}

// Pick implements Policy.
func (p *cost) Pick(req *Request, cands []Candidate) Decision {
	s := p.scratch.Get().(*costScratch)
	defer p.scratch.Put(s)

	s.cands = append(s.cands[:0], cands...)
	s.index = s.index[:0]
	for i := range cands {
		s.index = append(s.index, i)
	}
	for _, f := range p.filters {
		f.filter(req, s)
	}
	n := len(s.cands)
	s.total = resize(s.total, n)
	s.out = resize(s.out, n)
	clear(s.total)

	s.perLoad = p.loadBlocks
	if s.perLoad == 0 {
		s.perLoad = float64(max(req.Blocks, 1))
	}
	s.maxLoad = 0
	for i := range s.cands {
		s.maxLoad = max(s.maxLoad, float64(max(s.cands[i].Load, 0)))
	}

	s.scale = p.prefillWeight*float64(max(req.Blocks, 0)) + s.maxLoad*s.perLoad

	for _, sc := range p.scorers {
		w := sc.score(req, s, s.out)
		if w == 0 {
			continue
		}
		for i, v := range s.out {
			s.total[i] += w * v
		}
	}
	for i, v := range s.total {
		s.total[i] = min(max(v, 0), 1)
	}

	var k int
	if p.temperature > 0 {
		k = softmaxPick(p.rnd, s.total, p.temperature)
	} else {
		k = argmaxPick(p.rnd, s.total)
	}
	return Decision{Index: s.index[k], Reason: ReasonCost}
}

func resize(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

// balanceFilter drops the candidates that are imbalanced relative to the least-loaded one by
// cache_aware's definition (more than abs above it and more than rel times it), so that no
// cache affinity can pile more work onto an already overloaded worker. The least-loaded
// candidate always survives.
type balanceFilter struct {
	abs int64
	rel float64
}

func (f balanceFilter) filter(_ *Request, s *costScratch) {
	lo, _ := minMaxLoad(s.cands)
	kept := 0
	for i := range s.cands {
		if imbalanced(lo, s.cands[i].Load, f.abs, f.rel) {
			continue
		}
		s.cands[kept], s.index[kept] = s.cands[i], s.index[i]
		kept++
	}
	s.cands, s.index = s.cands[:kept], s.index[:kept]
}

// prefillScorer scores the share of the request already cached, matched ÷ blocks.
type prefillScorer struct{ weight float64 }

func (sc prefillScorer) score(req *Request, s *costScratch, out []float64) float64 {
	if req.Blocks <= 0 {
		return 0
	}
	b := float64(req.Blocks)
	for i := range s.cands {
		out[i] = min(max(float64(s.cands[i].Matched)/b, 0), 1)
	}
	if s.scale <= 0 {
		return 0
	}
	return sc.weight * b / s.scale
}

// loadScorer scores spare capacity relative to the busiest candidate, 1 − load ÷ max_load.
type loadScorer struct{}

func (loadScorer) score(req *Request, s *costScratch, out []float64) float64 {
	if s.maxLoad <= 0 || s.scale <= 0 {
		return 0
	}
	for i := range s.cands {
		out[i] = 1 - max(float64(s.cands[i].Load), 0)/s.maxLoad
	}
	return s.maxLoad * s.perLoad / s.scale
}

// argmaxPick returns the index of the highest score, uniformly at random among scores within
// a rounding error of it.
func argmaxPick(rnd func() uint64, scores []float64) int {
	const eps = 1e-12
	best := 0
	for i, v := range scores {
		if v > scores[best] {
			best = i
		}
	}
	top := scores[best]
	ties := 0
	for _, v := range scores {
		if v >= top-eps {
			ties++
		}
	}
	if ties == 1 {
		return best
	}
	k := randIntn(rnd, ties)
	for i, v := range scores {
		if v >= top-eps {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return best
}

// softmaxPick samples index i with probability ∝ exp((ŝ_i − 1)/T), where ŝ is the scores
// min-max normalised to [0,1] (Dynamo's softmax_sample, with scores instead of costs). Equal
// scores give a uniform draw.
func softmaxPick(rnd func() uint64, scores []float64, temperature float64) int {
	lo, hi := scores[0], scores[0]
	for _, v := range scores {
		lo, hi = min(lo, v), max(hi, v)
	}
	if hi-lo <= 0 {
		return randIntn(rnd, len(scores))
	}
	var sum float64
	for _, v := range scores {
		sum += math.Exp(((v-lo)/(hi-lo) - 1) / temperature)
	}
	u := float64(rnd()>>11) / (1 << 53) * sum
	for i, v := range scores {
		u -= math.Exp(((v-lo)/(hi-lo) - 1) / temperature)
		if u < 0 {
			return i
		}
	}
	return len(scores) - 1 // rounding left u ≥ 0 after the last term
}

// String returns the policy's name.
func (p *cost) String() string { return NameCost }

var (
	_ Policy       = (*cost)(nil)
	_ fmt.Stringer = (*cost)(nil)
	_ costFilter   = balanceFilter{}
	_ costScorer   = prefillScorer{}
	_ costScorer   = loadScorer{}
)
