// Package pipeline is the gateway's one request pipeline: every endpoint of the public API is
// an Endpoint value (parse, prompt, write) that Handle runs through the same stages, over the
// workers of a fleet (pkg/fleet). The wire formats live in pkg/openai and its siblings, the
// endpoints in pkg/endpoint, the HTTP surface in pkg/router; the pipeline knows no route path.
//
// A request, file by file: pipeline.go reads and parses the body (Endpoint.Parse), resolves
// the model to its fleet pool (fleet.Snapshot.Resolve) and makes the prompt's token ids
// (Endpoint.Prompt, with prompt.go's PromptTokens and RenderChat; media.go for requests with
// images); admission.go admits it, through the pool's queue while every worker is at its
// bound (pkg/admission); route.go picks the worker (the pool's candidates, fleet.Snapshot.Select
// → indexer.Lookup scores them from the event index, pending overlay or tree → policy.Take
// picks and takes the worker's load) and the decision (decision.go) is recorded
// (indexer.Lookup.Record); a disaggregated pool runs it as a prefill/decode pair (pd.go,
// pd_legs.go); the worker's engine.Generate sends it (endpoint.go), and relay.go copies the
// response to the client through one write loop (SSE error events via pkg/openai). A failure
// before the first byte is retried once on the next-best worker. tracing.go traces the stages
// when Config.Tracing is set; explain.go answers /debug/route from the same selection and
// scoring.
//
// Models: Config.Models are served each with its own tokenizer, chat renderer and parsers,
// policy and index, kept in its fleet pool (model.go: Served), so that prompts and cached
// blocks of two models never mix. Models[0] is the default model.
//
// Lifecycle: New validates a Config and starts nothing; Run runs the fleet's background work
// and the admission queues' hand-offs, and returns when it has stopped.
package pipeline
