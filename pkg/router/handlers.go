package router

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Handler returns the gateway's HTTP API: POST /v1/completions, GET /v1/models, GET /health,
// GET /readiness, GET/POST/DELETE /workers and GET /debug/route. Unknown paths answer an
// OpenAI-style 404. Metrics are served separately (Config.Registerer).
func (rt *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", rt.instrument("/v1/completions", rt.handleCompletions))
	mux.Handle("GET /v1/models", rt.instrument("/v1/models", rt.handleModels))
	mux.Handle("GET /health", rt.instrument("/health", rt.handleHealth))
	mux.Handle("GET /readiness", rt.instrument("/readiness", rt.handleReadiness))
	mux.Handle("GET /workers", rt.instrument("/workers", rt.admin(rt.handleListWorkers)))
	mux.Handle("POST /workers", rt.instrument("/workers", rt.admin(rt.handleAddWorker)))
	mux.Handle("DELETE /workers", rt.instrument("/workers", rt.admin(rt.handleRemoveWorker)))
	mux.Handle("GET /debug/route", rt.instrument("/debug/route", rt.admin(rt.handleDebugRoute)))
	known := map[string]bool{"/v1/completions": true, "/v1/models": true, "/health": true, "/readiness": true, "/workers": true, "/debug/route": true}
	mux.Handle("/", rt.instrument("other", func(w http.ResponseWriter, r *http.Request) {
		if known[r.URL.Path] {
			openai.WriteError(w, &openai.Error{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed on " + r.URL.Path, Type: openai.TypeInvalidRequest, Code: "method_not_allowed"})
			return
		}
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Message: "no route for " + r.Method + " " + r.URL.Path, Type: openai.TypeNotFound, Code: "not_found"})
	}))
	return mux
}

// statusWriter records the status code for metrics. It unwraps for http.ResponseController,
// so flushing streams still reaches the real writer.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// instrument counts requests by route and code and observes their duration.
func (rt *Router) instrument(route string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			rt.met.requests.WithLabelValues(route, statusText(code)).Inc()
			rt.met.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		h(sw, r)
	})
}

// statusText returns the decimal code without allocating for the common ones.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 400:
		return "400"
	case 404:
		return "404"
	case 499:
		return "499"
	case 502:
		return "502"
	case 503:
		return "503"
	}
	b := []byte{byte('0' + code/100%10), byte('0' + code/10%10), byte('0' + code%10)}
	return string(b)
}

// admin guards a handler with the admin token when one is configured.
func (rt *Router) admin(h http.HandlerFunc) http.HandlerFunc {
	if rt.cfg.AdminToken == "" {
		return h
	}
	want := []byte("Bearer " + rt.cfg.AdminToken)
	return func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvgate-admin"`)
			openai.WriteError(w, &openai.Error{Status: http.StatusUnauthorized, Message: "admin token required", Type: openai.TypeAuth, Code: "unauthorized"})
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusInternalServerError, Message: "encode response", Type: openai.TypeServer})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// modelList is the GET /v1/models body.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Parent  string `json:"parent,omitempty"` // the base model of a LoRA adapter, as vLLM lists it
}

func (rt *Router) handleModels(w http.ResponseWriter, _ *http.Request) {
	def := rt.defaultModel()
	seen := map[string]bool{}
	list := modelList{Object: "list", Data: []modelCard{}}
	for _, m := range rt.members() {
		name := m.w.ServedModel(def)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		list.Data = append(list.Data, modelCard{ID: name, Object: "model", Created: rt.now().Unix(), OwnedBy: "kvgate"})
	}
	// LoRA adapters the workers list are served under their own names (DESIGN.md §3).
	for _, m := range rt.members() {
		parent := m.w.ServedModel(def)
		for _, a := range m.w.Adapters() {
			if seen[a] {
				continue
			}
			seen[a] = true
			list.Data = append(list.Data, modelCard{ID: a, Object: "model", Created: rt.now().Unix(), OwnedBy: "kvgate", Parent: parent})
		}
	}
	sort.Slice(list.Data, func(i, j int) bool { return list.Data[i].ID < list.Data[j].ID })
	writeJSON(w, http.StatusOK, list)
}

