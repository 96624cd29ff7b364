// Command simworker is kvgate's CPU-only stand-in for a GPU inference engine (DESIGN.md §8):
// an OpenAI /v1/completions and /v1/chat/completions server, an SMG engine gRPC service
// (--grpc-port, --runtime) and a vLLM-style ZMQ KV-event publisher with replay (--kv-events,
// --kv-replay) over pkg/sim's engine model, with --dp-size independent ranks and fault
// switches for reliability tests.
//
// Chat: --tokenizer DIR (a model directory such as .cache/tokenizers/qwen3) renders chat
// requests with the directory's template (chat_template.jinja, else tokenizer_config.json's),
// as `vllm serve DIR` does; --chat-template FILE replaces it (and gives a tokenizer.json FILE
// chat too). --reasoning-parser and --tool-call-parser take vLLM's names and shape chat output
// as vLLM does (reasoning, tool_calls, finish_reason "tool_calls"); with --reply-file they make
// an HTTP simulator answer like a vLLM with those flags, which is what the gateway's gRPC path
// must reproduce. Without --tool-call-parser tool_choice other than "none" is refused, as by
// vLLM without --enable-auto-tool-choice. A multimodal directory's media placeholders are
// expanded with pkg/chat's family rules (the gateway's), each item keyed by its uuid (else a
// SHA-256 of its bytes or URL) in the blocks' digests and the events' extra_keys
// (--kv-extra-keys pairs, vLLM's current [mm_hash, offset] form, or ids, bare hashes).
//
// Choosing --time-scale: wall time = simulated time × F. Each engine keeps its own simulated
// clock, so a process that lacks CPU does not distort simulated latencies (the vllm: metrics);
// it only delivers tokens late, by simworker_engine_lag_seconds (max: ..._lag_max_seconds).
// Clients that measure latency in wall time need that lag small next to the latencies they
// measure. Measured on the shared 2-core dev machine (load 5–6), three simulators serving
// the DESIGN §9 workload (1800 requests, 1050-token prompts, 128 output tokens, 32 req/s
// simulated, streaming): F=1: 64 s wall, 0.12 cores; F=0.5: 32 s, 0.18 cores, max lag
// 0.02 s; F=0.1: 6.5 s, 0.58 cores, lag 1.2 s; F=0.05: 3.6 s, 0.61 cores, lag 8 s (client
// TTFT 3-4× the engine's). With the default costs, round robin saturates near 40 req/s.
//
// Run `simworker --help` for every flag.
package main
