package pipeline

import (
	"fmt"
	"net/http"

	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/policy"
)

// Decision is the outcome of routing one request. It holds the worker's load from the pick
// (pick.Done releases it) and so must not be copied.
type Decision struct {
	pick    policy.Result
	m       *fleet.Member
	reason  policy.Reason
	matched int            // leading blocks the worker holds, at its own block size
	bs      int            // the worker's block size (of matched and keys)
	source  indexer.Source // where matched came from
	lw      indexer.LookupWorker
	keys    []uint64 // request block keys at the worker's block size (scratch-owned)
	ns      string   // the keys' namespace: the LoRA adapter requested, "" for a base model
}

// record notes the decision in the worker's pool (indexer.Lookup.Record: the pending overlay
// for an event-fed worker, else the approximate tree) as the request is sent.
func (d *Decision) record(tokens []uint32) {
	d.m.Pool().Lookup().Record(d.lw, d.keys, tokens, d.ns)
}

// routeScratch holds the per-request buffers of route; taken from Pipeline.scratch so that the
// hot path does not allocate.
type routeScratch struct {
	dec     Decision // the request's decision (serve)
	sel     fleet.Selection
	workers []indexer.LookupWorker // the admission scorer's (route's are sel.Lookup)
	scores  []indexer.Score
	cands   []policy.Candidate
	lookup  indexer.LookupScratch
	req     policy.Request
	// ids and members are the workers the admission queue's Score found holding the request's
	// prompt (scorer): their WorkerIDs, and the members among them it scores.
	ids     []indexer.WorkerID
	members []*fleet.Member
	// disagg is set when the last route's pool has role=prefill workers (healthy or not): it
	// runs disaggregated (pd.go).
	disagg bool
	// also, when set, is excluded from the next route besides its exclude argument (a pair's
	// retried prefill leg avoids both the failed prefill worker and the decode worker); route
	// clears it.
	also *fleet.Member
}

// RouteError classifies why no worker could be chosen.
func RouteError(model string, known, full bool) *openai.Error {
	switch {
	case !known:
		return &openai.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("the model %q does not exist", model), Type: openai.TypeNotFound, Param: "model", Code: "model_not_found"}
	case full:
		return &openai.Error{Status: http.StatusTooManyRequests, Message: "every worker is at its in-flight limit", Type: openai.TypeRateLimit, Code: "no_capacity"}
	}
	return &openai.Error{Status: http.StatusServiceUnavailable, Message: "no healthy worker serves the model", Type: openai.TypeUnavailable, Code: "no_healthy_worker"}
}

// legKind says which workers of a pool a route chooses among (wire/pd.md, DESIGN.md §15).
type legKind uint8

const (
	// legWhole is a whole request or the decode leg of a pair: workers of role decode or both.
	legWhole legKind = iota
	// legPrefill is the prefill leg of a pair: workers of role prefill or both.
	legPrefill
)
