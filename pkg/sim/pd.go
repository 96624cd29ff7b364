package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Prefill/decode roles of the HTTP server (wire/pd.md §7). A prefill server computes the
// prompt and hands its KV over; a decode server fetches it over a side channel (loopback HTTP
// standing in for NIXL's RDMA read or SGLang's transfer engine), charges the transfer by bytes
// over a bandwidth, caches the received blocks like computed ones (so they are published as
// BlockStored events, as vLLM's scheduler does after a transfer), then decodes.
//
// NIXL (vLLM NixlConnector): a request whose kv_transfer_params has do_remote_decode:true is
// prefilled and, when it finishes by length or stop, answered with kv_transfer_params naming
// its held blocks and this server's side channel; the blocks stay referenced until the decode
// server reads them (GET /pd/nixl/{remote_request_id}, the read being the read-done
// notification) or the lease expires. A decode server given do_remote_prefill:true and the
// full key set reads them there. SGLang: both legs carry bootstrap_host/port/room; the
// prefill server waits for its decode server to ask for the room on its bootstrap server
// (BootstrapHandler), prefills, hands over the prompt and answers with one token; the decode
// server waits for the room's KV and decodes.

// PD roles and transfer styles.
const (
	PDRolePrefill    = "prefill"
	PDRoleDecode     = "decode"
	PDTransferNIXL   = "nixl"
	PDTransferSGLang = "sglang"
)

// PDConfig makes a Server one side of prefill/decode pairs. Zero fields take the defaults.
type PDConfig struct {
	// Role is PDRolePrefill or PDRoleDecode; Transfer PDTransferNIXL or PDTransferSGLang.
	Role, Transfer string
	// SideChannel is host:port of this server's own HTTP listener, which a NIXL prefill
	// server puts in its answers' remote_host and remote_port.
	SideChannel string
	// EngineID is remote_engine_id (default "sim-" + SideChannel).
	EngineID string
	// Lease is how long a NIXL prefill server holds unread blocks (default 30 s, vLLM's
	// kv_lease_duration).
	Lease time.Duration
	// Wait bounds an SGLang prefill server's wait for its decode server and a decode
	// server's wait for the KV (default 300 s, SGLang's bootstrap and waiting timeouts).
	Wait time.Duration
	// Bandwidth is the transfer's bytes per simulated second (default 25e9, a 200 Gb/s
	// link), KVBytesPerToken the KV size of one token (default 262144: 64 layers × 8 KV
	// heads × 128 × K and V × 2 bytes, a 32B model's).
	Bandwidth       float64
	KVBytesPerToken int
	// Client fetches KV from the other side (default: a client with a 30 s timeout).
	Client *http.Client
}

// maxPDEntries bounds the held leases and bootstrap rooms: past it new ones are refused (503).
const maxPDEntries = 4096

// pdState is a Server's live pair state. The mutex guards leases and rooms.
type pdState struct {
	cfg    PDConfig
	mu     sync.Mutex
	leases map[string]*lease
	rooms  map[uint64]*room
}

// lease is a NIXL prefill's held blocks, waiting for its decode server's read.
type lease struct {
	tokens []uint32
	eng    *Engine
	req    *Request
	timer  *time.Timer
}

// room is one SGLang bootstrap room: decode is closed when the decode server asks for the
// KV, kv receives the prompt the prefill server computed (nil: the prefill failed).
type room struct {
	decode     chan struct{}
	decodeOnce sync.Once
	kv         chan []uint32
}

