// Package router is the gateway's HTTP surface and its one request pipeline: the public API's
// routes, each an endpoint of the pipeline, the routing decision, retries, the relay of
// responses, the admin and debug API and the request metrics. The wire format lives in
// pkg/openai, the upstream clients in pkg/engine, the workers and their pools in pkg/fleet, the
// index lookup in pkg/indexer, the choice in pkg/policy and the client keys in pkg/clientauth;
// the router runs a request through them.
//
// Two handlers: Handler is the public API (/v1/*, /health, /readiness), behind Config.Clients
// when set; AdminHandler the admin API (/workers, /debug/route), to be served on separate
// listeners (DESIGN.md §11).
//
// A request, file by file: server.go routes it to its endpoint and counts it; pipeline.go runs
// the endpoint (endpoint.go: parse, prompt, write): the body is read and parsed (completions.go,
// chat.go: openai.ParseCompletion, openai.ParseChat), the model resolved to its fleet pool
// (fleet.Snapshot.Resolve) and the prompt turned into token ids with that model's tokenizer or
// chat renderer; route.go picks the worker (the pool's candidates, fleet.Snapshot.Select →
// indexer.Lookup scores them from the event index, pending overlay or tree → policy.Take picks
// and takes the worker's load) and the decision (decision.go) is recorded
// (indexer.Lookup.Record); the worker's engine.Generate sends it (endpoint.go), and relay.go
// copies the response to the client through one write loop (SSE error events via pkg/openai). A
// failure before the first byte is retried once on the next-best worker. Adding an endpoint is
// one more endpoint value (docs/architecture.md).
//
// Models: Config.Models are served each with its own tokenizer, chat renderer and parsers,
// policy and index, kept in its fleet pool (model, modelOf), so that prompts and cached blocks of
// two models never mix. Models[0] is the default model. SetModel and RemoveModel change the
// others while serving.
//
// Lifecycle: New validates a Config and starts nothing; Run runs the fleet's background work
// and returns when it has stopped.
package router
