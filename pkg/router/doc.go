// Package router is the gateway itself: the HTTP server and its routes, the fleet, the routing
// decision, retries, the admin and debug API and the metrics. The wire format lives in
// pkg/openai, the upstream clients in pkg/engine, the index lookup in pkg/indexer, the choice in
// pkg/policy and the event sources in pkg/kvbridge; the router wires them together.
//
// Two handlers: Handler is the public API (/v1/*, /health, /readiness), AdminHandler the admin
// API (/workers, /debug/route), to be served on separate listeners (DESIGN.md §11). On the
// public one, auth.go checks the client key of every request but the probes (keys.go: the key
// file format, constant-time matching) and limits.go admits it against its key's rate and
// concurrency limits, before the mux sees it.
//
// A request, file by file: server.go routes it and counts it; completions.go reads and parses
// the body (openai.ParseCompletion) and tokenizes text prompts; route.go picks the worker
// (eligible workers → indexer.Lookup scores them from the event index, pending overlay or tree →
// policy.Take picks and takes the worker's load) and commit records the decision in the pending
// overlay or the tree; completions.go's send calls the worker's engine.Generate, and relay.go
// copies the response to the client through one write loop (SSE error events via pkg/openai).
// A failure before the first byte is retried once on the next-best worker.
//
// Models (pool.go): each model is a pool of workers with its own tokenizer, chat renderer and
// parsers, policy and index, tree and pending overlay, so that prompts and cached blocks of two
// models never mix. The default pool is Config's own fields (the workers whose spec names no
// configured model, served exactly as with no models at all); Config.Models, SetModel and
// RemoveModel add the others. A request's model picks its pool (fleet.resolve) before it is
// tokenized or rendered, and route considers that pool's workers only.
//
// The fleet (fleet.go, member.go, drain.go): workers come from origins (flag, file, admin, a
// DNS discovery's "dns NAME"); SyncWorkers sets one origin's workers and reconcileLocked moves
// the fleet there, building a member (engine client, index IDs, one per DP rank) for each new
// URL in the pool its spec names. Run starts each member's health loop (health.go: health
// checks, model discovery, engine-load scrapes) and its event source (events.go:
// kvbridge.NewSource, or the --kv-listen collector by topic). A worker that leaves drains: it
// is routed no more, its in-flight requests finish (for at most DrainTimeout), then its
// goroutines stop and its blocks leave the index. The fleet, with the pools, is an immutable
// snapshot read without locks; changes build a new one. RemoveWorker (the admin API's DELETE)
// removes a worker at once, without a drain.
//
// Lifecycle: New validates a Config and starts nothing; Run owns every background goroutine and
// returns when they have exited.
package router
