package policy

import (
	"fmt"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// cacheAware is the default policy, SMG's rule cascade (DESIGN.md §5):
//  1. imbalance guard: max_load − min_load > abs AND max_load > rel × min_load → least loaded;
//  2. best match ratio (Matched ÷ Blocks) ≥ threshold → best match, ties by lower load, then at
//     random; the reason names where the winner's match came from;
//  3. otherwise the least-loaded worker.
//
// A request with no full block cannot match anything and goes straight to the least-loaded
// worker (reason no_match). It is immutable after construction.
type cacheAware struct {
	threshold float64
	abs       int64
	rel       float64
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
		rnd:       cfg.rand(),
	}, nil
}

// Pick implements Policy.
func (p *cacheAware) Pick(req *Request, cands []Candidate) Decision {
	lo, hi := minMaxLoad(cands)
	if imbalanced(lo, hi, p.abs, p.rel) {
		return Decision{Index: leastLoaded(p.rnd, cands), Reason: ReasonImbalance}
	}
	if req.Blocks <= 0 {
		return Decision{Index: leastLoaded(p.rnd, cands), Reason: ReasonNoMatch}
	}

	// Best match: most matched blocks, then lowest load; count exact ties for a fair draw.
	best, ties := 0, 1
	for i := 1; i < len(cands); i++ {
		c, b := &cands[i], &cands[best]
		switch {
		case c.Matched > b.Matched || (c.Matched == b.Matched && c.Load < b.Load):
			best, ties = i, 1
		case c.Matched == b.Matched && c.Load == b.Load:
			ties++
		}
	}
	matched := cands[best].Matched
	// ratio ≥ threshold, written without a division; a zero match is never a hit.
	if matched <= 0 || float64(matched) < p.threshold*float64(req.Blocks) {
		return Decision{Index: leastLoaded(p.rnd, cands), Reason: ReasonNoMatch}
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
