// Command simworker is kvgate's CPU-only stand-in for a GPU inference engine (DESIGN.md §8):
// an OpenAI /v1/completions server, an SMG engine gRPC service (--grpc-port, --runtime) and a
// vLLM-style ZMQ KV-event publisher with replay (--kv-events, --kv-replay) over pkg/sim's
// engine model, with --dp-size independent ranks and fault switches for reliability tests.
//
// Choosing --time-scale: wall time = simulated time × F. Each engine keeps its own simulated
// clock, so a process that lacks CPU does not distort simulated latencies (the vllm: metrics);
// it only delivers tokens late, by simworker_engine_lag_seconds (max: ..._lag_max_seconds).
// Clients that measure latency in wall time need that lag small next to the latencies they
// measure: pick F so it stays so (see the cost numbers in docs or the sim issue's report).
//
// Run `simworker --help` for every flag.
package main
