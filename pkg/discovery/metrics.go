package discovery

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Lookup outcomes of kvgate_discovery_lookups_total.
const (
	outcomeOK    = "ok"    // addresses found
	outcomeEmpty = "empty" // the name does not exist or has no records: no workers
	outcomeError = "error" // the lookup failed; the last good set stays
)

// metrics are the Watcher's collectors, built from the Registerer in Config (STYLE.md rule 24).
type metrics struct {
	lookups  *prometheus.CounterVec // dns, outcome
	workers  *prometheus.GaugeVec   // dns
	lastGood *prometheus.GaugeVec   // dns
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_discovery_lookups_total",
			Help: "DNS discovery lookups by name and outcome (ok, empty: no such name or no records, error: the last good answer stays).",
		}, []string{"dns", "outcome"}),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvgate_discovery_workers",
			Help: "Workers the name's last good answer gave.",
		}, []string{"dns"}),
		lastGood: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvgate_discovery_last_success_timestamp_seconds",
			Help: "Unix time of the name's last good answer.",
		}, []string{"dns"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.lookups, m.workers, m.lastGood} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("discovery: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) lookup(name, outcome string) { m.lookups.WithLabelValues(name, outcome).Inc() }

func (m *metrics) answered(name string, n int) {
	m.workers.WithLabelValues(name).Set(float64(n))
	m.lastGood.WithLabelValues(name).SetToCurrentTime()
}

// forget drops the gauges of a name no longer watched.
func (m *metrics) forget(name string) {
	m.workers.DeleteLabelValues(name)
	m.lastGood.DeleteLabelValues(name)
}
