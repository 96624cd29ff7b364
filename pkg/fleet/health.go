package fleet

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// healthLoop checks the worker at once and then every HealthInterval, and scrapes its engine
// load every EngineMetricsInterval when configured. It returns when ctx is done.
func (m *Member) healthLoop(ctx context.Context) {
	cfg := &m.f.cfg
	tick := time.NewTicker(cfg.HealthInterval)
	defer tick.Stop()
	var scrape <-chan time.Time
	if cfg.EngineMetricsInterval > 0 {
		st := time.NewTicker(cfg.EngineMetricsInterval)
		defer st.Stop()
		scrape = st.C
	}
	m.checkHealth(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.checkHealth(ctx)
		case <-scrape:
			m.scrapeEngineLoad(ctx)
		}
	}
}

// checkHealth runs one health check (and model discovery while the worker's model is unknown)
// and records the result.
func (m *Member) checkHealth(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.f.cfg.HealthTimeout)
	defer cancel()
	err := m.eng.Health(cctx)
	if ctx.Err() != nil {
		return // shutting down: not a worker failure
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
	if m.w.SetHealth(err == nil, msg) {
		if err == nil {
			m.f.log.Info("worker healthy", zap.String("worker", m.w.URL()))
		} else {
			m.f.log.Warn("worker unhealthy; its cached blocks leave the index", zap.String("worker", m.w.URL()), zap.String("reason", msg))
			m.forgetCache()
		}
	}
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
