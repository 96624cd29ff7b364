package pipeline

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/pkg/policy"
)

// metrics holds the pipeline's collectors, built from the registerer passed in Config (no
// package-level collectors, STYLE.md rule 24). All methods are safe for concurrent use.
type metrics struct {
	ttft       prometheus.Histogram
	decisions  *prometheus.CounterVec // reason
	matched    prometheus.Histogram
	tokenize   prometheus.Histogram
	lookup     prometheus.Histogram
	upstream   *prometheus.CounterVec // worker, kind
	tokensSeen prometheus.Counter
	// Prefill/decode disaggregation (pd.go): requests of disaggregated pools by outcome,
	// decode legs sent without kv_transfer_params, prefill legs retried on another worker,
	// requests whose transfer fields were stripped.
	pd         *prometheus.CounterVec // outcome
	pdNoParams prometheus.Counter
	pdRetried  prometheus.Counter
	pdStripped prometheus.Counter
	// The admission queue's, by model (pool) and priority band; queued also by outcome.
	queueDepth *prometheus.GaugeVec
	queueWait  *prometheus.HistogramVec
	queued     *prometheus.CounterVec
	// handOffs counts grants by model and where they left the request's cached prefix
	// (admission.Fit.Class); copied the blocks those grants prefill again (Fit.Copied).
	handOffs *prometheus.CounterVec
	copied   *prometheus.CounterVec
	// byReason caches the decision counter of each known reason (read-only after newMetrics),
	// so counting a decision does not allocate.
	byReason map[policy.Reason]prometheus.Counter
}

// countDecision counts one routing decision.
func (m *metrics) countDecision(r policy.Reason) {
	if c, ok := m.byReason[r]; ok {
		c.Inc()
		return
	}
	m.decisions.WithLabelValues(string(r)).Inc()
}

// Latency buckets for sub-millisecond hot paths (tokenize, lookup): 1 µs … ~0.5 s.
var fastBuckets = prometheus.ExponentialBuckets(1e-6, 2.5, 15)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_time_to_first_token_seconds",
			Help:    "Time from a completion request's arrival to the first response byte sent to the client.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_routing_decisions_total",
			Help: "Routing decisions by reason (cache_hit, tree_hit, pending_hit, imbalance, no_match, retry, or the simple policy's name).",
		}, []string{"reason"}),
		matched: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_matched_blocks",
			Help:    "Leading request blocks the chosen worker already held, per routing decision.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096},
		}),
		tokenize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_tokenize_duration_seconds",
			Help:    "Time to tokenize a request's text prompts.",
			Buckets: fastBuckets,
		}),
		lookup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_lookup_duration_seconds",
			Help:    "Time to hash a request's blocks, match them in the index, tree and pending overlay, and pick a worker.",
			Buckets: fastBuckets,
			// Also a native histogram (buckets 9% apart, served to a scraper that asks for
			// protobuf), because the classic buckets, 2.5× apart, cannot resolve the decision's
			// p99 against its 200 µs target (docs/scaling.md).
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_upstream_errors_total",
			Help: "Failed requests to workers, by worker and kind (before_first_byte, mid_stream).",
		}, []string{"worker", "kind"}),
		tokensSeen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_prompt_tokens_total",
			Help: "Prompt tokens routed (after tokenization).",
		}),
		pd: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_pd_requests_total",
			Help: "Requests of disaggregated pools by outcome: pair, why they ran whole on the decode worker (short_prompt, decode_cached, no_prefill_worker, multiple_outputs, prefill_failed, transfer_failed), or runtime_pd_not_supported (a grpc:// leg whose runtime cannot carry the transfer: refused with 400).",
		}, []string{"outcome"}),
		pdNoParams: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_pd_missing_kv_params_total",
			Help: "NIXL decode legs sent without kv_transfer_params because the prefill answer had none (the decode worker prefilled itself).",
		}),
		pdRetried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_pd_prefill_retries_total",
			Help: "Prefill legs sent again on another prefill worker after their first worker failed (a server or transport error, or the PD timeout).",
		}),
		pdStripped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_pd_client_transfer_fields_total",
			Help: "Requests whose own kv_transfer_params or bootstrap_* fields were stripped (a client must not direct KV transfers).",
		}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvgate_queue_depth",
			Help: "Requests waiting in the admission queue, by model and priority band.",
		}, []string{"model", "priority"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_queue_wait_seconds",
			Help:    "Time requests spent in the admission queue, admitted or not, by model and priority band.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"model", "priority"}),
		queued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_queue_requests_total",
			Help: "Requests that went through the admission queue, by model, priority band and outcome (admitted, full, timeout, cancelled, shutdown, closed).",
		}, []string{"model", "priority", "outcome"}),
		handOffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_queue_handoffs_total",
			Help: "Freed worker slots the admission queue gave to a waiting request, by model and where that left the request's cached prefix: here (this worker holds the most of it), equal (as much as any other), nowhere, late (another holds more but frees no slot soon), elsewhere (another holds more and frees a slot soon).",
		}, []string{"model", "fit"}),
		copied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_queue_handoff_copied_blocks_total",
			Help: "Leading blocks another worker held that hand-offs of the late and elsewhere kinds made the freed worker prefill again, by model (in blocks of the model's block size).",
		}, []string{"model"}),
	}
	m.byReason = map[policy.Reason]prometheus.Counter{}
	for _, r := range []policy.Reason{policy.ReasonCacheHit, policy.ReasonTreeHit, policy.ReasonPendingHit, policy.ReasonImbalance, policy.ReasonOverloaded,
		policy.ReasonNoMatch, policy.ReasonRetry, policy.ReasonCost, policy.ReasonRoundRobin, policy.ReasonRandom,
		policy.ReasonPowerOfTwo, policy.ReasonLeastLoad, policy.ReasonPrefixHash} {
		m.byReason[r] = m.decisions.WithLabelValues(string(r))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.ttft, m.decisions, m.matched, m.tokenize, m.lookup, m.upstream, m.tokensSeen,
		m.pd, m.pdNoParams, m.pdRetried, m.pdStripped, m.queueDepth, m.queueWait, m.queued, m.handOffs, m.copied} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("router: register metrics: %w", err)
		}
	}
	return m, nil
}
