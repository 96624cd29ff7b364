package fleet

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// healthRecheckMin is how soon a worker that failed a health check (or a request, MarkDown) is
// checked again; the delay doubles after each further failure, up to HealthInterval. A worker
// still starting, or back from a crash, so rejoins within a fraction of a second instead of a
// whole interval later (issue 21: a gateway started beside its engines sent everything to the
// first worker up for 5 s).
const healthRecheckMin = 100 * time.Millisecond

// healthLoop checks the worker at once, then every HealthInterval while it is healthy and with
// a backoff from healthRecheckMin while it is not, and scrapes its engine load every
// EngineMetricsInterval when configured. It returns when ctx is done.
func (m *Member) healthLoop(ctx context.Context) {
	cfg := &m.f.cfg
	var scrape <-chan time.Time
	if cfg.EngineMetricsInterval > 0 {
		st := time.NewTicker(cfg.EngineMetricsInterval)
		defer st.Stop()
		scrape = st.C
	}
	backoff := healthRecheckMin
	next := func(ok bool) time.Duration {
		if ok {
			backoff = healthRecheckMin
			return cfg.HealthInterval
		}
		d := min(backoff, cfg.HealthInterval)
		backoff = min(2*backoff, cfg.HealthInterval)
		return d
	}
	check := time.NewTimer(next(m.checkHealth(ctx)))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			check.Reset(next(m.checkHealth(ctx)))
		case <-m.recheck:
			// A request saw the worker fail: check it again soon, not a whole interval later.
			backoff = healthRecheckMin
			check.Reset(next(false))
		case <-scrape:
			m.scrapeEngineLoad(ctx)
		}
	}
}

// checkHealth runs one health check (and model discovery while the worker's model is unknown),
// records the result and reports whether the worker is healthy.
func (m *Member) checkHealth(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, m.f.cfg.HealthTimeout)
	defer cancel()
	err := m.eng.Health(cctx)
	if ctx.Err() != nil {
		return m.w.Healthy() // shutting down: not a worker failure
	}
	if err == nil && m.w.ReportedModel() == "" {
		// Discovery is best effort: a worker that answers its health check is healthy.
		if mi, merr := m.eng.Model(cctx); merr == nil && mi.Name != "" {
			m.w.SetAdapters(mi.Adapters) // before the name: a request must not see one without the other
			m.w.SetReportedModel(mi.Name)
			m.f.log.Info("worker model discovered", zap.String("worker", m.w.URL()), zap.String("model", mi.Name), zap.Strings("lora_adapters", mi.Adapters))
		}
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if err == nil {
		m.healthyOnce.Store(true)
	}
	if m.w.SetHealth(err == nil, msg) {
		if err == nil {
			m.f.log.Info("worker healthy", zap.String("worker", m.w.URL()))
		} else {
			m.f.log.Warn("worker unhealthy; its cached blocks leave the index", zap.String("worker", m.w.URL()), zap.String("reason", msg))
			m.forgetCache()
		}
	}
	return err == nil
}

// scrapeEngineLoad reads the engine's own load, running+waiting requests (an http:// worker's
// /metrics, a grpc:// worker's GetLoads, summed over DP ranks). A failed scrape marks the load
// unknown.
func (m *Member) scrapeEngineLoad(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.f.cfg.HealthTimeout)
	defer cancel()
	n, err := m.eng.Load(cctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		m.w.SetEngineLoad(-1, m.f.cfg.Now())
		return
	}
	m.w.SetEngineLoad(n, m.f.cfg.Now())
}
