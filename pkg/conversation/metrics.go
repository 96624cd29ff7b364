package conversation

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
