package engine

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Prefill/decode legs over the engines' gRPC interfaces (wire/pd.md §5, wire/smg-grpc.md
// §§3.4, 4.3, 5.2). HTTP workers get a pair's fields as body edits (Request.Edits); gRPC
// workers get them as Generate fields from Request.PD.

// PDLeg is one leg of a prefill/decode pair as gRPC workers take it.
type PDLeg struct {
	// Prefill makes the call a vLLM NIXL prefill leg, as SMG sends it: max_tokens 1,
	// min_tokens 0, n 1, stop strings and stop_token_ids cleared, ignore_eos, not streamed.
	Prefill bool
	// KVTransferParams is vLLM's GenerateRequest field 8 (kv_transfer_params_json), a JSON
	// object sent verbatim: the prefill flags, or the prefill answer's hand-off. nil: none.
	KVTransferParams json.RawMessage
	// Bootstrap is SGLang's disaggregated_params (field 10) or TokenSpeed's kv_bootstrap_info
	// (field 11), the same on both legs. nil: none.
	Bootstrap *Bootstrap
	// DataParallelRank is vLLM's GenerateRequest field 9 (data_parallel_rank), the gRPC form
	// of the X-Data-Parallel-Rank header: it pins a Mooncake prefill leg to the DP rank whose
	// engine id the decode leg names. nil: none.
	DataParallelRank *int32
}

// Bootstrap is an SGLang-style rendezvous: the prefill worker's bootstrap server and a room.
type Bootstrap struct {
	Host string
	Port int
	// Room is the first prompt's room; prompt i of a request gets Room+i, as SGLang expands a
	// scalar room over a batch, wrapped into the runtime's range (SGLangRoomLimit,
	// TokenSpeedRoomLimit).
	Room uint64
}

// Room limits: a room is drawn in [0, limit). SGLang's DisaggregatedParams.bootstrap_room is an
// int32 (SMG draws [0, 2^31-1)); TokenSpeed's KvBootstrapInfo.bootstrap_room an int64.
const (
	SGLangRoomLimit     = 1<<31 - 1
	TokenSpeedRoomLimit = 1<<63 - 1
)

// roomOf returns prompt i's room under limit.
func (b *Bootstrap) roomOf(i int, limit uint64) uint64 { return (b.Room%limit + uint64(i)) % limit }

// PDRuntimeSupports reports whether a gRPC worker of runtime rt carries the legs of a pair
// of the given style: vLLM carries kv_transfer_params_json (nixl true: NIXL's and
// Mooncake's parameters), SGLang and TokenSpeed the bootstrap rendezvous (nixl false). An
// unknown runtime carries neither.
func PDRuntimeSupports(rt worker.Runtime, nixl bool) bool {
	if nixl {
		return rt == worker.RuntimeVLLM
	}
	return rt == worker.RuntimeSGLang || rt == worker.RuntimeTokenSpeed
}

// ErrPDNotSupported is the answer for a pair leg a gRPC worker's runtime cannot carry.
func ErrPDNotSupported(rt worker.Runtime) *openai.Error {
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "runtime_pd_not_supported",
		Message: "prefill/decode disaggregation is not supported over gRPC for runtime " + string(rt) + " with this transfer (vLLM: nixl, mooncake; SGLang, TokenSpeed: bootstrap)"}
}

// checkPD refuses a leg the runtime cannot carry.
func checkPD(rt worker.Runtime, leg *PDLeg) *openai.Error {
	if leg == nil {
		return nil
	}
	nixl := leg.Prefill || leg.KVTransferParams != nil || leg.DataParallelRank != nil
	if (nixl && leg.Bootstrap != nil) || (nixl || leg.Bootstrap != nil) && !PDRuntimeSupports(rt, nixl) {
		return ErrPDNotSupported(rt)
	}
	return nil
}

// prefillLeg applies a NIXL prefill leg's settings to g and its body's parameters.
func prefillLeg(g *genRequest, p *bodyParams) {
	g.stream, g.maxTokens, g.minTokens, g.n = false, 1, 0, 1
	g.stop, g.stopTokenIDs, g.ignoreEOS = nil, nil, true
	p.stream, p.n, p.stops = false, 1, nil
}

// handoff returns a vLLM prefill's GenerateComplete field 12 as the decode leg's field 8: the
// bytes verbatim when they are a JSON object (the servicer refuses anything else in field 8),
// else nil, as for an answer without one.
func handoff(s string) json.RawMessage {
	b := bytes.TrimSpace([]byte(s))
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(s)
}

// bootstrap returns the leg's rendezvous (nil without a leg or one).
func (l *PDLeg) bootstrap() *Bootstrap {
	if l == nil {
		return nil
	}
	return l.Bootstrap
}
