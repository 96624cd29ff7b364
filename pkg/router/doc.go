// Package router is the gateway itself: the OpenAI-compatible HTTP API (POST /v1/completions,
// GET /v1/models), health and readiness, the admin API (/workers) and /debug/route, the worker
// registry with health checks and engine-load scrapes, the routing decision, and the two worker
// clients.
//
// Routing (DESIGN.md §4–§5): a request's prompt is tokenized (or taken as token ids), cut into
// block keys per worker block size, and each healthy candidate is scored: workers with a
// KV-event stream from the exact event index (max over DP ranks) overlaid with the pending
// blocks of requests just routed there; workers without one (no kv_events, gRPC UNIMPLEMENTED,
// or --kv-index off) from the approximate token tree. Scores share one scale (blocks of the
// default size), so a mixed fleet is compared fairly. The Policy picks; the decision is
// recorded in the pending overlay or the tree, counted by reason, and shown in the
// X-Kvgate-Worker and X-Kvgate-Matched-Blocks response headers.
//
// Worker clients: http:// workers get the client's body proxied (model renamed to the
// worker's own name; token ids as the prompt with ForwardTokenIDs) and their answer streamed
// back with a flush per read for SSE. grpc:// workers (SMG engine servicers: vLLM, SGLang,
// TokenSpeed) get Generate with token ids; their output is detokenized incrementally into
// OpenAI chunks, and a dropped client sends Abort. A failure before the first byte is retried
// once on the next-best worker; after it, an SSE stream ends with one OpenAI error event.
//
// Lifecycle: New validates a Config and starts nothing; AddWorker/RemoveWorker change the
// fleet (an immutable snapshot read without locks); Run owns every background goroutine
// (health loops, event sources, the --kv-listen collector) and returns when they have exited.
package router
