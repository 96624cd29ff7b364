package policy

import (
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Reason is why a worker was chosen; it labels the kvgate_routing_decisions_total metric and is
// shown by /debug/route.
type Reason string

// Reasons. The first seven are the cache_aware cascade of DESIGN.md §5 (overloaded: the best
// match's worker was above the bounded-load limit, so the least-loaded one was chosen), and
// "retry", which the router sets when it re-picks after a failed attempt; the rest name the
// simple policies.
const (
	ReasonCacheHit   Reason = "cache_hit"
	ReasonTreeHit    Reason = "tree_hit"
	ReasonPendingHit Reason = "pending_hit"
	ReasonImbalance  Reason = "imbalance"
	ReasonOverloaded Reason = "overloaded"
	ReasonNoMatch    Reason = "no_match"
	ReasonRetry      Reason = "retry"
	ReasonCost       Reason = "cost"
	ReasonRoundRobin Reason = "round_robin"
	ReasonRandom     Reason = "random"
	ReasonPowerOfTwo Reason = "power_of_two"
	ReasonLeastLoad  Reason = "least_load"
	ReasonPrefixHash Reason = "prefix_hash"
)

// Explain says in a sentence, for /debug/route, what the rule that gave r chose.
func (r Reason) Explain() string {
	switch r {
	case ReasonCacheHit, ReasonTreeHit, ReasonPendingHit:
		return "the longest cached prefix (from the event index, the approximate tree or the pending overlay) among the workers under the load bound (while the fleet is imbalanced, a joining worker say, the bound is the absolute threshold higher for a worker with fewer than that many prompts queued to prefill), ties by lower load"
	case ReasonImbalance:
		return "the least-loaded worker: the fleet is imbalanced (load spread over the absolute and relative thresholds; a joining worker, say) and no worker under the load bound holds the prefix (the bound is then the absolute threshold higher for a worker with fewer than that many prompts queued to prefill; with --bounded-load-factor 0, SMG's cascade: every request while imbalanced)"
	case ReasonOverloaded:
		return "the least-loaded worker: the worker holding the prefix is at or above the load bound, so the prefix spills and is cached here too"
	case ReasonNoMatch:
		return "the least-loaded worker: no worker holds enough of the prompt (cache threshold)"
	case ReasonRetry:
		return "the next-best worker, after the first one failed before its first byte"
	case ReasonCost:
		return "the lowest cost in blocks: uncached prompt blocks, queued prefill and held KV, among the workers under the load bound (while the fleet is imbalanced, the bound is the absolute threshold higher for a worker with fewer than that many prompts queued to prefill, and a worker far behind, a joining one say, does not compete for a prompt such a worker ahead of it holds more of)"
	}
	return "the " + string(r) + " policy's pick"
}

// Candidate is one healthy worker serving the request's model, as the router sees it for one
// request. The router fills a slice of them (reused across requests) and passes it to Pick.
type Candidate struct {
	// Worker is whose load a pick takes (Take); nil when the caller only asks (Pick), as tests
	// of the pure policies do.
	Worker *worker.Worker
	// Key is a stable identity of the worker (e.g. a hash of its URL), used by prefix_hash's
	// rendezvous hashing so that every gateway replica agrees without shared state.
	Key uint64
	// Load is the worker's current load: this gateway's in-flight requests, optionally blended
	// with the engine's own running+waiting count.
	Load int64
	// Matched is the number of leading request blocks the worker holds, from Source.
	Matched int
	Source  indexer.Source
	// Prefill and Active are this gateway's blocks on the worker (worker.PendingPrefill and
	// ActiveBlocks): what its in-flight requests must still prefill, and their prompt blocks.
	// cost weighs them against the prefill a cache hit saves.
	Prefill, Active int64
}

// Request is what a policy knows of the request being routed.
type Request struct {
	// Blocks is the number of full blocks in the request (trailing partial block excluded), at
	// the block size of Candidate.Matched.
	Blocks int
	// FirstBlock is the prefix hash of block 0 (0 when Blocks is 0), for prefix_hash.
	FirstBlock uint64
	// Tokens is the request's prompt length in tokens.
	Tokens int
}

// Decision is a policy's answer: the index into the candidate slice, and why.
type Decision struct {
	Index  int
	Reason Reason
}

// Policy chooses one worker for a request. Pick is called concurrently from many request
// goroutines; cands is non-empty, owned by the caller and must not be retained. Implementations
// do not block and do not allocate. Pick only chooses; Take is how a request claims the worker.
// The policies New builds also implement fmt.Stringer (their name) and, when Pick has side
// effects, Explainer.
type Policy interface {
	Pick(req *Request, cands []Candidate) Decision
}

// Explainer is implemented by policies whose Pick changes shared state (round_robin advances
// its rotation, random draws from the shared source): Explain says which rule Pick would apply,
// without that effect, for /debug/route. Index is -1 when the worker cannot be named without
// picking; note says why in words.
type Explainer interface {
	Explain(req *Request, cands []Candidate) (d Decision, note string)
}

// Result is a decision that holds one in-flight request on the chosen candidate's worker, taken
// by Take and released by Done. Holding the load from the moment of the pick means requests
// scored concurrently already see it. A Result must not be copied after Take: Done releases the
// load exactly once, and further calls do nothing.
type Result struct {
	Decision
	w    *worker.Worker
	hold worker.Hold
	held bool
}

// Prefilled releases the prefill part of the load once the request's first token has arrived
// (the worker has computed its prompt). It is idempotent and does nothing after Done.
func (r *Result) Prefilled() {
	if r.held && r.hold.Prefill != 0 {
		r.w.Prefilled(r.hold.Prefill)
		r.hold.Prefill = 0
	}
}

// Done releases the load the pick took. It is idempotent.
func (r *Result) Done() {
	if r.held {
		r.held = false
		r.w.Release(r.hold)
	}
}

// Take asks p for a decision and takes the request's load on the chosen candidate's Worker
// (none when it is nil): one in-flight request, its Blocks as active KV, and the blocks the
// worker does not hold (Blocks − Matched) as prefill still to do. An out-of-range index from a
// buggy policy is clamped to 0 rather than taking the gateway down. It does not allocate.
func Take(p Policy, req *Request, cands []Candidate) Result {
	d := p.Pick(req, cands)
	if d.Index < 0 || d.Index >= len(cands) {
		d.Index = 0
	}
	r := Result{Decision: d}
	c := &cands[d.Index]
	if c.Worker != nil {
		blocks := int64(max(req.Blocks, 0))
		r.hold = worker.Hold{Prefill: max(blocks-int64(c.Matched), 0), Blocks: blocks}
		c.Worker.Acquire(r.hold)
		r.w, r.held = c.Worker, true
	}
	return r
}
