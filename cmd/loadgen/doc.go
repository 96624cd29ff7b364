// Command loadgen drives an OpenAI-compatible server (kvgate, nginx in front of several
// kvgates, vLLM, SGLang or the simulator) with a prefix-heavy workload on /v1/completions
// (--endpoint) or, for chat, /v1/chat/completions (--chat-endpoint), for agents
// /v1/responses or /v1/messages, and reports
// throughput, TTFT and end-to-end latency (mean, p50, p95, p99), errors, and the fleet's
// prefix-cache hit rate: Δvllm:prefix_cache_hits_total ÷ Δvllm:prefix_cache_queries_total
// summed over the workers named by --worker-metrics, read before and after the run (issue 7,
// DESIGN.md §9). Every request streams, so TTFT is taken at the first token (chat: the first
// delta carrying content, reasoning or a tool call, not the role chunk), and asks for a fixed
// output length (max_tokens with ignore_eos).
//
// Which workload:
//   - prefix_repetition (default; the DESIGN §9 reference): --num-prefixes shared prefixes of
//     --prefix-tokens tokens, each used equally often in a seeded random order, each request
//     adding a unique --suffix-tokens suffix; the cleanest test of cache-aware routing.
//   - chat: sessions of --turns turns sent as real chat requests: the shared system prompt
//     (--system-tokens; none for 0), then every earlier user message followed by the answer
//     the server actually streamed for it (its content), then the new user message; the
//     realistic case where reuse comes from the same client and the server's chat template
//     decides which ids are reused. Chat carries text, so it needs --tokenizer (text mode);
//     --token-ids is refused.
//   - responses: agent sessions of --turns turns on /v1/responses (--responses-endpoint), each
//     turn continuing the previous response by previous_response_id (the server keeps the
//     conversation), the --system-tokens text as instructions, one function tool offered;
//     an answer that calls the tool is followed by its result (a function_call_output per
//     call, --tool-tokens tokens), any other by the next user message. The output length is
//     the model's, up to --output-tokens (no ignore_eos: an agent's turn ends when it calls or
//     answers); the simulator with --reply-file and --tool-call-parser scripts the calls.
//     Text only, like chat.
//   - messages: coding-agent sessions of --turns turns on Anthropic's /v1/messages
//     (--messages-endpoint), each turn resending the whole conversation as Claude Code does:
//     the --system-tokens system prompt (a text block marked cache_control) and five tool
//     definitions shared by every session, then the history with each answer's content
//     blocks as they streamed; an answer that used a tool (tool_use) is followed by a user
//     message with a tool_result per call (--tool-tokens tokens), any other by the next user
//     message. Output length and tool calls are the model's, as for responses. Text only.
//   - trace: replay of a Mooncake-format JSONL trace (timestamp ms, input_length,
//     output_length, hash_ids of --trace-block-size tokens each) with its own timing, or
//     lines carrying "prompt" or "token_ids".
//
// Which prompt form: --tokenizer FILE|DIR (a tokenizer.json, or a model directory holding
// it) builds real text whose token count under that tokenizer is exact (every piece is a
// single-token " word", which byte-level BPE pre-tokenizers never merge across), which
// exercises the gateway's tokenizer like real traffic; --token-ids sends token-id lists,
// needing no tokenizer and skipping tokenization (not for chat). For chat the lengths are
// those of the message texts; the template adds its own tokens around them.
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
// without sending anything; every report also carries it. Chat's ideal depends on the answers,
// so it is only reported after a run, and it is computed on the ids the engine computes: each
// conversation rendered with the chat template of the --tokenizer model directory (or of
// --chat-template FILE) by pkg/chat, the gateway's renderer, and tokenized as vLLM does. A turn
// ideally hits the previous turn's ids followed by its answer's tokenization (exact when the
// engine's output ids are the tokens of the answer text, as with the simulator's
// --reply-file; with sampled ids a real cache hits less), a session's first turn what it
// shares with the first first turn (system prompt and template). With a tokenizer.json file
// and no --chat-template the chat ideal is n/a (the report says why); point --tokenizer and
// the server at the same model directory. The responses ideal is computed the same way on the
// ids each turn is routed on (the whole conversation converted by pkg/conversation, the
// gateway's own conversion, then rendered): a later turn ideally hits everything before its
// input's text (the earlier prompts and the answers as the template renders them), a first
// turn what it shares with the first first turn. The messages ideal likewise, on the ids the
// gateway routes each turn on (converted by pkg/anthropic, then rendered): a later turn
// ideally hits everything before its new user message's text. --result-line 'k=v ...' ends the
// output with make demo's machine-readable RESULT line.
//
// --api-key KEY (default $OPENAI_API_KEY, as the OpenAI clients read it) is sent as a bearer
// token to --url's host only, for a gateway started with --api-key; the workers' /metrics
// never see it.
package main
