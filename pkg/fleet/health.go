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
		m.checkFailures.Add(1)
		if m.inconclusive() {
			return false // still serving: keep it, and check again soon
		}
	}
	if err == nil {
		m.healthyOnce.Store(true)
		m.failingSince.Store(0)
	}
	changed := m.w.SetHealth(err == nil, msg)
	switch {
	case err == nil:
		m.downSince.Store(0)
		if changed {
			m.f.log.Info("worker healthy", zap.String("worker", m.w.URL()))
		}
	case changed:
		m.wentDown()
		m.f.log.Warn("worker unhealthy", zap.String("worker", m.w.URL()), zap.String("reason", msg))
	default:
		m.forgetIfLongDown()
	}
	return err == nil
}

// inconclusive reports whether a failed health check of a healthy worker is outweighed by the
// requests it serves: it answered one within the last HealthInterval, and its checks have been
// failing for less than that. Such a worker stays in rotation while it is checked again
// (healthRecheckMin on): a /health that flaps under load must not take a serving worker out
// and copy its prefixes over the fleet (issue 21). A worker that really fails is caught at once
// by the first request it fails in transport (MarkDown); one that hangs stops answering, so
// after one interval its checks count.
func (m *Member) inconclusive() bool {
	if !m.w.Healthy() {
		return false
	}
	now := m.f.cfg.Now()
	first := m.failingSince.Load()
	if first == 0 {
		first = m.f.stamp(now)
		m.failingSince.Store(first)
		m.f.log.Info("worker failed a health check while serving requests; checking it again before taking it out", zap.String("worker", m.w.URL()))
	}
	return now.Sub(m.f.instant(first)) < m.f.cfg.HealthInterval && now.Sub(m.w.LastServed()) < m.f.cfg.HealthInterval
}

// wentDown records when the worker turned unhealthy.
func (m *Member) wentDown() { m.downSince.CompareAndSwap(0, m.f.stamp(m.f.cfg.Now())) }

// forgetIfLongDown forgets the worker's cache (forgetCache) once it has been unhealthy for a
// whole HealthInterval, once per outage. A worker down for less keeps its blocks in the index:
// a worker whose health flaps (a slow /health under load, a network blip) still holds its
// cache, and forgetting it at every flap would send its prefixes elsewhere while it is up and
// copy them over the fleet (issue 21). A worker that is gone stays down, and a restarted
// engine is caught by its event stream (a reconnection resumes only from the same publisher
// instance, else rebuilds from 0: the stream rules of kvbridge); only a tree-scored worker back within the interval with an empty
// cache is scored from a stale tree until its entries age out, which costs misses, never a
// wrong answer.
func (m *Member) forgetIfLongDown() {
	since := m.downSince.Load()
	if since <= 0 || m.f.cfg.Now().Sub(m.f.instant(since)) < m.f.cfg.HealthInterval {
		return
	}
	if m.downSince.CompareAndSwap(since, -1) { // -1: down, and forgotten
		m.f.log.Warn("worker down for a health interval; its cached blocks leave the index", zap.String("worker", m.w.URL()))
		m.forgetCache()
	}
}

// scrapeEngineLoad reads the engine's own load, running+waiting requests and of those the
// waiting (an http:// worker's /metrics, a grpc:// worker's GetLoads, summed over DP ranks). A
// failed scrape marks the load unknown.
func (m *Member) scrapeEngineLoad(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.f.cfg.HealthTimeout)
	defer cancel()
	l, err := m.eng.Load(cctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		m.w.SetEngineLoad(-1, m.f.cfg.Now())
		return
	}
	m.w.SetEngineWaiting(l.Waiting)
	m.w.SetEngineLoad(l.Total(), m.f.cfg.Now())
}
