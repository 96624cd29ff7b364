// Package indexer answers, for a request's token ids, how many leading blocks each worker's
// KV cache already holds.
//
// It holds the engine-neutral event types (Event, Batch) and the Sink interface that event
// sources (pkg/kvbridge) deliver into, the router-side block keys of DESIGN.md §3, the exact
// positional prefix index fed by those events, the approximate token tree used for workers
// without events, and the short-lived pending overlay. It knows nothing of ZMQ, gRPC or HTTP.
package indexer
