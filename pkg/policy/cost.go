package policy

import (
	"fmt"
	"math"
	"sync"
)

// cost is the Dynamo-style policy: it minimises, per worker w,
//
//	prefill_weight × (request_blocks − matched_w) + queue_weight × queued_prefill_w + decode_weight × active_w
//
// in KV blocks: the blocks w must prefill before this request's first token (the request's
// blocks it lacks, and what this gateway's in-flight requests on w have not prefilled yet),
// and the blocks its in-flight requests hold while they decode. Dynamo's KV router weighs the
// same terms (potential prefill blocks × overlap weight + active decode blocks). Measuring
// load in blocks is what makes the trade-off meaningful: a request in flight costs what it
// still has to prefill and a small share for decoding, not a whole prefix (Config's
// QueueWeight and DecodeWeight say why those shares are small).
//
// It is built as a pipeline (STYLE rule 5): filters drop candidates (the bounded-load rule of
// cache_aware, so that no cache affinity piles more work onto an overloaded worker; with the
// bound off, SMG's imbalance guard instead: with it on, the guard would also drop every worker
// against a joiner at load 0, as cache_aware's doc says), scorers map each remaining candidate to [0,1] (higher is better,
// aligned with the filtered slice), the weighted sum is clamped to [0,1], and the picker takes
// the best score (ties at random) or samples a softmax when Temperature > 0.
//
// The three scorers are the cost's terms normalised by S, the sum of each weighted term's
// largest value over the candidates: a term with values x and weight w scores 1 − x ÷ max_x
// with weight w × max_x ÷ S. Their weighted sum is exactly 1 − cost ÷ S, a decreasing
// function of the cost, so its argmax is the cost's argmin (and it lies in [0,1] because no
// candidate's cost exceeds S). It is immutable after construction and must not be copied;
// scratch space comes from a pool so Pick does not allocate in steady state.
type cost struct {
	prefillWeight float64
	queueWeight   float64
	decodeWeight  float64
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
	// Computed once per Pick for the scorers: the largest uncached, queued and active blocks
	// over the filtered candidates, and S, the weighted sum of the three (the largest
	// possible cost).
	maxUncached float64
	maxQueued   float64
	maxActive   float64
	scale       float64
}

func newCost(cfg Config) (*cost, error) {
	if err := cfg.validateCost(); err != nil {
		return nil, err
	}
	p := &cost{
		prefillWeight: cfg.PrefillWeight,
		queueWeight:   cfg.QueueWeight,
		decodeWeight:  cfg.DecodeWeight,
		temperature:   cfg.Temperature,
		filters: []costFilter{boundFilter{factor: cfg.BoundedLoadFactor, slack: cfg.BoundedLoadSlack,
			abs: cfg.BalanceAbsThreshold, rel: cfg.BalanceRelThreshold}},
		scorers: []costScorer{
			termScorer{term: uncachedBlocks, weight: cfg.PrefillWeight, max: func(s *costScratch) float64 { return s.maxUncached }},
			termScorer{term: queuedBlocks, weight: cfg.QueueWeight, max: func(s *costScratch) float64 { return s.maxQueued }},
			termScorer{term: activeBlocks, weight: cfg.DecodeWeight, max: func(s *costScratch) float64 { return s.maxActive }},
		},
		rnd: cfg.rand(),
	}
	if cfg.BoundedLoadFactor == 0 {
		p.filters = []costFilter{balanceFilter{abs: cfg.BalanceAbsThreshold, rel: cfg.BalanceRelThreshold}}
	}
	p.scratch.New = func() any { return new(costScratch) }
	return p, nil
}

