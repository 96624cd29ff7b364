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
// The fleet (fleet.go, member.go): AddWorker builds a member (engine client, index IDs, one per
// DP rank); Run starts each member's health loop (health.go: health checks, model discovery,
// engine-load scrapes) and its event source (events.go: kvbridge.NewSource, or the --kv-listen
// collector by topic). The fleet is an immutable snapshot read without locks; changes build a
// new one. RemoveWorker stops the member, waits for the collector and drops its blocks.
//
// Lifecycle: New validates a Config and starts nothing; Run owns every background goroutine and
// returns when they have exited.
package router
