package parse

// Where this package's output intentionally differs from vLLM's, and why. vLLM's streaming and
// non-streaming paths disagree in each of these cases (or vLLM raises); a gateway that must give
// one answer for both modes (ParseFinish equals the accumulated stream) takes the one below. Checked
// against vLLM main of 2026: vllm/tool_parsers/{hermes,llama,deepseekv3,mistral,openai}_tool_parser.py,
// vllm/reasoning/{basic_parsers,qwen3_reasoning_parser,gptoss_reasoning_parser}.py,
// vllm/entrypoints/openai/chat_completion/serving.py, vllm/parser/llama_json.py.
//
// All JSON formats
//   - Arguments are the json.dumps text of the non-streaming path in both modes (vLLM streams
//     the raw text, so its deltas do not concatenate to its own non-streaming arguments).
//     WithRawArguments gives the raw text in both modes instead (what vLLM's newer parser
//     engine does for llama3_json).
//   - Duplicate keys cannot be merged while streaming: {"a": 1, "a": 2} is sent as written
//     (json.loads keeps the last value, {"a": 2}). Likewise the first "name" of an envelope
//     and the first arguments key are used, where json.loads would keep the last.
//   - A lone surrogate escape ("\ud83d" without its pair) is written as \ud83d even with
//     ensure_ascii=False: Python keeps the code point, which cannot be encoded as UTF-8.
//   - Nesting deeper than 512 is a syntax error (CPython's limit is its recursion limit).
//   - A call is committed, and its first delta sent, once its name is known and its arguments
//     have started. A call that breaks before that is content, as vLLM's non-streaming path
//     makes it; one that breaks after it cannot be taken back:
//       - truncated (max_tokens) inside the arguments: the call stays, with the arguments sent
//         so far (vLLM non-streaming: all content; vLLM streaming: the partial call);
//       - a syntax error inside the arguments: the rest of the call's text up to its end marker
//         is appended raw to the arguments (vLLM non-streaming: content; Harmony: the whole
//         body raw);
//       - junk after a complete arguments value (a missing "}", text before "</tool_call>"):
//         the call stays and the junk is content.
//   - One malformed call does not turn the other calls into content (vLLM non-streaming drops
//     every call of the response when one fails to parse).
//   - An uncommitted call longer than MaxCallBytes (default 1 MiB) is given up as content.
//
// hermes
//   - Text after a call (other than whitespace) is content; vLLM drops everything after the
//     first "<tool_call>" that is not a call.
//
// llama3_json
//   - Calls are recognised only when the output starts with "{" or "<|python_tag|>" (vLLM's
//     streaming rule). vLLM's non-streaming path tries every "{" of the text, which cannot be
//     streamed without holding all content back.
//   - Text after the calls is content (vLLM: content null when calls were found).
//
// deepseek_v3
//   - Arguments may span lines (vLLM's regex has no DOTALL, so its non-streaming path silently
//     drops such a call while its streaming path sends it).
//   - A call whose type is not "function" or whose header is malformed is content (vLLM raises a
//     validation error or skips the call).
//
// mistral
//   - The form (JSON array or name[ARGS]{...}) is chosen from the text, not from the tokenizer
//     version; whitespace around a name is trimmed; a second "[TOOL_CALLS]" in the array form
//     starts a new block (vLLM raises).
//
// <think> parsers
//   - A "<think>" inside reasoning is dropped and the text before it stays reasoning (vLLM's
//     non-streaming path drops the text before the first "<think>").
//   - An empty reasoning block gives reasoning null (vLLM non-streaming: "").
//   - With RequestInfo.ReasoningEnded everything is content even if "</think>" appears (vLLM's
//     qwen3 non-streaming path still splits at it; its streaming path does not).
//
// qwen3_coder / qwen3_xml (one machine for both; vLLM's qwen3_xml reads the same format with
// an XML parser)
//   - A value ends at the first "</parameter>" (or "<parameter=", "</function>",
//     "</tool_call>" when that is missing); vLLM's newer parser looks ahead to skip such markers
//     written inside a value.
//   - Values of types other than the listed ones are read as JSON (vLLM: ast.literal_eval,
//     which also reads Python literals such as True, None, 'single quotes' and tuples).
//   - A duplicate parameter is sent twice (json.dumps of vLLM's dict keeps the last value).
//   - Text after a call is content, as for hermes; a bare "<function=" without "<tool_call>"
//     is content (vLLM's non-streaming path also reads it as a call).
//   - WithRawArguments does not apply: the arguments are built, not written by the model.
//   - Int() and float() read surrounding ASCII whitespace only (Python also strips Unicode
//     whitespace); an over-long held value (MaxCallBytes) is sent as a string.
//
// pythonic / llama4_pythonic
//   - The calls are sent at the end of output, whole (vLLM's streaming path sends them as it
//     reads them): the list cannot be known to be calls before it is complete.
//   - A negative number (-2, an ast.UnaryOp) is read as a literal; string prefixes (r"", b""),
//     triple quotes, implicit concatenation and octal escapes other than \0 are not read (the
//     output is then content); a lone surrogate escape becomes U+FFFD.
//
// granite
//   - Text after the array is content (vLLM's json.loads of the whole rest fails on it: all
//     content); one malformed element does not make the other calls content.
//
// minimax_m2
//   - Text after a block is content (vLLM's streaming path drops everything after the first
//     block starts, its non-streaming path keeps only the text before it); other text inside a
//     block is content too.
//   - An infinite float value stays a string (vLLM's int(inf) raises). Whether MiniMax's
//     markers are special tokens was not checked (no tokenizer at hand).
//
// seed_oss runs qwen3_coder's machine in <seed:tool_call> with its own value rules (xmlvalue.go);
// the same differences apply. Seed-OSS's tokenizer was not at hand: whether its markers are
// special tokens (and so need special tokens kept) is not checked; they are decoded as for any
// parser without adjust_request.
//
// glm45 / glm47 (one machine for both layouts)
//   - A value also ends at "</tool_call>" when "</arg_value>" is missing; a call cut off by
//     the end of output is closed (vLLM streaming leaves its JSON open, non-streaming makes the
//     output content).
//   - Untyped values are read as JSON only (vLLM then tries ast.literal_eval).
//
// kimi_k2 / deepseek_v31
//   - A malformed or cut-off call header is content (vLLM skips the call); the rest of that
//     call's markers are content too.
//   - kimi_k2's name is the header before its ":IDX" less a "functions." prefix.
//   - Text after the section is content (vLLM non-streaming: only the text before it).
//
// step3 (vllm/tool_parsers/step3_tool_parser.py; its streaming path is followed: the name is
// sent once its invoke header is complete, the arguments once the call ends)
//   - Text in the block outside calls (a "<｜tool_sep｜>" between calls, stray text) is dropped,
//     as the non-streaming path drops it; vLLM's streaming path stops reading there, as it does
//     at a call with no invoke header (made content here).
//   - A call with no parameter gets "{}" (the streaming path sends no arguments for it); a call
//     cut off by the end of output keeps its complete parameters (streaming: the name only;
//     non-streaming: all content without the block's end marker).
//   - The "function<｜tool_sep｜>" type prefix is not checked, as in the streaming path (the
//     non-streaming path skips a call without it).
//   - A number that float() reads as infinite or NaN stays a string (vLLM writes Infinity/NaN).
//   - Values are stripped as this version does; a later vLLM test expects string values kept
//     as written, from a parser version not at hand. Whether Step3's markers are special
//     tokens (and its stop token) was not checked: no Step3 tokenizer at hand.
//
// deepseek_v32 (vllm/tool_parsers/deepseekv32_tool_parser.py, the streaming path of the classic
// parser's latest version at hand, with its recovery of invokes outside a block and of other
// models' "<｜DSML｜tool_calls>" blocks; vLLM now maps the name to a parser-engine adapter,
// which was not followed)
//   - Arguments are the streamed text: no spaces between entries ({"a":1,"b":"x"}), values of
//     object/array-only types raw as written (a malformed one stays malformed), where the
//     non-streaming path writes json.dumps of the whole dict.
//   - A string="true" value is a string whatever the schema says (the engine adapter coerces
//     it by the schema).
//   - An invoke or parameter tag that cannot match, and other text in a block, is dropped; a
//     block's end marker or a new invoke closes an open call; a parameter or call cut off by the
//     end of output is closed (vLLM's streaming path stops reading at each of these).
//   - A tag longer than MaxCallBytes does not match; a held (coerced) value longer than that is
//     sent as a string. An unwrapped "arguments"/"input" object with NaN or infinity is kept
//     wrapped.
//   - After an orphan call, whitespace before text that starts no call or block is content
//     (vLLM then sends its whole buffer as content, which depends on how the text was split);
//     a whitespace run is looked at up to MaxCallBytes.
//
// granite reasoning (vllm/reasoning/granite_reasoning_parser.py; its streaming path)
//   - Reasoning only when the output starts with "Here is my thought process:" (or "Here's");
//     the non-streaming regex also finds the markers later in the text and drops what comes
//     before them. Without "Here is my response:" everything after the start marker is
//     reasoning (non-streaming: all content).
//   - A prefix of the start marker at the end of output is content (the streaming path never
//     sends it); a prefix of the response marker there is reasoning.
//
// Other marker reasoning parsers (think.go), against their vLLM files of 2026 (the classic
// Python parsers; vLLM's newer parser-engine adapters were not readable here)
//   - glm45 / glm47 start inside reasoning as deepseek_r1 does (vLLM maps both names to its
//     GLM-4.7 adapter; its older Glm4MoeModelReasoningParser made an output without "<think>"
//     all content). Whether the prompt closed reasoning is read after the last "<|assistant|>".
//   - kimi_k2 drops every "<think>" inside reasoning, as its streaming path drops the lone token
//     (its non-streaming path strips only a leading one).
//   - deepseek_v3 and kimi_k2 read the thinking switch from the request's chat_template_kwargs
//     only; the gateway's --default-chat-template-kwargs are not seen by the parsers.
//   - step3 keeps a "<think>" in the reasoning text (its parser knows only "</think>").
//
// openai / openai_gptoss (Harmony)
//   - Markers are read from text decoded with special tokens kept, not from token ids, so a
//     model writing a marker's characters as ordinary tokens is read as the marker.
//   - Content joins final and preamble messages with "\n" as parse_chat_output does; the
//     openai tool parser's non-streaming path keeps only the last final message (else the last
//     preamble), which cannot be known while streaming.
//   - A call is committed at its header, so a call truncated before "<|call|>" stays (vLLM
//     lists only completed calls); tool_choice required/named are parsed as auto.
//   - A "<|start|>" or "<|channel|>" inside a body ends that message (openai_harmony raises).
//
// Finish reason
//   - "tool_calls" only when the engine stopped normally ("stop"); vLLM's non-streaming path
//     also says "tool_calls" after "length" when calls were parsed.
