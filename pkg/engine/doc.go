// Package engine is the gateway's client of one upstream worker: an Engine answers health
// checks, says which model (and LoRA adapters) it serves and how loaded it is, and generates.
//
// Two implementations, chosen by the worker's URL scheme (New):
//
//   - HTTP (http://, https://: vLLM, SGLang, any OpenAI server, the simulator): the client's
//     request is proxied with the model renamed to the engine's own name (and, with
//     Request.ForwardTokenIDs, the gateway's token ids as the prompt); the answer's bytes pass
//     through, with the model name in it changed back to the one the client asked for.
//   - GRPC (grpc://: the SMG engine servicers of vLLM, SGLang and TokenSpeed): Generate with the
//     gateway's token ids, one call per prompt; the generated token ids are detokenized
//     incrementally and turned into OpenAI completion objects (SSE chunks, or one JSON body).
//     The runtime is the spec's, or detected by probing each service's HealthCheck as SMG does;
//     the per-runtime clients live in one table (grpc_runtime.go) keyed by worker.Runtime.
//
// Both hand back a Response whose Body the router copies to the client; the router owns the
// client connection (headers, flushing, the one SSE error path of pkg/openai). An error from
// Generate means nothing was sent and the request may be retried on another worker; a
// *TransportError cause says the worker could not be reached at all.
package engine
