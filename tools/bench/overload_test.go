package main

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOverloadRates: the rates fill the fleet at -overload-load by the simulator's step model,
// worked by hand: a batch request (512 uncached tokens, 64 output) on 8 slots holds a slot for
// 64 steps of 26 ms + 8 × 125 µs = 27 ms and adds 8 × 512 ÷ 12000 s of prefill per 8 of them.
func TestOverloadRates(t *testing.T) {
	o := defaultOverload
	if got, want := o.batch.capacity(8), 8/(64*0.027+8*512/12000.0); math.Abs(got-want) > 1e-5 { // the simulator's 1/12000 s is 83333 ns
		t.Errorf("batch capacity: got %v, want %v", got, want)
	}
	if got, want := o.interactive.capacity(8), 8/(16*0.027+8*32/12000.0); math.Abs(got-want) > 1e-5 { // the simulator's 1/12000 s is 83333 ns
		t.Errorf("interactive capacity: got %v, want %v", got, want)
	}
	ri, rb := o.rates(3)
	if load := ri/(3*o.interactive.capacity(8)) + rb/(3*o.batch.capacity(8)); math.Abs(load-1.5) > 1e-9 {
		t.Errorf("offered load: got %v of the fleet's capacity, want 1.5", load)
	}
}

// TestOverloadFleet: each row's admission flags.
func TestOverloadFleet(t *testing.T) {
	o := benchDefaults
	o.overload.reserve = 2
	r := &runner{o: &o}
	for _, tc := range []struct {
		variant string
		gw      []string
	}{
		{overloadUnloaded, nil},
		{overloadNoQueue, nil},
		{overloadQueue, []string{"--max-inflight-per-worker", "8", "--queue-max", "100000", "--queue-timeout", "600s"}},
		{o.overload.reserveVariant(), []string{"--max-inflight-per-worker", "8", "--queue-max", "100000", "--queue-timeout", "600s", "--queue-reserve", "2"}},
	} {
		f := &fleet{}
		r.overloadFleet(f, configuration{Workload: workloadOverload, Variant: tc.variant})
		if !cmp.Equal(f.gwArgs, tc.gw) || !cmp.Equal(f.simArgs, []string{"--max-running", "8"}) {
			t.Errorf("%q: got gateway %q, simulators %q; want %q, --max-running 8", tc.variant, f.gwArgs, f.simArgs, tc.gw)
		}
	}
}

// TestOverloadTargets: the verdicts follow the numbers: TTFT p95 within 2× of the unloaded
// row's, batch throughput and hit rate no lower than the no-queue row's, nothing lost.
func TestOverloadTargets(t *testing.T) {
	row := func(variant string, p95, bRPS, hit float64, refused int) result {
		return result{configuration: configuration{Workload: workloadOverload, Variant: variant}, HitRate: fptr(hit),
			Classes:    map[string]classFigures{"interactive": {Completed: 10, TTFTms: summary{P95: p95}}, "batch": {Completed: 10, RequestsPerS: bRPS, Refused429: refused}},
			QueueWaits: map[string]queueWait{"0": {Count: 5, SumS: 0.05}},
			HandOffs:   handOffs{Fits: map[string]float64{"here": 90, "nowhere": 5, "late": 1, "elsewhere": 4}, Copied: 160}}
	}
	o := benchDefaults
	rs := []result{row(overloadUnloaded, 100, 0, 0.5, 0), row(overloadNoQueue, 5000, 8, 0.48, 0), row(overloadQueue, 199, 8, 0.48, 0), row("queue-reserve1", 201, 7.9, 0.47, 1)}
	s := overloadSection(&o, rs)
	for _, want := range []string{
		"queue: interactive TTFT p95 199.0 ms = 1.99× its unloaded 100.0 ms (target ≤ 2×: met); batch 8.0 req/s against 8.0 without the queue (target no lower: met); hit rate 48.0% against 48.0% (target no lower: met); 0 lost (target 0: met).",
		"queue-reserve1: interactive TTFT p95 201.0 ms = 2.01× its unloaded 100.0 ms (target ≤ 2×: **missed**); batch 7.9 req/s against 8.0 without the queue (target no lower: **missed**); hit rate 47.0% against 48.0% (target no lower: **missed**); 1 lost (target 0: **missed**).",
		// 50 ms of real wait ÷ time scale 0.5 over 10 completed requests.
		"| queue | 1 | 0.0 | 199.0 | 0.0 | 10.0 |",
		// 5 of 100 hand-offs late or elsewhere; none shown without the queue.
		"| 48.0% | 5.0% (160) | 0 (0) |",
		"| 48.0% |  | 0 (0) |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("overload section lacks %q:\n%s", want, s)
		}
	}
}
