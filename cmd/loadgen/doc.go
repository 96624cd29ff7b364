// Command loadgen drives an OpenAI-compatible /v1/completions endpoint (kvgate, nginx in front
// of several kvgates, vLLM, SGLang or the simulator) with a prefix-heavy workload and reports
// throughput, TTFT and end-to-end latency (mean, p50, p95, p99), errors, and the fleet's
// prefix-cache hit rate: Δvllm:prefix_cache_hits_total ÷ Δvllm:prefix_cache_queries_total
// summed over the workers named by --worker-metrics, read before and after the run (issue 7,
// DESIGN.md §9). Every request streams, so TTFT is taken at the first token, and asks for a
// fixed output length (max_tokens with ignore_eos).
//
// Which workload:
//   - prefix_repetition (default; the DESIGN §9 reference): --num-prefixes shared prefixes of
//     --prefix-tokens tokens, each used equally often in a seeded random order, each request
//     adding a unique --suffix-tokens suffix; the cleanest test of cache-aware routing.
//   - chat: sessions of --turns turns that resend the growing conversation over a shared
//     system prompt; the realistic case where reuse comes from the same client.
//   - trace: replay of a Mooncake-format JSONL trace (timestamp ms, input_length,
//     output_length, hash_ids of --trace-block-size tokens each) with its own timing, or
//     lines carrying "prompt" or "token_ids".
//
// Which prompt form: --tokenizer FILE builds real text whose token count under that
// tokenizer is exact (every piece is a single-token " word", which byte-level BPE
// pre-tokenizers never merge across), which exercises the gateway's tokenizer like real
// traffic; --token-ids sends token-id lists, needing no tokenizer and skipping tokenization.
//
// Which arrival process: --rate R gives an open loop (gamma-distributed gaps with shape
// --burstiness, Poisson at 1), the right choice for latency under load since slow responses
// do not slow the arrivals; --concurrency N without --rate gives a closed loop (throughput at
// a fixed number of streams); both together cap an open loop's requests in flight.
//
// Prefix popularity (prefix_repetition): --prefix-dist uniform (the default) uses every
// prefix equally often; --prefix-dist zipf:S draws each request's prefix k with probability
// ∝ 1/(k+1)^S, so a few hot prefixes carry much of the traffic (the hot-spot case of a
// cache-aware router).
//
// Time scale: with simulators running at --time-scale F (wall = simulated × F, so 0.02 runs
// 50× faster), pass the same F. The arrival schedule is compressed to wall time (× F) and all
// times are reported in simulated time (measured ÷ F), rates per simulated second. The
// gateway's own overhead is divided by F too, so pick F such that overhead ÷ F stays small
// next to the simulated TTFT (e.g. 0.5 ms ÷ 0.02 = 25 ms against TTFTs of seconds) and state
// F with the results.
//
// --ideal prints the workload's ideal hit rate (an infinite cache where every repeat of a
// prefix hits; for prefix_repetition (requests − distinct prefixes) × P ÷ prompt tokens)
// without sending anything; every report also carries it. --result-line 'k=v ...' ends the
// output with make demo's machine-readable RESULT line.
package main
