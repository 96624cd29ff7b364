package main

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPercentile(t *testing.T) {
	// Expected values are numpy.percentile's (linear interpolation).
	tests := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4}, 95, 3.85},
		{[]float64{1, 2, 3, 4}, 99, 3.97},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 100, 4},
		{[]float64{7}, 99, 7},
		{[]float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, 50, 55},
		{[]float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, 95, 95.5},
	}
	for _, tc := range tests {
		if got := percentile(tc.xs, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("percentile(nil) = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	got := summarize([]float64{4, 1, 3, 2})
	want := summary{Mean: 2.5, P50: 2.5, P95: 3.85, P99: 3.97, Max: 4}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("summarize mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(summary{}, finite(summarize(nil))); diff != "" {
		t.Errorf("empty summary is not all zeros after finite (-want +got):\n%s", diff)
	}
}

// TestArrivals checks the schedule statistics: the mean gap is 1/rate and the coefficient of
// variation of the gaps is 1/sqrt(burstiness) (1 for Poisson).
func TestArrivals(t *testing.T) {
	tests := []struct {
		rate, burstiness float64
	}{{10, 1}, {10, 4}, {2, 0.25}, {1000, 1}}
	for _, tc := range tests {
		rng := rand.New(rand.NewPCG(11, 12))
		const n = 40000
		at := arrivals(rng, n, tc.rate, tc.burstiness)
		var sum, sum2 float64
		prev := time.Duration(0)
		for i, a := range at {
			if a < prev {
				t.Fatalf("rate %v: arrival %d at %v before %v", tc.rate, i, a, prev)
			}
			g := (a - prev).Seconds()
			sum += g
			sum2 += g * g
			prev = a
		}
		mean := sum / n
		cv := math.Sqrt(sum2/n-mean*mean) / mean
		if want := 1 / tc.rate; math.Abs(mean-want)/want > 0.03 {
			t.Errorf("rate %v burstiness %v: mean gap %v, want %v ± 3%%", tc.rate, tc.burstiness, mean, want)
		}
		if want := 1 / math.Sqrt(tc.burstiness); math.Abs(cv-want)/want > 0.05 {
			t.Errorf("rate %v burstiness %v: gap CV %v, want %v ± 5%%", tc.rate, tc.burstiness, cv, want)
		}
	}
	for _, rate := range []float64{0, math.Inf(1)} {
		at := arrivals(rand.New(rand.NewPCG(1, 1)), 5, rate, 1)
		if diff := cmp.Diff(make([]time.Duration, 5), at); diff != "" {
			t.Errorf("rate %v: want every arrival at 0 (-want +got):\n%s", rate, diff)
		}
	}
}

func TestGammaSample(t *testing.T) {
	for _, shape := range []float64{0.3, 1, 2.5, 9} {
		rng := rand.New(rand.NewPCG(5, uint64(shape*10)))
		const n = 50000
		var sum, sum2 float64
		for range n {
			x := gammaSample(rng, shape)
			if x < 0 {
				t.Fatalf("shape %v: negative sample %v", shape, x)
			}
			sum += x
			sum2 += x * x
		}
		mean, variance := sum/n, sum2/n-(sum/n)*(sum/n)
		if math.Abs(mean-shape)/shape > 0.03 || math.Abs(variance-shape)/shape > 0.06 {
			t.Errorf("Gamma(%v,1): mean %v variance %v, want both %v", shape, mean, variance, shape)
		}
	}
}

const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="qwen"} 500.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="qwen"} 1.7e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 250.0
vllm:prefix_cache_hits_total{engine="1",model_name="qwen"} 50.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 2.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_count{model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_sum{model_name="qwen"} 0.4
`

func TestParseCacheCounters(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    cacheCounters
		wantErr bool
	}{
		{name: "vllm v1", text: vllmMetrics, want: cacheCounters{hits: 300, queries: 1500}},
		{name: "untyped", text: "vllm:prefix_cache_hits_total 7\nvllm:prefix_cache_queries_total 9\n", want: cacheCounters{hits: 7, queries: 9}},
		{name: "legacy gpu names", text: "# TYPE vllm:gpu_prefix_cache_hits_total counter\nvllm:gpu_prefix_cache_hits_total 1\n# TYPE vllm:gpu_prefix_cache_queries_total counter\nvllm:gpu_prefix_cache_queries_total 4\n", want: cacheCounters{hits: 1, queries: 4}},
		{name: "missing", text: "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n", wantErr: true},
		{name: "garbage", text: "vllm:prefix_cache_hits_total{ 1\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCacheCounters(strings.NewReader(tc.text))
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestResultLine(t *testing.T) {
	hit := 0.2456
	rep := &report{Sent: 60, Errors: 1, HitRate: &hit, TTFTms: summary{Mean: 1234.56, P50: 987.65}}
	got := resultLine("policy=cache_aware index=events gateways=2", rep)
	want := "RESULT policy=cache_aware index=events gateways=2 requests=60 errors=1 hit_rate=0.2456 ttft_p50_ms=987.6 ttft_mean_ms=1234.6"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	rep.HitRate = nil
	if got := resultLine("", rep); !strings.HasPrefix(got, "RESULT requests=60 ") || !strings.Contains(got, "hit_rate=NaN") {
		t.Errorf("got %q, want RESULT requests=60 ... hit_rate=NaN", got)
	}
	if _, err := parseLabels("policy=x broken"); err == nil {
		t.Error("parseLabels with a bare word: got nil error, want one")
	}
}

// TestBuildReportTimeScale: with time scale F (wall = simulated × F), latencies are
// measured ÷ F and rates measured × F.
func TestBuildReportTimeScale(t *testing.T) {
	r := &runner{scale: 0.1, total: 3,
		outcomes: []outcome{
			{ok: true, ttft: 10 * time.Millisecond, e2e: 100 * time.Millisecond, promptTokens: 50, outputTokens: 8, cachedTokens: 25, worker: "w1"},
			{ok: true, ttft: 30 * time.Millisecond, e2e: 300 * time.Millisecond, promptTokens: 50, outputTokens: 8, worker: "w2"},
			{err: "status 503: busy", worker: "w1"},
		},
		sent: []bool{true, true, true}}
	rep := &report{}
	buildReport(rep, r, 2*time.Second)
	if rep.DurationS != 20 || rep.RequestsPerS != 0.1 || rep.OutputTokensPerS != 0.8 {
		t.Errorf("duration %v s, %v req/s, %v tok/s; want 20, 0.1, 0.8", rep.DurationS, rep.RequestsPerS, rep.OutputTokensPerS)
	}
	if rep.TTFTms.Mean != 200 || rep.E2Ems.P50 != 2000 {
		t.Errorf("TTFT mean %v ms, E2E p50 %v ms; want 200, 2000", rep.TTFTms.Mean, rep.E2Ems.P50)
	}
	if diff := cmp.Diff(map[string]int{"status 503": 1}, rep.ErrorKinds); diff != "" {
		t.Errorf("error kinds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"w1": 2, "w2": 1}, rep.Workers); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	if rep.UsageCachedRate == nil || *rep.UsageCachedRate != 0.25 {
		t.Errorf("usage cached rate %v, want 0.25", rep.UsageCachedRate)
	}
	if got := r.real(time.Second); got != 100*time.Millisecond {
		t.Errorf("real(1s) at scale 0.1 = %v, want 100ms", got)
	}
}
