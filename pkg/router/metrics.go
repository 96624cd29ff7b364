package router

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the HTTP surface's collectors (the pipeline has its own), built from the
// registerer passed in Config (no package-level collectors, STYLE.md rule 24).
type metrics struct {
	requests *prometheus.CounterVec   // route, code
	duration *prometheus.HistogramVec // route
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_requests_total",
			Help: "HTTP requests served by the gateway, by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_request_duration_seconds",
			Help:    "Time from request arrival to the end of the response, by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"route"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("router: register metrics: %w", err)
		}
	}
	return m, nil
}
