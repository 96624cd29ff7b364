// Package policy chooses a worker for each request: pure functions of the request's block
// count, each candidate worker's matched leading blocks and its load (DESIGN.md §5).
//
// cache_aware (the default) follows SMG's rule cascade: imbalance guard, then best match above
// a threshold, then least load. cost minimises a Dynamo-style prefill-plus-load cost.
// round_robin, random, power_of_two and least_load ignore the cache; prefix_hash gives
// stateless affinity by rendezvous hashing of the first block.
package policy
