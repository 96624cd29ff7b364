package fleet

import "github.com/kvgate/kvgate/pkg/kvbridge"

// Ready reports whether the gateway should receive traffic (DESIGN.md §7): every serving worker
// has had its first health check, at least one healthy worker serves the default model or
// another pool's, and the event stream of every healthy worker is connected or known to be
// unavailable (a worker that is down, or draining, does not hold readiness back). The reason
// says what is missing.
func (f *Fleet) Ready() (ok bool, reason string) {
	s := f.Snapshot()
	def := s.DefaultModel()
	healthy := false
	for _, m := range s.members {
		if !m.w.Checked() {
			return false, "worker " + m.w.URL() + " not checked yet"
		}
		if !m.w.Healthy() {
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
