package main

import (
	"math"
	"math/rand/v2"
	"time"
)

// arrivals returns n arrival offsets from the start of the run, in simulated time, for an open
// loop at rate requests per second: gaps are gamma distributed with shape burstiness and mean
// 1/rate, as in vLLM's benchmark_serving (burstiness 1 is a Poisson process; below 1 is
// burstier, above 1 more regular). rate ≤ 0 or +Inf sends everything at once.
func arrivals(rng *rand.Rand, n int, rate, burstiness float64) []time.Duration {
	out := make([]time.Duration, n)
	if rate <= 0 || math.IsInf(rate, 1) {
		return out
	}
	theta := 1 / (rate * burstiness)
	var t float64
	for i := range out {
		t += gammaSample(rng, burstiness) * theta
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}

// gammaSample draws from Gamma(shape, 1) by Marsaglia and Tsang's method (2000); shapes below
// 1 use the boost Gamma(a) = Gamma(a+1)·U^(1/a).
func gammaSample(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gammaSample(rng, shape+1) * math.Pow(u, 1/shape)
	}
	if shape == 1 {
		return rng.ExpFloat64()
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x {
			return d * v
		}
		if u > 0 && math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
