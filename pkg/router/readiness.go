package router

import (
	"net/http"

	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// handleHealth is the gateway's liveness: the process serves HTTP.
func (rt *Router) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Ready reports whether the gateway should receive traffic (DESIGN.md §7): every serving worker
// has had its first health check, at least one healthy worker serves the default model or a
// configured one, and the event stream of every healthy worker is connected or known to be
// unavailable (a worker that is down, or draining, does not hold readiness back). The reason
// says what is missing.
func (rt *Router) Ready() (ok bool, reason string) {
	f := rt.fleet.Load()
	def := f.defaultModel(rt.cfg.Model)
	healthy := false
	for _, m := range f.members {
		if !m.w.Checked() {
			return false, "worker " + m.w.URL() + " not checked yet"
		}
		if !m.w.Healthy() {
			continue // a worker that is down holds nothing back; its stream reconnects later
		}
		if m.pool != f.def || m.w.Serves(def, def) {
			healthy = true
		}
		if !m.streamSettled() {
			return false, "event stream of " + m.w.URL() + " not connected"
		}
	}
	if !healthy {
		return false, "no healthy worker"
	}
	if col := rt.collector.Load(); col != nil && col.State() != kvbridge.StreamUp {
		return false, "kv-listen collector not bound"
	}
	return true, ""
}

func (rt *Router) handleReadiness(w http.ResponseWriter, _ *http.Request) {
	if ok, reason := rt.Ready(); !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
