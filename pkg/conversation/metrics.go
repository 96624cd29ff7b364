package conversation

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// storeMetrics are a store's metrics (STYLE.md rule 24: built from the Registerer passed in).
type storeMetrics struct {
	evictions *prometheus.CounterVec
	bytes     prometheus.Gauge
	entries   prometheus.Gauge
}

func newStoreMetrics(reg prometheus.Registerer) (*storeMetrics, error) {
	m := &storeMetrics{
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_responses_store_evictions_total",
			Help: "Responses and conversations the in-memory store dropped, by reason: ttl (unused for --responses-ttl) or bytes (past --responses-max-bytes, least recently used first)."}, []string{"reason"}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvgate_responses_store_bytes",
			Help: "Bytes the in-memory responses store holds (records and conversations as stored)."}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvgate_responses_store_entries",
			Help: "Responses and conversations the in-memory responses store holds."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.evictions, m.bytes, m.entries} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}

// serviceMetrics are the Responses API's own counters.
type serviceMetrics struct {
	storeErrors *prometheus.CounterVec
}

func newServiceMetrics(reg prometheus.Registerer) (*serviceMetrics, error) {
	m := &serviceMetrics{storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_responses_store_errors_total",
		Help: "Responses store operations that failed (the store unreachable: those turns answered 503), by operation: read or write."}, []string{"op"})}
	if reg != nil {
		if err := reg.Register(m.storeErrors); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// roundTrips times each of the Redis store's round trips (a command or a pipeline): a stored turn
// waits for at least one (docs/responses.md), so this is the store's share of a turn's latency.
// A new connection's handshake (HELLO, CLIENT SETINFO, sent by the client as it dials) is not
// counted: the store never sends those itself, and their cost is the dial's.
type roundTrips struct{ h prometheus.Histogram }

func newRoundTrips(reg prometheus.Registerer) (*roundTrips, error) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvgate_responses_store_round_trip_seconds",
		Help:    "Round trips to the Redis responses store (one command or one pipeline), from sent to answered.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16)})
	if reg != nil {
		if err := reg.Register(h); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			h = are.ExistingCollector.(prometheus.Histogram)
		}
	}
	return &roundTrips{h: h}, nil
}

// DialHook implements redis.Hook: a dial is not a round trip of the store's.
func (m *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (m *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t0 := time.Now()
		err := next(ctx, cmd)
		if !handshake(cmd) {
			m.h.Observe(time.Since(t0).Seconds())
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (m *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t0 := time.Now()
		err := next(ctx, cmds)
		if len(cmds) == 0 || !handshake(cmds[0]) {
			m.h.Observe(time.Since(t0).Seconds())
		}
		return err
	}
}

func handshake(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "hello" || n == "client"
}

var _ redis.Hook = (*roundTrips)(nil)
