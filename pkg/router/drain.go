package router

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"
)

// DefaultDrainTimeout bounds how long a worker that left the fleet keeps its in-flight requests
// (Config.DrainTimeout).
const DefaultDrainTimeout = 30 * time.Second

// drainPoll is how often a draining worker's in-flight count is looked at.
const drainPoll = 20 * time.Millisecond

// A worker leaves the fleet by draining (DESIGN.md §12) when its origin no longer lists it
// (SyncWorkers: a DNS name that stopped resolving to it, a config file that dropped it) or when
// it is rebuilt (its spec or its model changed): reconcileLocked has already taken it out of the
// serving members, so it gets no new request; its in-flight ones finish, for at most
// DrainTimeout; then teardown stops its health checks and event streams and its blocks leave the
// index. Until then /workers lists it as draining. Requests still running at the deadline go on
// as long as the worker's connection does; nothing cancels them, but the engine's clients are
// closed.

// drainLocked starts m's drain: a goroutine under Run's context when the router runs (a
// shutdown ends the wait, and stopAll then stops m), else, before Run, an immediate teardown.
func (rt *Router) drainLocked(m *member) {
	m.drainStart.Store(rt.now().UnixNano())
	rt.log.Info("worker draining", zap.String("worker", m.w.URL()), zap.String("origin", m.origin), zap.Int64("in_flight", m.w.InFlight()))
	if rt.runCtx == nil {
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			rt.teardown(m)
		}()
		return
	}
	ctx := rt.runCtx
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if rt.awaitIdle(ctx, m) {
			rt.teardown(m)
		}
	}()
}

// awaitIdle waits until m has no in-flight request or DrainTimeout has passed (true), or ctx
// ended (false).
func (rt *Router) awaitIdle(ctx context.Context, m *member) bool {
	deadline := time.NewTimer(rt.cfg.DrainTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for m.w.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			rt.log.Warn("worker drain deadline passed; stopping it with requests in flight", zap.String("worker", m.w.URL()),
				zap.Int64("in_flight", m.w.InFlight()), zap.Duration("drain_timeout", rt.cfg.DrainTimeout))
			return true
		case <-tick.C:
		}
	}
	return true
}

// teardown ends a worker that is out of the serving members: its goroutines stop, the
// --kv-listen collector stops delivering into it, its blocks leave its pool's index, tree and
// pending overlay, its clients close, it leaves the draining list and its IDs are freed.
func (rt *Router) teardown(m *member) {
	m.stop()              // cancels and joins the worker's goroutines; no lock held
	m.removed.Store(true) // the --kv-listen collector delivers no more into its IDs...
	rt.syncCollector()    // ...once the delivery it may be in has returned
	lk := &m.pool.lookup
	for _, id := range m.ids {
		lk.Index.RemoveWorker(id)
		if lk.Tree != nil {
			lk.Tree.RemoveWorker(id)
		}
		if lk.Pending != nil {
			lk.Pending.RemoveWorker(id)
		}
	}
	// The stream metrics are labelled by URL: a worker started again at that URL keeps them.
	if rt.cfg.KVMetrics != nil && rt.fleet.Load().byURL[m.w.URL()] == nil {
		rt.cfg.KVMetrics.Forget(m.w.URL())
	}
	m.close()
	rt.mu.Lock()
	if f := rt.fleet.Load(); slices.Contains(f.draining, m) {
		rt.fleet.Store(f.with(f.members, slices.DeleteFunc(slices.Clone(f.draining), func(o *member) bool { return o == m })))
		rt.log.Info("worker drained", zap.String("worker", m.w.URL()), zap.String("origin", m.origin))
	}
	if !rt.stopped {
		rt.freeIDs = append(rt.freeIDs, m.ids...)
	}
	rt.mu.Unlock()
}