func newPDState(cfg PDConfig) (*pdState, error) {
	switch {
	case cfg.Role != PDRolePrefill && cfg.Role != PDRoleDecode:
		return nil, fmt.Errorf("sim: pd role %q is not prefill or decode: %w", cfg.Role, ErrBadConfig)
	case cfg.Transfer != PDTransferNIXL && cfg.Transfer != PDTransferSGLang:
		return nil, fmt.Errorf("sim: pd transfer %q is not nixl or sglang: %w", cfg.Transfer, ErrBadConfig)
	case cfg.Role == PDRolePrefill && cfg.Transfer == PDTransferNIXL && cfg.SideChannel == "":
		return nil, fmt.Errorf("sim: a nixl prefill server needs its side channel address: %w", ErrBadConfig)
	}
	if cfg.EngineID == "" {
		cfg.EngineID = "sim-" + cfg.SideChannel
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Wait == 0 {
		cfg.Wait = 300 * time.Second
	}
	if cfg.Bandwidth == 0 {
		cfg.Bandwidth = 25e9
	}
	if cfg.KVBytesPerToken == 0 {
		cfg.KVBytesPerToken = 262144
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	return &pdState{cfg: cfg, leases: map[string]*lease{}, rooms: map[uint64]*room{}}, nil
}

// pdFields are the transfer fields of a request body.
type pdFields struct {
	KV            *kvParams       `json:"kv_transfer_params"`
	BootstrapHost json.RawMessage `json:"bootstrap_host"`
	BootstrapPort json.RawMessage `json:"bootstrap_port"`
	BootstrapRoom json.RawMessage `json:"bootstrap_room"`
}

// kvParams are the NIXL keys the simulator reads (wire/pd.md §2.3).
type kvParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteBlockIDs  [][]int `json:"remote_block_ids"`
	RemoteEngineID  string  `json:"remote_engine_id"`
	RemoteRequestID string  `json:"remote_request_id"`
	RemoteHost      string  `json:"remote_host"`
	RemotePort      int     `json:"remote_port"`
}

// complete reports whether p names a transfer a decode engine can run (wire/pd.md §2.8).
func (p *kvParams) complete() bool {
	return p.DoRemotePrefill && p.RemoteBlockIDs != nil && p.RemoteEngineID != "" && p.RemoteRequestID != "" && p.RemoteHost != "" && p.RemotePort > 0
}

// pdJob is what one request's pair role does around its generation.
type pdJob struct {
	holdKV bool   // NIXL prefill: hold the blocks and answer with params
	room   *room  // SGLang prefill: the room to hand the prompt to
	roomID uint64 // and its id, to drop it afterwards
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

// parsePDFields reads a body's transfer fields (nil when it has none).
func parsePDFields(body []byte) (*pdFields, *apiError) {
	var f pdFields
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, badRequest("invalid transfer fields: %v", err)
	}
	return &f, nil
}

// pdStart runs the request's pair role before its generation: a decode server fetches and
// pays for the KV (p.remote), a prefill server prepares to hand it over.
func (s *Server) pdStart(ctx context.Context, p *parsedRequest) (*pdJob, *apiError) {
	pd, f := s.pd, p.pd
	if pd == nil || f == nil {
		return nil, nil
	}
	switch {
	case pd.cfg.Transfer == PDTransferNIXL && pd.cfg.Role == PDRolePrefill:
		if f.KV != nil && f.KV.DoRemoteDecode {
			return &pdJob{holdKV: true}, nil
		}
	case pd.cfg.Transfer == PDTransferNIXL && f.KV != nil && f.KV.complete():
		url := "http://" + f.KV.RemoteHost + ":" + strconv.Itoa(f.KV.RemotePort) + "/pd/nixl/" + f.KV.RemoteRequestID
		return nil, s.pull(ctx, p, url)
	case pd.cfg.Transfer == PDTransferSGLang:
		return s.sglangStart(ctx, p, f)
	}
	return nil, nil
}

// sglangStart is pdStart for SGLang: a prefill server waits for its decode server to ask for
// the room, then computes the prompt with one output token; a decode server reads the room's
// KV from the prefill server's bootstrap server.
func (s *Server) sglangStart(ctx context.Context, p *parsedRequest, f *pdFields) (*pdJob, *apiError) {
	var id uint64
	if err := json.Unmarshal(first(f.BootstrapRoom), &id); err != nil || len(f.BootstrapRoom) == 0 {
		return nil, badRequest("bootstrap_room is required in disaggregation mode")
	}
	if s.pd.cfg.Role == PDRoleDecode {
		var host string
		var port int
		if json.Unmarshal(first(f.BootstrapHost), &host) != nil || json.Unmarshal(first(f.BootstrapPort), &port) != nil || host == "" || port <= 0 {
			return nil, badRequest("bootstrap_host and bootstrap_port are required in decode mode")
		}
		return nil, s.pull(ctx, p, "http://"+host+":"+strconv.Itoa(port)+"/pd/sglang/"+strconv.FormatUint(id, 10))
	}
	rm, ok := s.pd.room(id)
	if !ok {
		return nil, &apiError{status: http.StatusServiceUnavailable, msg: "too many bootstrap rooms in flight"}
	}
	t := time.NewTimer(s.pd.cfg.Wait)
	defer t.Stop()
	select {
	case <-rm.decode:
	case <-t.C:
		s.pd.dropRoom(id, rm)
		return nil, &apiError{status: http.StatusInternalServerError, msg: "bootstrap timeout: no decode server asked for the room"}
	case <-ctx.Done():
		s.pd.dropRoom(id, rm)
		return nil, &apiError{status: http.StatusServiceUnavailable, msg: "request cancelled"}
	}
	p.maxTokens, p.minTokens, p.n = 1, 0, 1 // the first token goes to the decode server with the KV
	return &pdJob{room: rm, roomID: id}, nil
}

// pull fetches the prompt's KV from url (a NIXL prefill's side channel or an SGLang
// bootstrap server), checks it is this prompt's, and waits the transfer time of the tokens
// the local cache does not hold. A failed transfer fails the request (vLLM's default
// kv_load_failure_policy "fail").
func (s *Server) pull(ctx context.Context, p *parsedRequest, url string) *apiError {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return badRequest("bad transfer address: %v", err)
	}
	resp, err := s.pd.cfg.Client.Do(req)
	if err != nil {
		return &apiError{status: http.StatusInternalServerError, msg: "KV transfer failed: " + err.Error()}
	}
	defer resp.Body.Close()
	var kv struct {
		Tokens []uint32 `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<20)).Decode(&kv) != nil {
		return &apiError{status: http.StatusInternalServerError, msg: fmt.Sprintf("KV transfer failed: the prefill side answered %d", resp.StatusCode)}
	}
	prompt := p.prompts[0]
	if len(kv.Tokens) > len(prompt) || !slicesEqual(kv.Tokens, prompt[:len(kv.Tokens)]) {
		return &apiError{status: http.StatusInternalServerError, msg: "KV transfer failed: the transferred KV is another prompt's"}
	}
	eng := s.ranks.Pick()
	local := eng.CachedTokens(prompt)
	bytes := float64(max(len(kv.Tokens)-local, 0)) * float64(s.pd.cfg.KVBytesPerToken)
	wait := time.Duration(bytes / s.pd.cfg.Bandwidth * float64(time.Second) * eng.TimeScale())
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return &apiError{status: http.StatusServiceUnavailable, msg: "request cancelled"}
		}
	}
	p.remote = len(kv.Tokens)
	return nil
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// handoff ends a NIXL prefill's generation g for a non-streaming answer: when the request
// finished by length or stop, its blocks are leased to the decode server and the answer's
// kv_transfer_params returned; otherwise the blocks are freed at once and nil returned.
func (s *Server) handoff(job *pdJob, g *generation) json.RawMessage {
	if job == nil || !job.holdKV {
		return nil
	}
	c := g.choices[0]
	if c.finish != "length" && c.finish != "stop" {
		s.release(g)
		return nil
	}
	id := g.id
	l := &lease{tokens: c.req.Prompt, eng: g.eng, req: c.req}
	blocks := g.eng.HeldBlocks(c.req)
	s.pd.mu.Lock()
	full := len(s.pd.leases) >= maxPDEntries
	if !full {
		s.pd.leases[id] = l
		l.timer = time.AfterFunc(s.pd.cfg.Lease, func() { s.pd.take(id) })
	}
	s.pd.mu.Unlock()
	if full {
		s.release(g)
		return nil
	}
	for _, c := range g.choices[1:] { // one handoff per request: the other samples' blocks are not read
		g.eng.ReleaseHeld(c.req)
	}
	host, port, _ := splitHostPort(s.pd.cfg.SideChannel)
	ids := make([]int, len(blocks))
	for i, b := range blocks {
		ids[i] = int(b)
	}
	out, _ := json.Marshal(map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [][]int{ids},
		"remote_engine_id": s.pd.cfg.EngineID, "remote_request_id": id, "remote_host": host, "remote_port": port, "tp_size": 1,
		"remote_num_tokens": len(c.req.Prompt)})
	return out
}

// release frees every held block of g (a handoff that will not happen).
func (s *Server) release(g *generation) {
	for _, c := range g.choices {
		g.eng.ReleaseHeld(c.req)
	}
}

// pdEnd ends a request's pair role after its answer (err: it failed): held blocks no lease
// took are freed; an SGLang prefill hands the prompt to its room, or fails the room.
func (s *Server) pdEnd(job *pdJob, g *generation, err error) {
	if job == nil {
		return
	}
	if job.holdKV {
		s.pd.mu.Lock()
		_, leased := s.pd.leases[g.id]
		s.pd.mu.Unlock()
		if !leased {
			s.release(g)
		}
	}
	if job.room != nil {
		var kv []uint32
		if err == nil && g.choices[0].finish != "abort" {
			kv = g.choices[0].req.Prompt
		}
		job.room.kv <- kv // capacity 1, sent once
		s.pd.dropRoom(job.roomID, job.room)
	}
}

// take removes and returns lease id, releasing its blocks (nil when it is unknown).
func (pd *pdState) take(id string) *lease {
	pd.mu.Lock()
	l := pd.leases[id]
	delete(pd.leases, id)
	pd.mu.Unlock()
	if l != nil {
		l.timer.Stop()
		l.eng.ReleaseHeld(l.req)
	}
	return l
}

// room returns room id, creating it; false when too many are in flight.
func (pd *pdState) room(id uint64) (*room, bool) {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if r := pd.rooms[id]; r != nil {
		return r, true
	}
	if len(pd.rooms) >= maxPDEntries {
		return nil, false
	}
	r := &room{decode: make(chan struct{}), kv: make(chan []uint32, 1)}
	pd.rooms[id] = r
	return r, true
}

// dropRoom forgets room id if it is still r.
func (pd *pdState) dropRoom(id uint64, r *room) {
	pd.mu.Lock()
	if pd.rooms[id] == r {
		delete(pd.rooms, id)
	}
	pd.mu.Unlock()
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

// BootstrapHandler is an SGLang prefill server's bootstrap server (--pd-bootstrap-port): GET
// /pd/sglang/{room} registers the decode server and answers with the room's KV once the
// prefill computed it, within PDConfig.Wait. nil for other servers.
func (s *Server) BootstrapHandler() http.Handler {
	if s.pd == nil || s.pd.cfg.Transfer != PDTransferSGLang || s.pd.cfg.Role != PDRolePrefill {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pd/sglang/{room}", s.handleBootstrap)
	return mux
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

// splitHostPort splits a side channel address into remote_host and remote_port.
func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return h, port, err
}
