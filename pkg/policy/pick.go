package policy

import "math/bits"

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
