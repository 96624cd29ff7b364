// Package parse is the output side of chat for gRPC engines. A gRPC engine returns token ids
// only; the gateway detokenizes them and must build the OpenAI chat response the way vLLM's
// OpenAI server does with --reasoning-parser and --tool-call-parser (wire/vllm-chat.md, "Output
// side for gRPC engines"). This package does that: decoded text in, reasoning / content / tool
// calls out, and those in the API's shapes. The input side (templates, rendering) is package
// chat; this package imports neither it nor the Jinja library, so an engine client links no
// template engine.
//
// Which call to use:
//   - NewParsers(reasoning, tool, opts...) validates the vLLM flag names once per model
//     (DefaultParserNames picks them from the model family when the operator gave none).
//     A *Parsers is immutable and safe for concurrent use.
//   - InfoFor(chatRequest, prompt) is the RequestInfo the parsers take (tools, tool_choice,
//     whether the rendered prompt already ended reasoning); ResponseRole(chatRequest) is the
//     role of the answer. The gateway and the simulator both build their responses from them.
//   - SkipSpecialTokens(req) says how the gateway must decode the engine's ids for this request
//     (vLLM's adjust_request; facts in special.go).
//   - NewStream(req) gives the state of one choice of a streamed response (n > 1: one Stream
//     per choice). Feed it the text decoded since the last call; it returns the increment to
//     send (reasoning, content, tool-call deltas). Finish flushes what was held back at the end
//     of generation. FinishReason maps the engine's finish reason ("tool_calls" after a call).
//   - ParseFinish(req, text, finish) parses a whole response. It runs the same machine as a
//     Stream over the text in one go, so the whole message equals the accumulation of the
//     streamed deltas for every way the text can be split; golden and fuzz tests check that for
//     every split point.
//   - NewOutput(parsers, req, fields) is the usual entry for a server: it keeps a Stream per
//     choice and gives the API's shapes (openai.ChatDelta chunks, openai.ChatChoice of a whole
//     text), with reasoning in the fields ReasoningFields names; nil parsers make all text
//     content. The gateway's gRPC path (pkg/engine) and the simulator (pkg/sim) write their chat
//     responses with it; use Stream and ParseFinish directly only for the parsed values.
//
// How the machines work: every stage (special-token strip, reasoning, tool calls) is a byte
// state machine over a small input buffer. A stage consumes what it can decide and keeps only
// an undecided tail: a trailing prefix of one of its markers, a JSON token in flight (a number,
// an escape) or the not-yet-committed start of a tool call. That tail is bounded by the longest
// marker plus three times MaxCallBytes (default 1 MiB: the call's raw text, and at most as much
// again of its decoded name and of arguments that came before the name); a call that is not
// committed within MaxCallBytes is given up and becomes content. Committed arguments are passed
// on as they arrive, however long.
//
// Tool-call arguments of the JSON formats (hermes, llama3_json, mistral's JSON-array form,
// openai/Harmony, tool_choice "required") are re-formatted while they stream into exactly the
// text vLLM's non-streaming path produces with json.dumps(json.loads(...)): separators ", " and
// ": ", Python float repr (1.50 -> 1.5, 1e2 -> 100.0), ints as written, ensure_ascii as each
// parser uses it. So streamed fragments concatenate to the non-streaming string byte for byte
// (vLLM's own streaming path sends the raw text there and disagrees with its non-streaming
// path). WithRawArguments (the gateway's --tool-call-raw-arguments) selects verbatim argument
// text instead, in both modes, as vLLM's streaming path and its newest parser engine send it.
// deepseek_v3, deepseek_v31, kimi_k2, mistral's name form and a named tool_choice pass
// arguments verbatim, as vLLM does. The markup formats (qwen3_coder/qwen3_xml, seed_oss, glm45/
// glm47, minimax_m2, step3, deepseek_v32's DSML; qwen3coder.go, glm.go, minimax.go, step3.go,
// dsml.go) build the arguments object from parameters whose values are typed by the request's
// tool schemas (RequestInfo.Tools, xmlvalue.go), as each vLLM parser does. The reasoning parsers that differ only in markers and
// a few rules run on one machine (think.go), granite's plain-text markers included.
//
// Where vLLM's two paths disagree, or vLLM would raise, the choice made here (always one both
// modes can share) is listed in vllmdiff.go.
package parse
