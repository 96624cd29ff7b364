package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// vLLM MooncakeConnector pairs (wire/pd.md §3): the router mints a transfer_id, the prefill
// leg carries it (and NIXL's one-token body changes), the decode leg names it with the prefill
// engine's id and bootstrap server, and the prefill engine pushes the KV when the decode
// engine asks for it. The engine id is read from the prefill worker's bootstrap server (GET
// /query) and cached per worker. The legs run at once, as vLLM's example proxy and llm-d send
// them (the decode engine waits for the push): failures map as for SGLang's concurrent pairs.

// mooncakeQueryTimeout bounds one GET /query on a prefill worker's bootstrap server.
const mooncakeQueryTimeout = 2 * time.Second

// maxMooncakeQuery bounds the /query answer read (one entry per DP rank).
const maxMooncakeQuery = 1 << 20

// maxMooncakeEngines bounds the cache: past it, it starts over (workers come and go).
const maxMooncakeEngines = 4096

// mooncakeEngine is a prefill worker's bootstrap server as /query described it.
type mooncakeEngine struct {
	id   string // the engine id of rank 0 (or the lowest rank listed)
	rank int    // that rank
	dp   bool   // several DP ranks: the prefill leg is pinned to rank (X-data-parallel-rank)
}

// mooncakeEngines caches each prefill worker's engine id, keyed by its bootstrap address;
// the zero value is ready. An entry is dropped when a pair through it fails, so the next pair
// asks again (the engine may have restarted with another id).
type mooncakeEngines struct {
	client *http.Client // nil: one with mooncakeQueryTimeout
	mu     sync.Mutex
	byAddr map[string]mooncakeEngine
}

// lookup returns the engine behind bootstrap address addr ("http://host:port"), from the
// cache or its /query.
func (m *mooncakeEngines) lookup(ctx context.Context, addr string) (mooncakeEngine, error) {
	m.mu.Lock()
	e, ok := m.byAddr[addr]
	m.mu.Unlock()
	if ok {
		return e, nil
	}
	e, err := m.query(ctx, addr)
	if err != nil {
		return e, err
	}
	m.mu.Lock()
	if m.byAddr == nil || len(m.byAddr) >= maxMooncakeEngines {
		m.byAddr = map[string]mooncakeEngine{}
	}
	m.byAddr[addr] = e
	m.mu.Unlock()
	return e, nil
}

// forget drops addr's cached engine.
func (m *mooncakeEngines) forget(addr string) {
	m.mu.Lock()
	delete(m.byAddr, addr)
	m.mu.Unlock()
}

