package router

import "net/http"

// handleHealth is the gateway's liveness: the process serves HTTP.
func (rt *Router) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadiness answers 200 when the fleet is ready (fleet.Fleet.Ready), else 503 with the
// reason.
func (rt *Router) handleReadiness(w http.ResponseWriter, _ *http.Request) {
	if ok, reason := rt.fleet.Ready(); !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
