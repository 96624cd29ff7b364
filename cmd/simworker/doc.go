// Command simworker is kvgate's CPU-only stand-in for a GPU inference engine (DESIGN.md §8):
// an OpenAI /v1/completions server, an SMG engine gRPC service (--grpc-port, --runtime) and a
// vLLM-style ZMQ KV-event publisher with replay (--kv-events, --kv-replay) over pkg/sim's
// engine model, with --dp-size independent ranks and fault switches for reliability tests.
//
// Choosing --time-scale: wall time = simulated time × F. Pick F so the process is never late;
// simworker_step_overrun_seconds_total on /metrics counts simulated seconds lost to lateness
// and should stay near zero. On a 2-core machine, three simulators running the DESIGN §9
// workload (1800 requests at 32 req/s) keep up at F = 0.2–0.5 (a 16–35 s run); F = 0.05 runs
// in under 10 s but measurably inflates latencies when the machine is busy.
//
// Run `simworker --help` for every flag.
package main