// query asks addr's bootstrap server for its engines: an object keyed by DP rank, each with
// an engine_id (wire/pd.md §3).
func (m *mooncakeEngines) query(ctx context.Context, addr string) (mooncakeEngine, error) {
	ctx, cancel := context.WithTimeout(ctx, mooncakeQueryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/query", nil)
	if err != nil {
		return mooncakeEngine{}, err
	}
	client := m.client
	if client == nil {
		client = &http.Client{Timeout: mooncakeQueryTimeout}
	}
	resp, err := client.Do(req)
	if err != nil {
		return mooncakeEngine{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMooncakeQuery+1))
	if err != nil {
		return mooncakeEngine{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return mooncakeEngine{}, fmt.Errorf("GET %s/query answered %d", addr, resp.StatusCode)
	}
	if len(body) > maxMooncakeQuery {
		return mooncakeEngine{}, fmt.Errorf("GET %s/query: answer larger than %d bytes", addr, maxMooncakeQuery)
	}
	return parseMooncakeQuery(body)
}

// parseMooncakeQuery reads a /query answer: the lowest rank's engine id.
func parseMooncakeQuery(body []byte) (mooncakeEngine, error) {
	var ranks map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if err := json.Unmarshal(body, &ranks); err != nil {
		return mooncakeEngine{}, fmt.Errorf("bootstrap /query answer: %w", err)
	}
	out := mooncakeEngine{rank: -1, dp: len(ranks) > 1}
	for k, v := range ranks {
		r, err := strconv.Atoi(k)
		if err != nil || r < 0 {
			return mooncakeEngine{}, fmt.Errorf("bootstrap /query answer: rank %q is not a number", k)
		}
		if out.rank < 0 || r < out.rank {
			out.rank, out.id = r, v.EngineID
		}
	}
	switch {
	case out.rank < 0:
		return mooncakeEngine{}, errors.New("bootstrap /query answer lists no rank")
	case out.id == "":
		return mooncakeEngine{}, fmt.Errorf("bootstrap /query answer: rank %d has no engine_id", out.rank)
	}
	return out, nil
}

// mooncakeBootstrapAddr is a prefill worker's bootstrap server as remote_bootstrap_addr: its
// host and its spec's bootstrap_port (default 8998, VLLM_MOONCAKE_BOOTSTRAP_PORT's).
func mooncakeBootstrapAddr(pw *worker.Worker) string {
	host := ""
	if u, err := url.Parse(pw.URL()); err == nil {
		host = u.Hostname()
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(bootstrapPort(pw)))
}

// mooncakePrefillParams and mooncakeDecodeParams are the legs' kv_transfer_params, in the
// key order of wire/pd.md §3.
type mooncakePrefillParams struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	TransferID      string `json:"transfer_id"`
}

type mooncakeDecodeParams struct {
	DoRemoteDecode      bool   `json:"do_remote_decode"`
	DoRemotePrefill     bool   `json:"do_remote_prefill"`
	TransferID          string `json:"transfer_id"`
	RemoteEngineID      string `json:"remote_engine_id"`
	RemoteBootstrapAddr string `json:"remote_bootstrap_addr"`
}

// newTransferID mints a pair's transfer_id: "xfer-" and a random (version 4) UUID.
func (pl *Pipeline) newTransferID() string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := pl.rand()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("xfer-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// pairMooncake runs a vLLM Mooncake pair: the prefill worker's engine id from its bootstrap
// server, then both legs at once (pairConcurrent; failed is its result). It reports false,
// having released the prefill worker, when the bootstrap server cannot be asked (the request
// then runs whole on the decode worker, counted as bootstrap_query_failed).
func (pl *Pipeline) pairMooncake(ctx context.Context, w http.ResponseWriter, c *Call, ep *Endpoint, ddec, pdec *Decision, hdr http.Header) (answered bool, failed *pairFailure) {
	pw := pdec.m.Worker()
	addr := mooncakeBootstrapAddr(pw)
	eng, err := pl.mooncake.lookup(ctx, addr)
	if err != nil {
		pl.done(c, pdec)
		pl.log.Warn("mooncake bootstrap query failed; running the request whole", zap.String("prefill_worker", pw.URL()), zap.String("error", err.Error()))
		w.Header().Del(HeaderPrefillWorker) // a retried pair's first prefill worker
		pl.countPD(w, c, pdQueryFailed)
		return false, nil
	}
	xfer := pl.newTransferID()
	pp, _ := json.Marshal(mooncakePrefillParams{DoRemoteDecode: true, TransferID: xfer})
	dp, _ := json.Marshal(mooncakeDecodeParams{DoRemotePrefill: true, TransferID: xfer, RemoteEngineID: eng.id, RemoteBootstrapAddr: addr})
	p := c.Req
	// An HTTP worker takes the legs as body edits, a grpc:// (vLLM) one as PD: the same
	// parameters in kv_transfer_params_json, the prefill leg's settings as NIXL's.
	p.Header, p.Edits = hdr, prefillEdits(c, c.Req.Edits, pp)
	p.PD = &engine.PDLeg{Prefill: true, KVTransferParams: pp}
	if eng.dp {
		// The engine id is the rank's: pin the prefill leg to it, as llm-d does.
		p.SetHeader = http.Header{"X-Data-Parallel-Rank": {strconv.Itoa(eng.rank)}}
		rank := int32(eng.rank)
		p.PD.DataParallelRank = &rank
	}
	d := *c
	d.Req.Header, d.Req.PD = hdr, &engine.PDLeg{KVTransferParams: dp}
	d.Req.Edits = append(slices.Clip(c.Req.Edits), openai.Edit{Key: "kv_transfer_params", Value: dp})
	return true, pl.pairConcurrent(ctx, w, c, ep, ddec, pdec, &p, &d, func() { pl.mooncake.forget(addr) })
}