// The cost's terms before weighting, in blocks: the request's blocks c lacks, the blocks c's
// in-flight requests have yet to prefill, and the blocks they hold.
func uncachedBlocks(req *Request, c *Candidate) float64 { return float64(max(req.Blocks-c.Matched, 0)) }
func queuedBlocks(_ *Request, c *Candidate) float64     { return float64(max(c.Prefill, 0)) }
func activeBlocks(_ *Request, c *Candidate) float64     { return float64(max(c.Active, 0)) }

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

	s.maxUncached, s.maxQueued, s.maxActive = 0, 0, 0
	for i := range s.cands {
		c := &s.cands[i]
		s.maxUncached = max(s.maxUncached, uncachedBlocks(req, c))
		s.maxQueued = max(s.maxQueued, queuedBlocks(req, c))
		s.maxActive = max(s.maxActive, activeBlocks(req, c))
	}
	s.scale = p.prefillWeight*s.maxUncached + p.queueWeight*s.maxQueued + p.decodeWeight*s.maxActive

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
// cache_aware's definition (more than abs above it and more than rel times it). The
// least-loaded candidate always survives.
type balanceFilter struct {
	abs int64
	rel float64
}

func (f balanceFilter) filter(_ *Request, s *costScratch) {
	lo, _ := minMaxLoad(s.cands)
	s.keep(func(c *Candidate) bool { return !imbalanced(lo, c.Load, f.abs, f.rel) })
}

// boundFilter drops the candidates at or above the bounded-load limit (loadBound), as
// cache_aware's rule 2 does, so a hot prefix spreads over several workers. The least-loaded
// candidate always survives.
//
// While the fleet is imbalanced by SMG's guard (abs, rel: a worker far behind the others, as
// one that has just joined), the limit is abs higher for the workers without a long prefill
// queue (joinBound, queued, as cache_aware's), and the workers that far behind the busiest one
// do not compete for a request that a worker ahead of them without such a queue holds more of: the
// cost's decode term, at their load, would beat any hit (60 more requests decoding weigh as
// much as a whole prefix), and the holders' hits would be computed again on the joiner. They
// take the requests nobody ahead holds better, and the hits of holders with a queue or over
// the raised limit.
type boundFilter struct {
	factor float64
	slack  int64
	abs    int64
	rel    float64
}

func (f boundFilter) filter(req *Request, s *costScratch) {
	bound := loadBound(s.cands, f.factor, f.slack)
	lo, hi := minMaxLoad(s.cands)
	if !imbalanced(lo, hi, f.abs, f.rel) {
		s.keep(func(c *Candidate) bool { return c.Load < bound })
		return
	}
	raised := joinBound(bound, f.abs)
	s.keep(func(c *Candidate) bool {
		return c.Load < bound || (c.Load < raised && !queued(c, req.Blocks, f.abs))
	})
	behind := func(c *Candidate) bool { return imbalanced(c.Load, hi, f.abs, f.rel) }
	ahead, back := -1, -1 // the largest match among the workers ahead without a queue, and behind
	for i := range s.cands {
		switch c := &s.cands[i]; {
		case behind(c):
			back = max(back, c.Matched)
		case !queued(c, req.Blocks, f.abs):
			ahead = max(ahead, c.Matched)
		}
	}
	if back >= 0 && ahead > back {
		s.keep(func(c *Candidate) bool { return !behind(c) })
	}
}

// keep compacts s.cands and s.index to the candidates ok accepts, in order.
func (s *costScratch) keep(ok func(*Candidate) bool) {
	kept := 0
	for i := range s.cands {
		if !ok(&s.cands[i]) {
			continue
		}
		s.cands[kept], s.index[kept] = s.cands[i], s.index[i]
		kept++
	}
	s.cands, s.index = s.cands[:kept], s.index[:kept]
}

// termScorer scores one term of the cost relative to the candidate with the most of it,
// 1 − x ÷ max_x, with weight × max_x ÷ S.
type termScorer struct {
	term   func(*Request, *Candidate) float64
	weight float64
	max    func(*costScratch) float64
}

func (sc termScorer) score(req *Request, s *costScratch, out []float64) float64 {
	m := sc.max(s)
	if m <= 0 || s.scale <= 0 || sc.weight == 0 {
		return 0
	}
	for i := range s.cands {
		out[i] = 1 - sc.term(req, &s.cands[i])/m
	}
	return sc.weight * m / s.scale
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
	_ costFilter   = boundFilter{}
	_ costScorer   = termScorer{}
)
