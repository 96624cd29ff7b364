package main

import (
	"math"
	"slices"
)

var nan = math.NaN()

// summary is a latency distribution in milliseconds of simulated time.
type summary struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// summarize sorts xs in place and returns its mean and percentiles; all NaN when empty.
func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{nan, nan, nan, nan, nan}
	}
	slices.Sort(xs)
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return summary{
		Mean: sum / float64(len(xs)),
		P50:  percentile(xs, 50),
		P95:  percentile(xs, 95),
		P99:  percentile(xs, 99),
		Max:  xs[len(xs)-1],
	}
}

// percentile returns the p-th percentile (0..100) of sorted xs by linear interpolation between
// the closest ranks, numpy's default method (which vLLM's benchmark_serving reports).
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return nan
	}
	h := (float64(n) - 1) * p / 100
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}
