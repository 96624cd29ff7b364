// Package indexer answers, for a request's token ids, how many leading blocks each worker's
// KV cache already holds.
//
// It holds the engine-neutral event types (Event, Batch) and the Sink interface that event
// sources (pkg/kvbridge) deliver into, the router-side block keys of DESIGN.md §3, the exact
// positional prefix index fed by those events, the approximate token tree used for workers
// without events, and the short-lived pending overlay. It knows nothing of ZMQ, gRPC or HTTP.
//
// # Block keys
//
// AppendBlockKeys turns token ids into block keys: XXH3-64 (seed 1337) content hashes over
// little-endian u32 tokens, chained into prefix hashes, with an optional Namespace (LoRA
// adapter, cache salt) mixed into block 0. A key names a block and its whole prefix, so the
// index is positional without storing positions. Hashing is allocation-free given a buffer;
// on little-endian machines the []uint32 is hashed in place.
//
// # Which structure to use
//
//   - Index: workers that publish KV-cache events (ZMQ or gRPC). It is exact: a worker's match
//     is the number of leading request keys it holds with no hole, as its events describe.
//     One Index per model; the caller hashes a request once per block size in use.
//   - Tree: workers with no event stream. It learns from the gateway's own routing (Insert on
//     every routed request) and forgets by a per-worker block budget (LRU) and a TTL, so it
//     is approximate and each gateway replica sees only its own traffic. It answers on the
//     same scale (blocks) as Index, so a mixed fleet scores both kinds of worker together.
//   - Pending: a few seconds of "routed here" entries keyed like Index, for the gap between
//     routing a new prompt and the engine's first stored event; the index confirms an entry
//     simply by catching up with it, and the entry expires after its TTL.
//   - Lookup: the request-side combination of the three, as routing asks it (lookup.go): per
//     candidate worker, the Index or Pending answer for event-fed workers and the Tree's for
//     the others, the maximum over the worker's DP ranks, in blocks of one default size. The
//     Index learns each worker's block size from its stored events; Lookup uses it.
//
// # Index internals and concurrency
//
// Keys live in one open-addressing table (linear probing, 24-byte slots holding the key, a
// bitset of workers 0..63, an index of an overflow bitset for higher worker ids, and a recency
// stamp): one cache miss per looked-up block. Each worker has its own engine-hash → key map
// (also open addressing) for removals and parent lookups. Updates prefetch the slots of a
// whole event before touching them so that cache misses overlap.
//
// The core (table, engine maps) is plain single-goroutine code; Index wraps it in one
// sync.RWMutex. Match holds the read lock for one request (microseconds) and never writes
// except for an atomic recency stamp, stored only when it changes, so concurrent readers do
// not contend. Apply holds the write lock per event, not per batch, so a reader waits at most
// for one event (a few microseconds for typical chains) even while many streams are applied.
// We chose this over sharded locks because a lookup visits keys spread across all shards
// (taking every shard's lock per request costs more than it saves), and over RCU snapshots
// because copying a multi-million-entry table per update is out of the question and
// persistent maps cost several cache misses per lookup. Writers for different workers
// serialise on the lock; one core applies millions of blocks per second, which is far more
// than a fleet's event rate.
//
// Eviction (Config.MaxBlocks) is approximately least-recently-touched: keys are stamped with
// a logical tick (one per Apply) on insert and on lookup hits; when over budget, the index
// samples stamps to choose an age cutoff and sweeps about MaxBlocks/16 of the oldest keys in
// one go. Evicted keys leave stale engine-hash entries behind, which are harmless (a removal
// finds nothing to remove; a child stored after an evicted parent is still placed correctly,
// since the parent's key is known) and are swept once they are numerous.
//
// Blocks an engine stored with extra keys (Event.Extra: multimodal item identifiers) have
// their content hash mixed with those keys' hash (ExtraContentHash, docs/multimodal.md), so a
// block holding an image never shares a key with a text block or another image's block.
package indexer
