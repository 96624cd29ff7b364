package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// prefixDist is how prefix_repetition chooses each request's prefix (--prefix-dist). The zero
// value is uniform.
type prefixDist struct {
	// zipf is the Zipf exponent S; 0 means uniform.
	zipf float64
}

// parsePrefixDist parses "uniform" or "zipf:S" with S > 0.
func parsePrefixDist(s string) (prefixDist, error) {
	if s == "" || s == "uniform" {
		return prefixDist{}, nil
	}
	if v, ok := strings.CutPrefix(s, "zipf:"); ok {
		e, err := strconv.ParseFloat(v, 64)
		if err == nil && e > 0 && !math.IsInf(e, 0) {
			return prefixDist{zipf: e}, nil
		}
	}
	return prefixDist{}, fmt.Errorf("loadgen: --prefix-dist %q: want uniform or zipf:S with S > 0", s)
}

func (d prefixDist) String() string {
	if d.zipf == 0 {
		return "uniform"
	}
	return "zipf:" + strconv.FormatFloat(d.zipf, 'g', -1, 64)
}

// order returns the prefix of each of n requests over k prefixes. Uniform uses every prefix
// equally often (within one) in a random order, so each is repeated n/k times, as DESIGN §9
// specifies; zipf draws each request independently, so prefix 0 is the most popular.
func (d prefixDist) order(rng *rand.Rand, n, k int) []int {
	out := make([]int, n)
	if d.zipf == 0 {
		for i := range out {
			out[i] = i % k
		}
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	// Inverse CDF over the k ranks: math/rand's Zipf needs S > 1, and skews below 1 are common
	// in published traces, so the table is built here.
	cdf := make([]float64, k)
	sum := 0.0
	for r := range cdf {
		sum += math.Pow(float64(r+1), -d.zipf)
		cdf[r] = sum
	}
	for i := range out {
		u := rng.Float64() * sum
		out[i] = min(sort.SearchFloat64s(cdf, u), k-1)
	}
	return out
}
