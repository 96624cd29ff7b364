package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/worker"
)

// workerView is one entry of GET /workers. Its spec is redacted: the list never shows an
// upstream key.
type workerView struct {
	worker.Spec
	// Origin is where the worker came from: flag, file, admin or "dns NAME" (a discovery).
	Origin string `json:"origin"`
	// Pool is the configured model the worker is routed under ("": the default pool).
	Pool string `json:"pool,omitempty"`
	// Draining is set once the worker left the fleet: it takes no new request and is removed
	// when its in-flight ones have finished (or the drain timeout passed); DrainingSeconds is
	// how long it has been draining.
	Draining        bool    `json:"draining"`
	DrainingSeconds float64 `json:"draining_seconds,omitempty"`
	Kind            string  `json:"kind"`
	Healthy         bool    `json:"healthy"`
	HealthMessage   string  `json:"health_message,omitempty"`
	ReportedModel   string  `json:"reported_model,omitempty"`
	InFlight        int64   `json:"in_flight"`
	EngineLoad      *int64  `json:"engine_load,omitempty"`
	BlockSizeUsed   int     `json:"block_size_used"`
	EventFed        bool    `json:"event_fed"`
	EventStream     string  `json:"event_stream,omitempty"`
	IndexBlocks     int     `json:"index_blocks"`
	// HealthCheckFailures counts the worker's failed health checks, those that did not take
	// it out of rotation (it was serving requests) included.
	HealthCheckFailures int64  `json:"health_check_failures"`
	Runtime             string `json:"runtime_detected,omitempty"`
}

func (rt *Router) view(m *fleet.Member) workerView {
	w := m.Worker()
	v := workerView{
		Spec: w.Spec().Redacted(), Origin: m.Origin(), Kind: w.Kind().String(), Healthy: w.Healthy(), HealthMessage: w.HealthMessage(),
		ReportedModel: w.ReportedModel(), InFlight: w.InFlight(), BlockSizeUsed: m.BlockSize(),
		EventFed: m.EventFed(), IndexBlocks: m.IndexBlocks(), EventStream: m.EventStream(), Runtime: string(m.Engine().Runtime()),
		HealthCheckFailures: m.HealthCheckFailures(),
	}
	if !m.Pool().Default() {
		v.Pool = m.Pool().Name()
	}
	if n, _, ok := w.EngineLoad(); ok {
		v.EngineLoad = &n
	}
	if t := m.DrainingSince(); !t.IsZero() {
		v.Draining, v.DrainingSeconds = true, rt.cfg.Now().Sub(t).Seconds()
	}
	return v
}

// poolView is one entry of the "pools" of GET /workers: a model's pool and its index.
type poolView struct {
	// Model is the configured model's name, or the default model's for the default pool.
	Model   string `json:"model"`
	Default bool   `json:"default,omitempty"`
	// Workers and Draining count the pool's serving and draining workers.
	Workers  int `json:"workers"`
	Draining int `json:"draining"`
	// IndexKeys is the number of distinct block keys in the pool's event index; IndexBlocks
	// the (worker, block) pairs it holds, which is the sum of its workers' index_blocks.
	IndexKeys   int `json:"index_keys"`
	IndexBlocks int `json:"index_blocks"`
}

// handleListWorkers lists the serving workers, then the draining ones, and every pool.
func (rt *Router) handleListWorkers(w http.ResponseWriter, _ *http.Request) {
	s := rt.fleet.Snapshot()
	out := struct {
		Workers []workerView `json:"workers"`
		Pools   []poolView   `json:"pools"`
	}{Workers: make([]workerView, 0, len(s.Members())+len(s.Draining()))}
	pools := s.Pools()
	views := make(map[*fleet.Pool]*poolView, len(pools))
	for _, p := range pools {
		ix := p.Lookup().Index
		v := &poolView{Model: p.Name(), IndexKeys: ix.Len(), IndexBlocks: ix.Memberships()}
		if p.Default() {
			v.Model, v.Default = s.DefaultModel(), true
		}
		views[p] = v
	}
	for _, m := range s.Members() {
		out.Workers = append(out.Workers, rt.view(m))
		if v := views[m.Pool()]; v != nil {
			v.Workers++
		}
	}
	for _, m := range s.Draining() {
		out.Workers = append(out.Workers, rt.view(m))
		if v := views[m.Pool()]; v != nil {
			v.Draining++
		}
	}
	for _, p := range pools {
		out.Pools = append(out.Pools, *views[p])
	}
	pipeline.WriteJSON(w, http.StatusOK, out)
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
			openai.WriteError(w, openai.BadRequest("", "body must be a worker spec object (url, runtime, model, kv_events, replay, topic, dp_size, block_size, api_key, api_key_file, tls, tls_ca_file, tls_cert_file, tls_key_file) or a --worker string"))
			return
		}
		spec = s
	}
	wk, err := rt.fleet.AddWorker(spec)
	switch {
	case errors.Is(err, worker.ErrDuplicate):
		openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Message: err.Error(), Type: openai.TypeInvalidRequest, Code: "worker_exists"})
		return
	case err != nil:
		openai.WriteError(w, openai.BadRequest("", err.Error()))
		return
	}
	m := rt.fleet.Snapshot().Member(wk.URL())
	if m == nil { // removed concurrently
		pipeline.WriteJSON(w, http.StatusCreated, map[string]string{"url": wk.URL()})
		return
	}
	pipeline.WriteJSON(w, http.StatusCreated, rt.view(m))
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
	if err := rt.fleet.RemoveWorker(url); err != nil {
		if errors.Is(err, worker.ErrNotFound) {
			openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Message: "no such worker", Type: openai.TypeNotFound, Param: "url", Code: "worker_not_found"})
			return
		}
		openai.WriteError(w, &openai.Error{Status: http.StatusInternalServerError, Message: err.Error(), Type: openai.TypeServer})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
