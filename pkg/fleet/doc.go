// Package fleet is the set of workers a gateway routes to (DESIGN.md §12): where each worker
// came from, which model's pool it serves, its engine client, its health, its engine load and
// its KV-event stream, and its drain when it leaves. The router reads it through a Snapshot and
// chooses among Snapshot.Select's candidates; nothing here decides where a request goes.
//
// Files, in the order a worker lives through them:
//   - fleet.go: Config, New, Run, and membership by origin. Workers come from origins (flag,
//     file, admin, a DNS discovery's "dns NAME"); SyncWorkers sets one origin's workers and
//     reconcileLocked moves the fleet there, building a Member (engine client, index IDs, one
//     per DP rank) for each new URL in the pool its spec names. The first origin to list a URL
//     owns it.
//   - pool.go: one Pool per model, each with its own index, tree and pending overlay
//     (indexer.Lookup) and an opaque Routing value its owner (the router) keeps there; the
//     first pool is the default one, which takes every worker whose spec names no other.
//     SetPool and RemovePool change them while serving; the workers they concern are rebuilt.
//   - snapshot.go: the immutable state every request reads without locks: Resolve (model →
//     pool and LoRA namespace), Select (the candidates of one request, and why there are
//     none), DefaultModel.
//   - member.go: the per-worker state (Member) and what routing asks of it: LookupWorker,
//     EventFed, MarkDown after a failed request.
//   - health.go: each member's health loop: health checks, model discovery, engine-load
//     scrapes. A worker that turns unhealthy has its cached blocks forgotten.
//   - events.go: each member's event source (kvbridge.NewSource), and the --kv-listen
//     collector, which attributes batches to members by topic.
//   - drain.go: a worker that leaves is routed no more, its in-flight requests finish (for at
//     most DrainTimeout), then its goroutines stop and its blocks leave the index (teardown).
//     RemoveWorker removes one at once, without a drain.
//   - ready.go: readiness; metrics.go: the per-worker gauges, read from the snapshot at scrape
//     time.
//
// Lifecycle: New validates and starts nothing; Run owns every background goroutine and returns
// when they have exited. Workers added before Run start with it.
package fleet
