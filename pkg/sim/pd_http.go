package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The HTTP surface of the pair roles (pd.go): a body's transfer fields, the side channel a
// NIXL prefill server serves its held KV on, and an SGLang prefill server's bootstrap server.

// pdFields are the transfer fields of a request body.
type pdFields struct {
	KV            *kvParams       `json:"kv_transfer_params"`
	BootstrapHost json.RawMessage `json:"bootstrap_host"`
	BootstrapPort json.RawMessage `json:"bootstrap_port"`
	BootstrapRoom json.RawMessage `json:"bootstrap_room"`
}

// first returns the first element of a JSON scalar-or-array value (SGLang sends arrays for
// several outputs; the simulator transfers one prompt per request, under the first room).
func first(v json.RawMessage) json.RawMessage {
	var arr []json.RawMessage
	if len(v) > 0 && v[0] == '[' && json.Unmarshal(v, &arr) == nil && len(arr) > 0 {
		return arr[0]
	}
	return v
}

// parsePDFields reads a body's transfer fields.
func parsePDFields(body []byte) (*pdFields, *apiError) {
	var f pdFields
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, badRequest("invalid transfer fields: %v", err)
	}
	return &f, nil
}

// leg returns f as the pair role reads it; a room, host or port that does not parse is
// left out (start then refuses the request).
func (f *pdFields) leg() *pdLeg {
	leg := &pdLeg{kv: f.KV}
	var id uint64
	if len(f.BootstrapRoom) > 0 && json.Unmarshal(first(f.BootstrapRoom), &id) == nil {
		leg.room = &id
	}
	var host string
	var port int
	if json.Unmarshal(first(f.BootstrapHost), &host) == nil && json.Unmarshal(first(f.BootstrapPort), &port) == nil {
		leg.host, leg.port = host, port
	}
	return leg
}

// apiErrorOf is a pair role's failure as an HTTP answer.
func apiErrorOf(e *pdError) *apiError {
	status := http.StatusInternalServerError
	switch e.kind {
	case pdBadInput:
		status = http.StatusBadRequest
	case pdBusy, pdCancelled:
		status = http.StatusServiceUnavailable
	}
	return &apiError{status: status, msg: e.msg}
}

// pdStart runs the request's pair role before its generation (pdState.start): p.remote gets
// the prompt tokens whose KV arrived, and an SGLang prefill runs with one output token.
func (s *Server) pdStart(ctx context.Context, p *parsedRequest) (*pdJob, *apiError) {
	if s.pd == nil || p.pd == nil {
		return nil, nil
	}
	job, remote, perr := s.pd.start(ctx, s.ranks.Pick(), p.pd.leg(), p.prompts[0])
	if perr != nil {
		return nil, apiErrorOf(perr)
	}
	p.remote = remote
	if job != nil && job.oneToken {
		p.maxTokens, p.minTokens, p.n = 1, 0, 1
	}
	return job, nil
}

// requests returns g's engine requests, in choice order.
func (g *generation) requests() []*Request {
	out := make([]*Request, len(g.choices))
	for i, c := range g.choices {
		out[i] = c.req
	}
	return out
}

// handoff is pdState.handoff for a non-streaming answer of g.
func (s *Server) handoff(job *pdJob, g *generation) json.RawMessage {
	if job == nil || !job.holdKV {
		return nil
	}
	return s.pd.handoff(job, g.id, g.eng, g.requests(), g.choices[0].finish)
}

// pdEnd is pdState.end after g's answer (err: it failed).
func (s *Server) pdEnd(job *pdJob, g *generation, err error) {
	if job == nil {
		return
	}
	s.pd.end(job, g.id, g.eng, g.requests(), g.choices[0].finish, err != nil)
}

// handleNIXLRead is a NIXL prefill's side channel: the decode server reads a lease's prompt
// KV, which releases the blocks.
func (s *Server) handleNIXLRead(w http.ResponseWriter, r *http.Request) {
	l := s.pd.take(r.PathValue("id"))
	if l == nil {
		writeError(w, &apiError{status: http.StatusNotFound, msg: "no held KV for that request (expired or read)"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string][]uint32{"tokens": l.tokens})
}

// BootstrapHandler is a prefill server's bootstrap server (--pd-bootstrap-port). SGLang: GET
// /pd/sglang/{room} registers the decode server and answers with the room's KV once the
// prefill computed it, within PDConfig.Wait. Mooncake: GET /query names the engine (vLLM's
// answer, keyed by DP rank), GET /pd/mooncake/{transfer_id} hands over a transfer's KV (the
// push). nil for other servers.
func (s *Server) BootstrapHandler() http.Handler {
	if s.pd == nil || s.pd.cfg.Role != PDRolePrefill {
		return nil
	}
	mux := http.NewServeMux()
	switch s.pd.cfg.Transfer {
	case PDTransferSGLang:
		mux.HandleFunc("GET /pd/sglang/{room}", s.handleBootstrap)
	case PDTransferMooncake:
		mux.HandleFunc("GET /query", s.handleMooncakeQuery)
		mux.HandleFunc("GET /pd/mooncake/{id}", s.handleMooncakeRead)
	default:
		return nil
	}
	return mux
}

// handleMooncakeQuery answers as vLLM's bootstrap server: one DP rank, its engine id and its
// worker's address.
func (s *Server) handleMooncakeQuery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"0": map[string]any{"engine_id": s.pd.cfg.EngineID,
		"worker_addr": map[string]any{"0": map[string]string{"0": s.pd.cfg.SideChannel}}}})
}

// handleMooncakeRead hands a transfer's KV to the decode server that names this engine,
// releasing the blocks.
func (s *Server) handleMooncakeRead(w http.ResponseWriter, r *http.Request) {
	if e := r.URL.Query().Get("engine_id"); e != s.pd.cfg.EngineID {
		writeError(w, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("remote_engine_id %q is not this engine (%s)", e, s.pd.cfg.EngineID)})
		return
	}
	l, busy := s.pd.mooncakeTake(r.Context(), r.PathValue("id"))
	switch {
	case busy:
		writeError(w, &apiError{status: http.StatusServiceUnavailable, msg: "too many transfers waiting"})
		return
	case l == nil:
		writeError(w, &apiError{status: http.StatusGone, msg: "no KV for that transfer_id (the prefill failed, expired or was read)"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string][]uint32{"tokens": l.tokens})
}

func (s *Server) handleBootstrap(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
	if err != nil {
		writeError(w, badRequest("bad room %q", r.PathValue("room")))
		return
	}
	rm, ok := s.pd.room(id)
	if !ok {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, msg: "too many bootstrap rooms in flight"})
		return
	}
	rm.decodeOnce.Do(func() { close(rm.decode) })
	t := time.NewTimer(s.pd.cfg.Wait)
	defer t.Stop()
	var kv []uint32
	select {
	case kv = <-rm.kv:
	case <-t.C:
	case <-r.Context().Done():
	}
	s.pd.dropRoom(id, rm)
	if kv == nil {
		writeError(w, &apiError{status: http.StatusGone, msg: "the prefill for this room failed or timed out"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string][]uint32{"tokens": kv})
}
