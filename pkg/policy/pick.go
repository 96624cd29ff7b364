package policy

import (
	"math"
	"math/bits"
)

// Helpers shared by the policies. None allocates.

// randIntn returns a uniform value in [0,n) for n > 0 using Lemire's multiply-shift; the bias
// is at most n/2^64, negligible for worker counts.
func randIntn(rnd func() uint64, n int) int {
	if n <= 1 {
		return 0
	}
	hi, _ := bits.Mul64(rnd(), uint64(n))
	return int(hi)
}

// minMaxLoad returns the smallest and largest Load in cands (non-empty).
func minMaxLoad(cands []Candidate) (lo, hi int64) {
	lo, hi = cands[0].Load, cands[0].Load
	for i := 1; i < len(cands); i++ {
		l := cands[i].Load
		if l < lo {
			lo = l
		}
		if l > hi {
			hi = l
		}
	}
	return lo, hi
}

// leastLoaded returns the index of a least-loaded candidate, uniformly at random among ties
// (one rand call, only when there is a tie).
func leastLoaded(rnd func() uint64, cands []Candidate) int {
	best, ties := 0, 1
	for i := 1; i < len(cands); i++ {
		switch l := cands[i].Load; {
		case l < cands[best].Load:
			best, ties = i, 1
		case l == cands[best].Load:
			ties++
		}
	}
	if ties == 1 {
		return best
	}
	k := randIntn(rnd, ties)
	min := cands[best].Load
	for i := best; i < len(cands); i++ {
		if cands[i].Load == min {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return best // unreachable: k < ties
}

// imbalanced is SMG's load guard (DESIGN.md §5): the spread exceeds abs AND the maximum
// exceeds rel times the minimum.
func imbalanced(lo, hi, abs int64, rel float64) bool {
	// The spread is computed in uint64 so that extreme loads cannot overflow (lo ≤ hi, abs ≥ 0).
	return uint64(hi)-uint64(lo) > uint64(abs) && float64(hi) > rel*float64(lo)
}

// loadBound returns the bounded-loads capacity of Mirrokni et al. for cands (non-empty) with
// factor c ≥ 1, plus slack: a candidate with Load ≥ the bound is full. The least-loaded
// candidate is never full (its load is at most the mean, which is below the bound). c = 0
// returns the largest int64: no candidate is full. Negative loads count as 0.
func loadBound(cands []Candidate, c float64, slack int64) int64 {
	if c == 0 {
		return math.MaxInt64
	}
	var total float64
	for i := range cands {
		total += float64(max(cands[i].Load, 0))
	}
	return int64(math.Ceil(c*(total+1)/float64(len(cands)))) + slack
}

// joinBound is the load bound of a cache hit held by a worker without a long prefill queue
// (see queued) while the fleet is imbalanced by SMG's guard (a worker far behind the others, as one
// that has just joined at load 0): bound plus abs, saturating. The joiner's low load pulls the
// mean, and with it the bound, below the load the other workers carried before it came, so at
// bound itself every holder would be over it and send its hits to the joiner, to be computed
// and cached a second time (issue 21: the hits lost in the seconds after a join). With abs
// more, the joiner takes the hits of a holder that is serving its load only once the holder
// has more than abs requests in flight beyond the bound; the requests nobody holds still go
// to the joiner first.
func joinBound(bound, abs int64) int64 {
	if bound > math.MaxInt64-abs {
		return math.MaxInt64
	}
	return bound + abs
}

// queued reports whether c has a long prefill queue: at least n prefills of the request's
// size (blocks, at least 1) still to do for this gateway's in-flight requests (c.Prefill).
// A hit sent there waits behind them for its first token (seconds, at abs = 64 prefills of a
// prompt), and the engine, its KV full of running requests, may evict the hit's prefix
// before it runs; such a worker gets no more than the plain bound allows.
func queued(c *Candidate, blocks int, n int64) bool {
	return float64(c.Prefill) >= float64(n)*float64(max(blocks, 1))
}
