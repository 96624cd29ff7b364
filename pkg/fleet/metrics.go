package fleet

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// registerGauges registers the per-worker gauges of the fleet's current snapshot with reg (nil:
// nothing is registered).
func registerGauges(reg prometheus.Registerer, snap func() *Snapshot) error {
	if reg == nil {
		return nil
	}
	if err := reg.Register(&fleetCollector{snap: snap}); err != nil {
		return fmt.Errorf("fleet: register metrics: %w", err)
	}
	return nil
}

// fleetCollector reports per-worker gauges of the serving workers from the current fleet
// snapshot at scrape time, so a removed worker's series disappear with it and the hot path
// updates nothing; draining workers are only counted (one may share its URL, the label, with
// the worker that replaced it).
type fleetCollector struct {
	snap func() *Snapshot
}

var (
	descInFlight = prometheus.NewDesc("kvgate_worker_in_flight", "Requests this gateway has outstanding on the worker.", []string{"worker"}, nil)
	descHealthy  = prometheus.NewDesc("kvgate_worker_healthy", "1 when the worker passes health checks, else 0.", []string{"worker"}, nil)
	descEngine   = prometheus.NewDesc("kvgate_worker_engine_load", "Engine-reported running+waiting requests (scraped from the worker's /metrics); absent when unknown.", []string{"worker"}, nil)
	descBlocks   = prometheus.NewDesc("kvgate_index_blocks", "Blocks the event index holds for the worker (summed over DP ranks).", []string{"worker"}, nil)
	descEvents   = prometheus.NewDesc("kvgate_worker_event_fed", "1 when the worker is scored from its KV-event stream, 0 when from the approximate tree.", []string{"worker"}, nil)
	descStream   = prometheus.NewDesc("kvgate_worker_event_stream_state", "State of the worker's KV-event stream (1 for the current state: connecting, up, down, unavailable, stopped).", []string{"worker", "state"}, nil)
	descChecks   = prometheus.NewDesc("kvgate_worker_health_check_failures_total", "Failed health checks of the worker, those that took it out of rotation and those outweighed by the requests it was serving.", []string{"worker"}, nil)
	descDraining = prometheus.NewDesc("kvgate_workers_draining", "Workers that left the fleet and are finishing their in-flight requests.", nil, nil)
)

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descHealthy, descEngine, descBlocks, descEvents, descStream, descChecks, descDraining} {
		ch <- d
	}
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.snap()
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, float64(len(f.draining)))
	for _, m := range f.members {
		lbl := m.w.URL()
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(m.w.InFlight()), lbl)
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, b2f(m.w.Healthy()), lbl)
		if n, _, ok := m.w.EngineLoad(); ok {
			ch <- prometheus.MustNewConstMetric(descEngine, prometheus.GaugeValue, float64(n), lbl)
		}
		ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.GaugeValue, float64(m.IndexBlocks()), lbl)
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.GaugeValue, b2f(m.EventFed()), lbl)
		if st, ok := m.StreamState(); ok {
			ch <- prometheus.MustNewConstMetric(descStream, prometheus.GaugeValue, 1, lbl, st.String())
		}
		ch <- prometheus.MustNewConstMetric(descChecks, prometheus.CounterValue, float64(m.HealthCheckFailures()), lbl)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
