package fleet

import "github.com/kvgate/kvgate/pkg/kvbridge"

// Ready reports whether the gateway should receive traffic (DESIGN.md §7): every serving worker
// has had its first health check, at least one healthy worker serves the default model or
// another pool's, and the event stream of every healthy worker is connected or known to be
// unavailable. The reason says what is missing.
//
// A worker that is down holds readiness back only while it has never been healthy and the
// fleet started less than one HealthInterval ago: a gateway started beside its engines becomes
// ready when they are (they are re-checked every healthRecheckMin or so meanwhile), instead of
// taking all the load on the first engine up; an engine that never comes up costs at most one
// interval. A worker that was healthy and failed, or that joins later, never holds it back.
func (f *Fleet) Ready() (ok bool, reason string) {
	s := f.Snapshot()
	def := s.DefaultModel()
	healthy := false
	waiting := f.startedAt().Add(f.cfg.HealthInterval).After(f.cfg.Now())
	for _, m := range s.members {
		if !m.w.Checked() {
			return false, "worker " + m.w.URL() + " not checked yet"
		}
		if !m.w.Healthy() {
			if waiting && !m.healthyOnce.Load() {
				return false, "worker " + m.w.URL() + " not healthy yet (waiting for it up to one health interval after start)"
			}
			continue // a worker that is down holds nothing back; its stream reconnects later
		}
		if m.pool != s.def || m.w.Serves(def, def) {
			healthy = true
		}
		if !m.streamSettled() {
			return false, "event stream of " + m.w.URL() + " not connected"
		}
	}
	if !healthy {
		return false, "no healthy worker"
	}
	if col := f.collector.Load(); col != nil && col.State() != kvbridge.StreamUp {
		return false, "kv-listen collector not bound"
	}
	return true, ""
}