// handleHealth is the gateway's liveness: the process serves HTTP.
func (rt *Router) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Ready reports whether the gateway should receive traffic (DESIGN.md §7): every worker has had
// its first health check, at least one healthy worker serves the default model, and the event
// stream of every healthy worker is connected or known to be unavailable (a worker that is down
// does not hold readiness back). The reason says what is missing.
func (rt *Router) Ready() (ok bool, reason string) {
	def := rt.defaultModel()
	healthy := false
	for _, m := range rt.members() {
		if !m.w.Checked() {
			return false, "worker " + m.w.URL() + " not checked yet"
		}
		if !m.w.Healthy() {
			continue // a worker that is down holds nothing back; its stream reconnects later
		}
		if m.w.Serves(def, def) {
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

// workerView is one entry of GET /workers.
type workerView struct {
	worker.Spec
	Kind          string `json:"kind"`
	Healthy       bool   `json:"healthy"`
	HealthMessage string `json:"health_message,omitempty"`
	ReportedModel string `json:"reported_model,omitempty"`
	InFlight      int64  `json:"in_flight"`
	EngineLoad    *int64 `json:"engine_load,omitempty"`
	BlockSizeUsed int    `json:"block_size_used"`
	EventFed      bool   `json:"event_fed"`
	EventStream   string `json:"event_stream,omitempty"`
	IndexBlocks   int    `json:"index_blocks"`
	Runtime       string `json:"runtime_detected,omitempty"`
}

func (rt *Router) view(m *member) workerView {
	v := workerView{
		Spec: m.w.Spec(), Kind: m.w.Kind().String(), Healthy: m.w.Healthy(), HealthMessage: m.w.HealthMessage(),
		ReportedModel: m.w.ReportedModel(), InFlight: m.w.InFlight(), BlockSizeUsed: m.blockSize(),
		EventFed: m.eventFed(), IndexBlocks: m.indexBlocks(),
	}
	if n, _, ok := m.w.EngineLoad(); ok {
		v.EngineLoad = &n
	}
	if st, ok := m.streamState(); ok {
		v.EventStream = st.String()
	} else if m.collected.Load() {
		v.EventStream = "collector"
	}
	v.Runtime = string(m.eng.Runtime())
	return v
}

func (rt *Router) handleListWorkers(w http.ResponseWriter, _ *http.Request) {
	ms := rt.members()
	out := struct {
		Workers []workerView `json:"workers"`
	}{Workers: make([]workerView, 0, len(ms))}
	for _, m := range ms {
		out.Workers = append(out.Workers, rt.view(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func (rt *Router) handleAddWorker(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := openai.ReadBody(w, r, 64<<10)
	defer release()
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	var spec worker.Spec
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		// A spec string is accepted too: {"spec":"url=...,runtime=..."} is not needed when the
		// body is the flag syntax itself.
		s, perr := worker.ParseSpec(strings.TrimSpace(string(body)))
		if perr != nil {
			openai.WriteError(w, openai.BadRequest("", "body must be a worker spec object (url, runtime, model, kv_events, replay, topic, dp_size, block_size) or a --worker string"))
			return
		}
		spec = s
	}
	wk, err := rt.AddWorker(spec)
	switch {
	case errors.Is(err, worker.ErrDuplicate):
		openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Message: err.Error(), Type: openai.TypeInvalidRequest, Code: "worker_exists"})
		return
	case err != nil:
		openai.WriteError(w, openai.BadRequest("", err.Error()))
		return
	}
	m := rt.fleet.Load().byURL[wk.URL()]
	if m == nil { // removed concurrently
		writeJSON(w, http.StatusCreated, map[string]string{"url": wk.URL()})
		return
	}
	writeJSON(w, http.StatusCreated, rt.view(m))
}

func (rt *Router) handleRemoveWorker(w http.ResponseWriter, r *http.Request) {
	url := r.URL.Query().Get("url")
	if url == "" {
		body, release, aerr := openai.ReadBody(w, r, 64<<10)
		defer release()
		if aerr != nil {
			openai.WriteError(w, aerr)
			return
		}
		var req struct {
			URL string `json:"url"`
		}
		if len(body) > 0 {
			if err := json.Unmarshal(body, &req); err != nil {
				openai.WriteError(w, openai.BadRequest("url", "body must be {\"url\": ...}"))
				return
			}
		}
		url = req.URL
	}
	if url == "" {
		openai.WriteError(w, openai.BadRequest("url", "url is required (query parameter or JSON body)"))
		return
	}
	if err := rt.RemoveWorker(url); err != nil {
		if errors.Is(err, worker.ErrNotFound) {
			openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Message: "no such worker", Type: openai.TypeNotFound, Param: "url", Code: "worker_not_found"})
			return
		}
		openai.WriteError(w, &openai.Error{Status: http.StatusInternalServerError, Message: err.Error(), Type: openai.TypeServer})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
