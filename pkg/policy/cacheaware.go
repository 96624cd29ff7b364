package policy

import (
	"fmt"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// cacheAware is the default policy, SMG's rule cascade (DESIGN.md §5) with one addition, the
// bounded-load rule:
//  1. imbalance guard: max_load − min_load > abs AND max_load > rel × min_load; with the bound
//     off (factor 0, SMG exactly) → least loaded; with it on, the guard raises rule 2's bound
//     by abs for the workers without a long prefill queue (joinBound, queued) and names the
//     fallback of rule 3;
//  2. best match ratio (Matched ÷ Blocks) ≥ threshold among the workers under the load bound
//     (loadBound: below factor × the mean load, counting this request, plus slack; while
//     imbalanced, abs more for a worker without a long prefill queue) → best match, ties by lower
//     load, then at random; the reason names where the winner's match came from;
//  3. otherwise the least-loaded worker: reason imbalance when rule 1 holds, else overloaded when
//     a worker above the bound held a match that would have won, else no_match.
//
// Why the guard yields to the bound (issue 21): a worker that joins a loaded fleet (a
// scale-up, a restart, a recovery) starts at load 0, so SMG's guard holds for as long as the
// joiner is more than 64 requests and 1.5× behind, seconds at fleet load, and sends it every
// request, the repeats whose only cached copy is elsewhere too: their prefixes are computed
// and cached twice, and the hit rate is lost for the rest of the run. Under the bound, the
// joiner takes the requests no worker has cached and the hits of workers over the bound, while
// the hits of workers within it stay where they are cached. While the guard holds, the bound
// of a hit is abs higher: the joiner's load 0 lowers the mean, and the holders, still at the
// load the fleet carried without the joiner, would all be over the plain bound until their
// requests finish, and send it their hits. A holder with a long prefill queue (abs or more
// prefills of the request's size) gets no such grace: its hits would wait seconds there for
// their first token, so they go to the joiner and the holder drains.
//
// Rule 2's bound is what keeps a hot prefix from piling onto one worker: once that worker is
// full, the prefix's requests go to the least-loaded worker, which caches it too; from then on
// both hold it fully, tie on the match, and the tie goes to the lower load, so the prefix is
// served from as many workers as its load needs. With factor 0 the bound is off and the
// cascade is exactly SMG's, where only rule 1 (at 64 requests of spread) stops a pile-up, and
// then for every request at once.
//
// A request with no full block cannot match anything and goes straight to the least-loaded
// worker (reason no_match). It is immutable after construction.
type cacheAware struct {
	threshold float64
	abs       int64
	rel       float64
	factor    float64
	slack     int64
	rnd       func() uint64
}

func newCacheAware(cfg Config) (*cacheAware, error) {
	if err := cfg.validateCacheAware(); err != nil {
		return nil, err
	}
	return &cacheAware{
		threshold: cfg.CacheThreshold,
		abs:       cfg.BalanceAbsThreshold,
		rel:       cfg.BalanceRelThreshold,
		factor:    cfg.BoundedLoadFactor,
		slack:     cfg.BoundedLoadSlack,
		rnd:       cfg.rand(),
	}, nil
}

// Pick implements Policy.
func (p *cacheAware) Pick(req *Request, cands []Candidate) Decision {
	lo, hi := minMaxLoad(cands)
	imbalance := imbalanced(lo, hi, p.abs, p.rel)
	if imbalance && p.factor == 0 {
		return Decision{Index: leastLoaded(p.rnd, cands), Reason: ReasonImbalance}
	}
	if req.Blocks <= 0 {
		return Decision{Index: leastLoaded(p.rnd, cands), Reason: fallback(imbalance, ReasonNoMatch)}
	}

	// Best match under the bound: most matched blocks, then lowest load; count exact ties for
	// a fair draw. full remembers the largest match held by a full worker.
	bound, raised := loadBound(cands, p.factor, p.slack), int64(0)
	if imbalance {
		raised = joinBound(bound, p.abs)
	}
	best, ties, full := -1, 0, 0
	for i := range cands {
		c := &cands[i]
		if c.Load >= bound && (c.Load >= raised || queued(c, req.Blocks, p.abs)) {
			full = max(full, c.Matched)
			continue
		}
		if best < 0 {
			best, ties = i, 1
			continue
		}
		b := &cands[best]
		switch {
		case c.Matched > b.Matched || (c.Matched == b.Matched && c.Load < b.Load):
			best, ties = i, 1
		case c.Matched == b.Matched && c.Load == b.Load:
			ties++
		}
	}
	matched := cands[best].Matched // best ≥ 0: the least-loaded candidate is never full
	// ratio ≥ threshold, written without a division; a zero match is never a hit.
	if !p.hit(matched, req.Blocks) {
		reason := ReasonNoMatch
		if full > matched && p.hit(full, req.Blocks) {
			reason = ReasonOverloaded
		}
		return Decision{Index: leastLoaded(p.rnd, cands), Reason: fallback(imbalance, reason)}
	}
	if ties > 1 {
		k := randIntn(p.rnd, ties)
		load := cands[best].Load
		for i := best; i < len(cands); i++ {
			if cands[i].Matched == matched && cands[i].Load == load {
				if k == 0 {
					best = i
					break
				}
				k--
			}
		}
	}
	return Decision{Index: best, Reason: hitReason(cands[best].Source)}
}

// fallback is the reason of a least-loaded pick: imbalance when the fleet is imbalanced by
// rule 1, else why.
func fallback(imbalance bool, why Reason) Reason {
	if imbalance {
		return ReasonImbalance
	}
	return why
}

// hit reports whether matched of blocks reaches the threshold (a zero match never does).
func (p *cacheAware) hit(matched, blocks int) bool {
	return matched > 0 && float64(matched) >= p.threshold*float64(blocks)
}

// hitReason maps the winner's match source to the decision reason.
func hitReason(s indexer.Source) Reason {
	switch s {
	case indexer.SourceTree:
		return ReasonTreeHit
	case indexer.SourcePending:
		return ReasonPendingHit
	default:
		return ReasonCacheHit
	}
}

// String returns the policy's name.
func (p *cacheAware) String() string { return NameCacheAware }

var (
	_ Policy       = (*cacheAware)(nil)
	_ fmt.Stringer = (*cacheAware)(nil)
)
