package fleet

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"
)

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

// drainLocked starts m's drain: a goroutine under Run's context when the fleet runs (a
// shutdown ends the wait, and stopAll then stops m), else, before Run, an immediate teardown.
func (f *Fleet) drainLocked(m *Member) {
	m.drainStart.Store(f.stamp(f.cfg.Now()))
	f.log.Info("worker draining", zap.String("worker", m.w.URL()), zap.String("origin", m.origin), zap.Int64("in_flight", m.w.InFlight()))
	if f.runCtx == nil {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.teardown(m)
		}()
		return
	}
	ctx := f.runCtx
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if f.awaitIdle(ctx, m) {
			f.teardown(m)
		}
	}()
}

// awaitIdle waits until m has no in-flight request or DrainTimeout has passed (true), or ctx
// ended (false).
func (f *Fleet) awaitIdle(ctx context.Context, m *Member) bool {
	deadline := time.NewTimer(f.cfg.DrainTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for m.w.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			f.log.Warn("worker drain deadline passed; stopping it with requests in flight", zap.String("worker", m.w.URL()),
				zap.Int64("in_flight", m.w.InFlight()), zap.Duration("drain_timeout", f.cfg.DrainTimeout))
			return true
		case <-tick.C:
		}
	}
	return true
}

// teardown ends a worker that is out of the serving members: its goroutines stop, the
// --kv-listen collector stops delivering into it, its blocks leave its pool's index, tree and
// pending overlay, its clients close, it leaves the draining list and its IDs are freed.
func (f *Fleet) teardown(m *Member) {
	m.stop()              // cancels and joins the worker's goroutines; no lock held
	m.removed.Store(true) // the --kv-listen collector delivers no more into its IDs...
	f.syncCollector()     // ...once the delivery it may be in has returned
	m.pool.lookup.Remove(m.LookupWorker())
	// The stream metrics are labelled by URL: a worker started again at that URL keeps them.
	if f.cfg.KVMetrics != nil && f.Snapshot().byURL[m.w.URL()] == nil {
		f.cfg.KVMetrics.Forget(m.w.URL())
	}
	m.close()
	f.mu.Lock()
	if s := f.Snapshot(); slices.Contains(s.draining, m) {
		f.snap.Store(s.with(s.members, slices.DeleteFunc(slices.Clone(s.draining), func(o *Member) bool { return o == m })))
		f.log.Info("worker drained", zap.String("worker", m.w.URL()), zap.String("origin", m.origin))
	}
	if !f.stopped {
		f.freeIDs = append(f.freeIDs, m.ids...)
	}
	f.mu.Unlock()
}
