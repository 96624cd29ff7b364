package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Prefill/decode roles (wire/pd.md §7), the same for both surfaces: the HTTP server's
// adapters are in pd_http.go, the gRPC server's in grpc_pd.go, and a simworker's two servers
// share one pdState (its leases, rooms and side channel). A prefill server computes the
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
// server waits for the room's KV and decodes. Mooncake (vLLM MooncakeConnector): a prefill
// request's kv_transfer_params carry do_remote_decode:true and the router's transfer_id; the
// prefill server answers without params and holds the blocks under that id (a lease, as
// NIXL's); its bootstrap server answers GET /query with its engine id and hands the KV over
// on GET /pd/mooncake/{transfer_id}, waiting for the prefill when the decode server asks
// first (the legs run at once). A decode server needs transfer_id, remote_engine_id and
// remote_bootstrap_addr, and fetches the KV there.

// PD roles and transfer styles.
const (
	PDRolePrefill      = "prefill"
	PDRoleDecode       = "decode"
	PDTransferNIXL     = "nixl"
	PDTransferSGLang   = "sglang"
	PDTransferMooncake = "mooncake"
)

// PDConfig makes a Server one side of prefill/decode pairs. Zero fields take the defaults.
type PDConfig struct {
	// Role is PDRolePrefill or PDRoleDecode; Transfer PDTransferNIXL, PDTransferMooncake or
	// PDTransferSGLang.
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
	// server's (SGLang, Mooncake) wait for the KV (default 300 s, SGLang's bootstrap and waiting timeouts).
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

// pdState is a Server's live pair state, shared with its GRPCServer (GRPCConfig.Pairs);
// it must not be copied. The mutex guards leases and rooms.
type pdState struct {
	cfg    PDConfig
	nextID atomic.Uint64 // for leaseID
	mu     sync.Mutex
	leases map[string]*lease
	rooms  map[uint64]*room
	// pushes are Mooncake reads waiting for their transfer's prefill, by transfer_id.
	pushes map[string]chan struct{}
}

// leaseID returns a fresh lease id for a request with external id ext: ext and a unique
// suffix, as vLLM's internal ids are (wire/pd.md §2.5).
func (pd *pdState) leaseID(ext string) string {
	return ext + "-" + strconv.FormatUint(pd.nextID.Add(1), 16)
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
	case cfg.Transfer != PDTransferNIXL && cfg.Transfer != PDTransferSGLang && cfg.Transfer != PDTransferMooncake:
		return nil, fmt.Errorf("sim: pd transfer %q is not nixl, mooncake or sglang: %w", cfg.Transfer, ErrBadConfig)
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
	return &pdState{cfg: cfg, leases: map[string]*lease{}, rooms: map[uint64]*room{}, pushes: map[string]chan struct{}{}}, nil
}

// pdLeg is one request's transfer fields, whichever surface carried them (an HTTP body's
// kv_transfer_params and bootstrap_* fields, or a gRPC Generate's kv_transfer_params_json,
// disaggregated_params or kv_bootstrap_info).
type pdLeg struct {
	kv *kvParams // NIXL; nil: none
	// room, host and port are an SGLang-style rendezvous (room nil: none).
	room *uint64
	host string
	port int
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
	// Mooncake (wire/pd.md §3).
	TransferID          string `json:"transfer_id"`
	RemoteBootstrapAddr string `json:"remote_bootstrap_addr"`
}

// complete reports whether p names a transfer a decode engine can run (wire/pd.md §2.8).
func (p *kvParams) complete() bool {
	return p.DoRemotePrefill && p.RemoteBlockIDs != nil && p.RemoteEngineID != "" && p.RemoteRequestID != "" && p.RemoteHost != "" && p.RemotePort > 0
}

// pdErrKind classifies a pair role's failure; each surface maps it to its own status.
type pdErrKind int

const (
	pdBadInput  pdErrKind = iota // the request's transfer fields are missing or malformed
	pdBusy                       // too many leases or rooms in flight
	pdCancelled                  // the request ended while it waited
	pdFailed                     // the transfer or the rendezvous failed
)

// pdError is a pair role's failure of one request.
type pdError struct {
	kind pdErrKind
	msg  string
}

func (e *pdError) Error() string { return e.msg }

// pdJob is what one request's pair role does around its generation.
type pdJob struct {
	holdKV bool   // NIXL prefill: hold the blocks and answer with params; Mooncake: hold them
	xferID string // Mooncake prefill: the transfer_id its blocks are held under
	room   *room  // SGLang prefill: the room to hand the prompt to
	roomID uint64 // and its id, to drop it afterwards
	// oneToken: the request runs with max_tokens 1, min_tokens 0, n 1 (an SGLang prefill:
	// the first token goes to the decode server with the KV).
	oneToken bool
}

// start runs a request's pair role before its generation on eng: a decode server fetches
// and pays for the prompt's KV (remote: the tokens that arrived), a prefill server prepares
// to hand it over (job, nil when there is nothing to do afterwards). leg may be nil (a
// request without transfer fields).
func (pd *pdState) start(ctx context.Context, eng *Engine, leg *pdLeg, prompt []uint32) (job *pdJob, remote int, perr *pdError) {
	if leg == nil {
		leg = &pdLeg{}
	}
	switch {
	case pd.cfg.Transfer == PDTransferNIXL && pd.cfg.Role == PDRolePrefill:
		if leg.kv != nil && leg.kv.DoRemoteDecode {
			return &pdJob{holdKV: true}, 0, nil
		}
	case pd.cfg.Transfer == PDTransferNIXL && leg.kv != nil && leg.kv.complete():
		addr := "http://" + net.JoinHostPort(leg.kv.RemoteHost, strconv.Itoa(leg.kv.RemotePort)) + "/pd/nixl/" + url.PathEscape(leg.kv.RemoteRequestID)
		remote, perr = pd.pull(ctx, eng, prompt, addr)
		return nil, remote, perr
	case pd.cfg.Transfer == PDTransferSGLang:
		return pd.sglangStart(ctx, eng, leg, prompt)
	case pd.cfg.Transfer == PDTransferMooncake && pd.cfg.Role == PDRolePrefill:
		// Without a transfer_id vLLM's connector warns and sends nothing: an ordinary request.
		if leg.kv != nil && leg.kv.DoRemoteDecode && leg.kv.TransferID != "" {
			if len(leg.kv.TransferID) > 256 {
				return nil, 0, &pdError{pdBadInput, "transfer_id is longer than 256 bytes"}
			}
			return &pdJob{holdKV: true, xferID: leg.kv.TransferID}, 0, nil
		}
	case pd.cfg.Transfer == PDTransferMooncake && leg.kv != nil && leg.kv.DoRemotePrefill:
		return pd.mooncakePull(ctx, eng, leg.kv, prompt)
	}
	return nil, 0, nil
}

// sglangStart is start for SGLang: a prefill server waits for its decode server to ask for
// the room, then computes the prompt with one output token; a decode server reads the room's
// KV from the prefill server's bootstrap server.
func (pd *pdState) sglangStart(ctx context.Context, eng *Engine, leg *pdLeg, prompt []uint32) (*pdJob, int, *pdError) {
	if leg.room == nil {
		return nil, 0, &pdError{pdBadInput, "bootstrap_room is required in disaggregation mode"}
	}
	id := *leg.room
	if pd.cfg.Role == PDRoleDecode {
		if leg.host == "" || leg.port <= 0 || leg.port > 65535 {
			return nil, 0, &pdError{pdBadInput, "bootstrap_host and bootstrap_port are required in decode mode"}
		}
		remote, perr := pd.pull(ctx, eng, prompt, "http://"+net.JoinHostPort(strings.Trim(leg.host, "[]"), strconv.Itoa(leg.port))+"/pd/sglang/"+strconv.FormatUint(id, 10))
		return nil, remote, perr
	}
	rm, ok := pd.room(id)
	if !ok {
		return nil, 0, &pdError{pdBusy, "too many bootstrap rooms in flight"}
	}
	t := time.NewTimer(pd.cfg.Wait)
	defer t.Stop()
	select {
	case <-rm.decode:
	case <-t.C:
		pd.dropRoom(id, rm)
		return nil, 0, &pdError{pdFailed, "bootstrap timeout: no decode server asked for the room"}
	case <-ctx.Done():
		pd.dropRoom(id, rm)
		return nil, 0, &pdError{pdCancelled, "request cancelled"}
	}
	return &pdJob{room: rm, roomID: id, oneToken: true}, 0, nil
}

// mooncakePull is start for a Mooncake decode request with do_remote_prefill: it needs the
// three keys (vLLM's connector otherwise warns and transfers nothing; the simulator refuses
// the request, so a router that forgets one is seen) and reads the KV from the prefill
// server's bootstrap server.
func (pd *pdState) mooncakePull(ctx context.Context, eng *Engine, kv *kvParams, prompt []uint32) (*pdJob, int, *pdError) {
	if kv.TransferID == "" || kv.RemoteEngineID == "" || kv.RemoteBootstrapAddr == "" {
		return nil, 0, &pdError{pdBadInput, "kv_transfer_params with do_remote_prefill need transfer_id, remote_engine_id and remote_bootstrap_addr"}
	}
	u, err := url.Parse(kv.RemoteBootstrapAddr)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Path != "" && u.Path != "/" {
		return nil, 0, &pdError{pdBadInput, fmt.Sprintf("remote_bootstrap_addr %q is not http://host:port", kv.RemoteBootstrapAddr)}
	}
	addr := "http://" + u.Host + "/pd/mooncake/" + url.PathEscape(kv.TransferID) + "?engine_id=" + url.QueryEscape(kv.RemoteEngineID)
	remote, perr := pd.pull(ctx, eng, prompt, addr)
	return nil, remote, perr
}

// pull fetches the prompt's KV from url (a NIXL prefill's side channel or an SGLang
// bootstrap server), checks it is this prompt's, and waits the transfer time of the tokens
// eng's cache does not hold; it returns how many prompt tokens arrived. A failed transfer
// fails the request (vLLM's default kv_load_failure_policy "fail").
func (pd *pdState) pull(ctx context.Context, eng *Engine, prompt []uint32, url string) (int, *pdError) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, &pdError{pdBadInput, "bad transfer address: " + err.Error()}
	}
	resp, err := pd.cfg.Client.Do(req)
	if err != nil {
		return 0, &pdError{pdFailed, "KV transfer failed: " + err.Error()}
	}
	defer resp.Body.Close()
	var kv struct {
		Tokens []uint32 `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<20)).Decode(&kv) != nil {
		return 0, &pdError{pdFailed, fmt.Sprintf("KV transfer failed: the prefill side answered %d", resp.StatusCode)}
	}
	if len(kv.Tokens) > len(prompt) || !slices.Equal(kv.Tokens, prompt[:len(kv.Tokens)]) {
		return 0, &pdError{pdFailed, "KV transfer failed: the transferred KV is another prompt's"}
	}
	local := eng.CachedTokens(prompt)
	bytes := float64(max(len(kv.Tokens)-local, 0)) * float64(pd.cfg.KVBytesPerToken)
	wait := time.Duration(bytes / pd.cfg.Bandwidth * float64(time.Second) * eng.TimeScale())
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, &pdError{pdCancelled, "request cancelled"}
		}
	}
	return len(kv.Tokens), nil
}

// handoff ends a NIXL prefill's generation for its answer: id names the lease (the answer's
// remote_request_id), reqs are the request's engine requests on eng, the first one handed
// over, finish how it ended. When it finished by length or stop, its blocks are leased to the
// decode server and the answer's kv_transfer_params returned; otherwise every held block is
// freed at once and nil returned. The other requests' blocks are freed by end.
func (pd *pdState) handoff(job *pdJob, id string, eng *Engine, reqs []*Request, finish string) json.RawMessage {
	if job == nil || !job.holdKV || len(reqs) == 0 {
		return nil
	}
	if job.xferID != "" {
		id = job.xferID
		defer pd.pushReady(id) // after the lease is stored (or not)
	}
	if finish != "length" && finish != "stop" {
		release(eng, reqs)
		return nil
	}
	r := reqs[0]
	l := &lease{tokens: r.Prompt, eng: eng, req: r}
	blocks := eng.HeldBlocks(r)
	pd.mu.Lock()
	full := len(pd.leases) >= maxPDEntries
	if !full {
		pd.leases[id] = l
		l.timer = time.AfterFunc(pd.cfg.Lease, func() { pd.take(id) })
	}
	pd.mu.Unlock()
	if full {
		release(eng, reqs)
		return nil
	}
	if job.xferID != "" {
		return nil // a Mooncake prefill answers without params
	}
	host, port, _ := splitHostPort(pd.cfg.SideChannel)
	ids := make([]int, len(blocks))
	for i, b := range blocks {
		ids[i] = int(b)
	}
	out, _ := json.Marshal(map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [][]int{ids},
		"remote_engine_id": pd.cfg.EngineID, "remote_request_id": id, "remote_host": host, "remote_port": port, "tp_size": 1,
		"remote_num_tokens": len(r.Prompt)})
	return out
}

// release frees every held block of reqs (a handoff that will not happen).
func release(eng *Engine, reqs []*Request) {
	for _, r := range reqs {
		eng.ReleaseHeld(r)
	}
}

// end ends a request's pair role after its answer (failed: it did not complete): held
// blocks no lease took are freed (one handoff per request: the other samples' blocks are not
// read); an SGLang prefill hands the first prompt to its room, or fails the room. id, eng,
// reqs and finish are as for handoff.
func (pd *pdState) end(job *pdJob, id string, eng *Engine, reqs []*Request, finish string, failed bool) {
	if job == nil {
		return
	}
	if job.xferID != "" {
		id = job.xferID
		defer pd.pushReady(id) // a prefill that failed before its handoff: the reader stops waiting
	}
	if job.holdKV {
		pd.mu.Lock()
		l := pd.leases[id]
		pd.mu.Unlock()
		for _, r := range reqs {
			if l == nil || l.req != r {
				eng.ReleaseHeld(r)
			}
		}
	}
	if job.room != nil {
		var kv []uint32
		if !failed && len(reqs) > 0 && finish != "abort" {
			kv = reqs[0].Prompt
		}
		job.room.kv <- kv // capacity 1, sent once
		pd.dropRoom(job.roomID, job.room)
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

// splitHostPort splits a side channel address into remote_host and remote_port.
func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return h, port, err
}

// pushReady wakes the Mooncake read waiting for transfer id, if any.
func (pd *pdState) pushReady(id string) {
	pd.mu.Lock()
	ch := pd.pushes[id]
	delete(pd.pushes, id)
	pd.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// mooncakeTake returns transfer id's lease, releasing its blocks, waiting within PDConfig.Wait
// for its prefill when the decode server asks first; nil when the prefill did not hold them
// (it failed, finished otherwise, or the wait ran out). busy: too many reads wait.
func (pd *pdState) mooncakeTake(ctx context.Context, id string) (l *lease, busy bool) {
	pd.mu.Lock()
	if pd.leases[id] != nil {
		pd.mu.Unlock()
		return pd.take(id), false
	}
	ch := pd.pushes[id]
	if ch == nil {
		if len(pd.pushes) >= maxPDEntries {
			pd.mu.Unlock()
			return nil, true
		}
		ch = make(chan struct{})
		pd.pushes[id] = ch
	}
	pd.mu.Unlock()
	t := time.NewTimer(pd.cfg.Wait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	pd.mu.Lock()
	if pd.pushes[id] == ch {
		delete(pd.pushes, id)
	}
	pd.mu.Unlock()
	return pd.take(id), false
}
