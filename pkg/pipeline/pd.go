package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Prefill/decode disaggregation (wire/pd.md, DESIGN.md §15). A pool with role=prefill workers
// runs each request as a pair when it pays: the decode worker is routed first (by the decode
// policy, among decode and both workers: it is the one the request would run on whole), then,
// unless the prompt is short or the decode worker already holds all but a few of its tokens,
// a prefill worker (by the prefill policy, cache-aware on the pool's event index) gets the
// prefill leg. vLLM NIXL pairs run sequentially (the prefill answer's kv_transfer_params go
// into the decode body verbatim), SGLang pairs concurrently (one bootstrap room in both
// bodies), vLLM Mooncake pairs concurrently too (a router-minted transfer_id in both, the
// prefill engine's id from its bootstrap server in the decode leg's: pd_mooncake.go). grpc:// workers take the same pairs as Generate fields (engine.PDLeg: vLLM's
// kv_transfer_params_json, SGLang's disaggregated_params, TokenSpeed's kv_bootstrap_info), and
// a pair may mix HTTP and gRPC legs. The decode worker's answer is the client's.

// Transfer styles of PD.Transfer (wire/pd.md §1).
const (
	PDTransferNIXL     = "nixl"
	PDTransferSGLang   = "sglang"
	PDTransferMooncake = "mooncake" // vLLM MooncakeConnector: router-minted transfer_id, concurrent legs
)

// Defaults of PD fields left zero.
const (
	DefaultPDMinUncachedTokens = 256
	DefaultPDTimeout           = 60 * time.Second
)

// PD configures a model's prefill/decode disaggregation. It takes effect when the model's pool
// has role=prefill workers; the zero value takes the defaults.
type PD struct {
	// PrefillPolicy picks the prefill worker, DecodePolicy the decode worker (and the worker of
	// a request run whole in a disaggregated pool). nil: the model's Policy.
	PrefillPolicy, DecodePolicy policy.Policy
	// Transfer is PDTransferNIXL, PDTransferMooncake or PDTransferSGLang; "" takes it from
	// each prefill worker's runtime (sglang, tokenspeed: bootstrap rooms, otherwise NIXL:
	// Mooncake is only ever chosen).
	Transfer string
	// MinUncachedTokens: a prompt shorter than this, or one the decode worker holds all but
	// fewer than this many tokens of, runs whole on the decode worker (0: the default 256;
	// negative: every request is split).
	MinUncachedTokens int
	// Timeout bounds the prefill leg: its answer (NIXL) or its whole call (SGLang, whose
	// decode leg waits for it). 0: DefaultPDTimeout.
	Timeout time.Duration
}

// pdState is the pipeline's resolved PD of a model.
type pdState struct {
	prefill, decode policy.Policy
	transfer        string
	minUncached     int
	timeout         time.Duration
}

// newPDState validates pd and fills its defaults from the model's policy.
func newPDState(pd PD, def policy.Policy) (pdState, error) {
	switch pd.Transfer {
	case "", PDTransferNIXL, PDTransferSGLang, PDTransferMooncake:
	default:
		return pdState{}, fmt.Errorf("pd transfer %q is not nixl, mooncake or sglang", pd.Transfer)
	}
	if pd.Timeout < 0 {
		return pdState{}, errors.New("pd timeout must not be negative")
	}
	st := pdState{prefill: pd.PrefillPolicy, decode: pd.DecodePolicy, transfer: pd.Transfer, minUncached: pd.MinUncachedTokens, timeout: pd.Timeout}
	if st.prefill == nil {
		st.prefill = def
	}
	if st.decode == nil {
		st.decode = def
	}
	if st.minUncached == 0 {
		st.minUncached = DefaultPDMinUncachedTokens
	}
	if st.timeout == 0 {
		st.timeout = DefaultPDTimeout
	}
	return st, nil
}

// transferOf returns the transfer style of a pair with worker m (either leg's: the runtime
// of a fleet's workers is the same engine's): its spec's runtime, else the one its grpc://
// engine detected; SGLang and TokenSpeed pair by bootstrap room.
func (p *pdState) transferOf(m *fleet.Member) string {
	if p.transfer != "" {
		return p.transfer
	}
	rt := m.Worker().Spec().Runtime
	if rt == "" {
		rt = m.Engine().Runtime()
	}
	if rt == worker.RuntimeSGLang || rt == worker.RuntimeTokenSpeed {
		return PDTransferSGLang
	}
	return PDTransferNIXL
}

// Split outcomes: why a request of a disaggregated pool ran as a pair or whole. They label
// kvgate_pd_requests_total and the X-Kvgate-Pd header.
const (
	pdPair          = "pair"
	pdShortPrompt   = "short_prompt"      // fewer prompt tokens than MinUncachedTokens
	pdDecodeCached  = "decode_cached"     // the decode worker holds all but fewer than MinUncachedTokens
	pdNoPrefill     = "no_prefill_worker" // no prefill worker can take it
	pdMultiple      = "multiple_outputs"  // NIXL or Mooncake with n > 1 or several prompts: decode alone (as SMG)
	pdPrefillFailed = "prefill_failed"    // the prefill leg failed on every try: run whole
	// A leg's grpc:// worker speaks a runtime that cannot carry the pair's transfer (vLLM
	// carries NIXL, SGLang and TokenSpeed bootstrap rooms): the client gets a 400.
	pdNotSupported = "runtime_pd_not_supported"
	// Mooncake: the prefill worker's bootstrap server did not tell its engine id (GET /query
	// failed): the request runs whole on the decode worker.
	pdQueryFailed = "bootstrap_query_failed"
	// NIXL: the decode engine refused the pair's transfer (a server error before answering,
	// its KV read from the prefill worker having failed): run whole on it.
	pdTransferFailed = "transfer_failed"
)

// Response headers of a disaggregated pool's requests.
const (
	// HeaderPrefillWorker names the prefill worker of a pair.
	HeaderPrefillWorker = "X-Kvgate-Prefill-Worker"
	// HeaderPD says how the request ran: pair, or why it ran whole (the split outcomes).
	HeaderPD = "X-Kvgate-Pd"
)

// splitReason decides whether a request pays to split (DESIGN.md §15): tokens is the prompt's
// length, cached how many of its leading tokens the decode worker holds.
func splitReason(tokens, cached, minUncached int) string {
	switch {
	case minUncached < 0:
		return pdPair
	case tokens < minUncached:
		return pdShortPrompt
	case tokens-cached < minUncached:
		return pdDecodeCached
	}
	return pdPair
}
