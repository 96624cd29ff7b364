package router

import (
	"net/http"
	"runtime/debug"

	"github.com/kvgate/kvgate/pkg/pipeline"
)

// handleHealth is the gateway's liveness: the process serves HTTP.
func (rt *Router) handleHealth(w http.ResponseWriter, _ *http.Request) {
	pipeline.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadiness answers 200 when the fleet is ready (fleet.Fleet.Ready), else 503 with the
// reason.
func (rt *Router) handleReadiness(w http.ResponseWriter, _ *http.Request) {
	if ok, reason := rt.fleet.Ready(); !ok {
		pipeline.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	pipeline.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// handleVersion answers GET /version as vLLM does, {"version": …}, with the gateway's own
// version: its module version when built from a tagged module, else the VCS revision, else
// "devel".
func handleVersion(w http.ResponseWriter, _ *http.Request) {
	pipeline.WriteJSON(w, http.StatusOK, map[string]string{"version": buildVersion()})
}

// buildVersion is the binary's version from its build information.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			return s.Value
		}
	}
	return "devel"
}
