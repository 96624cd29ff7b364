// Package policy chooses a worker for each request: pure functions of the request's block
// count, each candidate worker's matched leading blocks and its load (DESIGN.md §5).
//
// cache_aware (the default) follows SMG's rule cascade: imbalance guard, then best match above
// a threshold among the workers under a bounded load (so a hot prefix spreads over as many
// workers as its load needs; BoundedLoadFactor 0 is SMG's cascade exactly), then least load.
// cost minimises a Dynamo-style cost in KV blocks: the request's uncached blocks, plus a share
// of the prefill queued on the worker and of the blocks its requests hold while decoding
// (Candidate.Prefill and Active, which Take keeps on the worker from the pick).
// round_robin, random, power_of_two and least_load ignore the cache; prefix_hash gives
// stateless affinity by rendezvous hashing of the first block.
//
// Choosing and building a policy: New(name, cfg) looks the name up in a read-only table (Names
// lists it; there is no registration). Start cfg from DefaultConfig() and decode user config
// onto it, so absent fields keep the documented defaults; each policy validates only the
// fields it reads. Randomness (ties, random, power_of_two, softmax) comes from Config.Rand,
// which tests set to a deterministic source.
//
// Picking for a request: Take(p, req, cands) asks the policy and takes one in-flight request on
// the chosen worker at once (the Result holds it until Done), so requests scored concurrently
// see the load without a gap; Pick alone only chooses (tests, /debug/route). Policies whose Pick
// changes shared state implement Explainer so that explaining a route has no effect.
//
// Which to choose: cache_aware when workers keep a prefix cache (the common case); cost when a
// smooth trade-off between reuse and load is preferred to a threshold; prefix_hash when no
// index is available but affinity still pays; power_of_two or least_load for cache-less
// engines; round_robin and random as baselines. Every Pick is O(workers), takes no lock and
// does not allocate (cost reuses pooled scratch space).
package policy
