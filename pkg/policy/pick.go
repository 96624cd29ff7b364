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
