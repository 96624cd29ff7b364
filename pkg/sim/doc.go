// Package sim is the engine model behind cmd/simworker: a CPU-only stand-in for a GPU
// inference engine that is faithful in everything a gateway can observe (DESIGN.md §8).
//
// Layers, from the inside out (the first two are unexported):
//   - cache: a paged KV cache with prefix caching modelled on vLLM's V1 block pool. Blocks are
//     named by SHA-256 digests chained over the parent digest and the block's token ids
//     (BlockHash; published folded to 64 bits, or as bytes). Running requests hold references;
//     unreferenced blocks wait in one LRU free queue, released tail-first so that the end of a
//     chain is evicted before its head.
//   - core: a vLLM-V1-style continuous-batching scheduler (waiting queue, max running
//     sequences, per-step token budget with chunked prefill, recompute preemption) over one
//     cache, in simulated time. A step costs overhead + prefill tokens × per-token cost +
//     sequences × per-sequence cost; a request only prefills its uncached tokens, so TTFT
//     emerges from queueing and cache hits. core is a plain single-goroutine type: the
//     package's tests drive it directly with simulated time.
//   - Engine: runs one core per DP rank against the wall clock (wall = simulated × TimeScale),
//     sleeping on a real timer for each step, delivering tokens to Streams and handing each
//     step's KV events, as one batch, to an EventSink.
//   - Surfaces: Server (OpenAI /v1/completions and /v1/chat/completions, /v1/models, /health,
//     vLLM-named /metrics, /debug/cache, /reset_prefix_cache), GRPCServer (the SMG engine service of one runtime,
//     with SubscribeKvEvents served by a kvbridge.BridgeServer), and the event sinks ZMQSink
//     (vLLM-style ZMQ PUB + ROUTER replay through kvbridge.Publisher, with fault switches) and
//     ConsumerSink (feeds any kvbridge Consumer-like, e.g. the gRPC bridge).
//
// Which to use: this package's tests of scheduling or caching behaviour drive core with
// simulated time; tests that need a live worker use Engine + Server (+ GRPCServer, + ZMQSink)
// on loopback, or the simworker binary for real-process tests.
//
// Chat (http_chat.go): a chat body is validated with openai.ParseChat and rendered by
// ServerConfig.Chat (a *chat.Renderer of the model directory: its template, its tokenizer,
// wire/vllm-chat.md), and the rendered ids run through the same engines as a completion, so the
// prefix cache, its KV events and usage.prompt_tokens_details.cached_tokens see exactly the ids
// a gateway routing with the same renderer computes. Responses are vLLM's chat.completion and
// chat.completion.chunk shapes (pkg/openai's types); ServerConfig.ChatParsers (vLLM's
// --reasoning-parser and --tool-call-parser) split the output into content, reasoning (written
// as "reasoning", the field current vLLM writes) and tool_calls, as the gateway does for gRPC
// workers (parse.InfoFor, parse.ResponseRole, parse.Output). Without a renderer chat answers vLLM's 400 for a
// model without a template. Without max_tokens a chat answer may fill the context, as in vLLM.
// A chat with media (a multimodal model directory) runs the ids chat.Renderer.Expand gives (the
// gateway's family rules) with each item's range keyed by its uuid, else a SHA-256 of its bytes
// or URL (Request.Media): those keys enter the blocks' digests and their BlockStored events'
// extra_keys (ZMQSink, kvbridge.EncodeOptions.ExtraKeys), as vLLM keys multimodal blocks.
//
// Output tokens are deterministic: a splitmix64 stream per request seeded from the client's
// seed or the prompt (seedFor), never an EOS id, so the output length is max_tokens unless a
// stop token id or stop string ends it. A Replies script replaces the stream with a fixed
// reply whose end stands for the model's EOS (ignore_eos and min_tokens carry generation past
// it with sampled tokens, as they would past a real EOS). Latency metrics are in simulated
// seconds.
//
// Prefill/decode roles (ServerConfig.PD, pd.go) are one engine's on both surfaces: a
// GRPCServer given the HTTP server (GRPCConfig.Pairs) runs vLLM NIXL legs from
// kv_transfer_params_json (the hand-off in GenerateComplete field 12) and SGLang or TokenSpeed
// rooms from disaggregated_params or kv_bootstrap_info, with the HTTP server's leases, rooms,
// side channel and bootstrap server.
package sim
