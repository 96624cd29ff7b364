package sim

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics exports the engine's state under vLLM's metric names and label (model_name), so
// dashboards and the gateway's load scraper treat the simulator like a vLLM server.
// Latencies are in simulated seconds: what the modelled GPU would show. Multiply by the time
// scale for wall seconds. With several DP ranks the values are aggregated (counters summed,
// queue gauges summed, KV usage averaged) under one model_name label.
//
// Metrics is safe for concurrent use; several engine ranks share one.
type Metrics struct {
	queries, hits           prometheus.Counter
	promptTokens, genTokens prometheus.Counter
	preemptions             prometheus.Counter
	success                 *prometheus.CounterVec
	ttft, e2e               prometheus.Histogram
}

// Gauges reads the live values behind the gauge metrics; Ranks implements it.
type Gauges interface {
	NumRunning() int
	NumWaiting() int
	Usage() float64
	Lag() time.Duration
	MaxLag() time.Duration
}

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
		7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
		120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// NewMetrics registers the simulator's metrics on reg for model, reading gauges from g.
// cacheCfg is published as vllm:cache_config_info.
func NewMetrics(reg prometheus.Registerer, model string, cacheCfg Config, g Gauges) (*Metrics, error) {
	labels := prometheus.Labels{"model_name": model}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &Metrics{
		queries:      counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		hits:         counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		promptTokens: counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		genTokens:    counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		preemptions:  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
		}, []string{"finish_reason"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds.",
			ConstLabels: labels, Buckets: ttftBuckets,
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:e2e_request_latency_seconds", Help: "Histogram of end to end request latency in seconds.",
			ConstLabels: labels, Buckets: e2eBuckets,
		}),
	}
	cs := []prometheus.Collector{m.queries, m.hits, m.promptTokens, m.genTokens, m.preemptions, m.success, m.ttft, m.e2e,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:num_requests_running", Help: "Number of requests in model execution batches.", ConstLabels: labels,
		}, func() float64 { return float64(g.NumRunning()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:num_requests_waiting", Help: "Number of requests waiting to be processed.", ConstLabels: labels,
		}, func() float64 { return float64(g.NumWaiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:kv_cache_usage_perc", Help: "KV-cache usage. 1 means 100 percent usage.", ConstLabels: labels,
		}, g.Usage),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "simworker_engine_lag_seconds",
			Help:        "Simulated seconds the slowest rank's clock is behind the wall clock (process lacking CPU): how late tokens reach clients. Simulated latencies exclude it.",
			ConstLabels: labels,
		}, func() float64 { return g.Lag().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "simworker_engine_lag_max_seconds",
			Help:        "Largest simworker_engine_lag_seconds seen; keep it small (raise --time-scale) when clients measure latency in wall time.",
			ConstLabels: labels,
		}, func() float64 { return g.MaxLag().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig.",
			ConstLabels: prometheus.Labels{
				"block_size":     fmt.Sprint(cacheCfg.withDefaults().BlockSize),
				"num_gpu_blocks": fmt.Sprint(cacheCfg.withDefaults().NumBlocks),
			},
		}, func() float64 { return 1 }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("sim: register metrics: %w", err)
		}
	}
	// vLLM exports both finish reasons from the start.
	m.success.WithLabelValues("length")
	m.success.WithLabelValues("stop")
	return m, nil
}

// ObserveStep adds one step's counter deltas.
func (m *Metrics) ObserveStep(d Stats) {
	if d.PrefixQueries > 0 {
		m.queries.Add(float64(d.PrefixQueries))
	}
	if d.PrefixHits > 0 {
		m.hits.Add(float64(d.PrefixHits))
	}
	if d.PromptTokens > 0 {
		m.promptTokens.Add(float64(d.PromptTokens))
	}
	if d.GenerationTokens > 0 {
		m.genTokens.Add(float64(d.GenerationTokens))
	}
	if d.Preemptions > 0 {
		m.preemptions.Add(float64(d.Preemptions))
	}
}

// ObserveFirstToken records a TTFT (simulated).
func (m *Metrics) ObserveFirstToken(ttft time.Duration) { m.ttft.Observe(ttft.Seconds()) }

// ObserveFinished records a completed request; aborted requests are not counted as successes
// (as in vLLM).
func (m *Metrics) ObserveFinished(reason string, e2e time.Duration, _, _ int) {
	if reason == "abort" {
		return
	}
	m.success.WithLabelValues(reason).Inc()
	m.e2e.Observe(e2e.Seconds())
}

// Ranks is the set of engine ranks behind one HTTP server.
type Ranks []*Engine

// NumRunning sums the ranks' running requests.
func (rs Ranks) NumRunning() int {
	n := 0
	for _, e := range rs {
		n += e.NumRunning()
	}
	return n
}

// NumWaiting sums the ranks' waiting requests.
func (rs Ranks) NumWaiting() int {
	n := 0
	for _, e := range rs {
		n += e.NumWaiting()
	}
	return n
}

// Usage averages the ranks' KV-cache usage.
func (rs Ranks) Usage() float64 {
	if len(rs) == 0 {
		return 0
	}
	var u float64
	for _, e := range rs {
		u += e.Usage()
	}
	return u / float64(len(rs))
}

// Lag returns the largest current lag over the ranks.
func (rs Ranks) Lag() time.Duration {
	var d time.Duration
	for _, e := range rs {
		d = max(d, e.Lag())
	}
	return d
}

// MaxLag returns the largest lag any rank has seen.
func (rs Ranks) MaxLag() time.Duration {
	var d time.Duration
	for _, e := range rs {
		d = max(d, e.MaxLag())
	}
	return d
}

// Pick returns the least-loaded rank (lowest running + waiting; ties to the lowest rank).
func (rs Ranks) Pick() *Engine {
	var best *Engine
	bestLoad := 0
	for _, e := range rs {
		if l := e.Load(); best == nil || l < bestLoad {
			best, bestLoad = e, l
		}
	}
	return best
}

var (
	_ Observer = (*Metrics)(nil)
	_ Gauges   = Ranks(nil)
)
