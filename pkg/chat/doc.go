// Package chat turns OpenAI chat requests into the prompt text and token ids the engine
// computes for them (wire/vllm-chat.md), so the gateway routes chat requests on the same
// tokens the worker's KV cache holds.
//
// What it does, in vLLM's order:
//   - template loading from a model directory (New): the request's chat_template (only
//     with Options.TrustRequestChatTemplate, rendered in a Sandbox process), else
//     Options.ChatTemplate (--chat-template), else chat_template.jinja, else
//     tokenizer_config.json's chat_template (a string, or named templates: "tool_use" when
//     the request has tools, else "default"); special tokens (bos_token, ..., only those set
//     and non-null; AddedToken objects give their content; additional_special_tokens;
//     extra_special_tokens) from tokenizer_config.json;
//   - the request rules vLLM applies when rendering (§2: tool parser, untrusted templates),
//     messages → conversation (§3) in the content format detected from the template
//     (DetectContentFormat, §4), tools (§5), template kwargs and continue_final_message
//     (§7);
//   - rendering with github.com/ardanlabs/jinja set up as transformers sets up Jinja2
//     (§8; env.go lists what is closed with render variables, bigint.go how integers beyond
//     int64, which the library's values cannot hold, are kept exact);
//   - tokenization with pkg/tokenizer (§9): Encode(text, addSpecial=false) unless the
//     request sets add_special_tokens;
//   - gpt-oss models (model_type "gpt_oss") are rendered with the Harmony encoding instead,
//     as vLLM does (harmony.go). Mistral-tokenizer models (mistral_common) are out of scope:
//     they are rendered with their Jinja template, which vLLM does not use for them.
//
// Which call to use: Renderer.Render for prompt and ids (what the gateway routes on),
// Renderer.RenderText for the text only. A Renderer is immutable and safe for concurrent
// use. Every failure a request can cause is a 400 *openai.Error with the engine's message.
//
// Safety: operator templates are trusted and render in process (panics recovered, range()
// bounded as in Jinja2's sandbox, prompt size bounded, recursion over data bounded through
// the request's nesting bound, macro nesting bounded as Python's recursion limit bounds it,
// recursion.go); request templates are untrusted and render only in a child
// process with a deadline and stack and heap caps (sandbox.go says why). Decoded tool schemas
// are kept per Renderer (at most 1 MiB of their JSON) and shared between requests only with
// templates that cannot change the values they are given (schemacache.go).
//
// Files: template.go loads templates and special tokens, render.go builds a request's
// conversation and variables and renders it, contentformat.go detects the content format
// (with jinjalex.go's lexer and jinjaexpr.go's expression parser, as the library exports no
// AST), whitespace.go applies Jinja2's whitespace control to the source, operators.go gives
// +, - and for loops Python's rules (arith.go * / // **, unary - and ordering comparisons), env.go sets up the Jinja environment (tojson.go,
// concat.go and their rewrites of the template source make it faster), jsonvalues.go and pystring.go give request values Python's
// rules, mutate.go and schemacache.go share decoded tool schemas, sandbox.go renders untrusted
// templates, harmony.go renders gpt-oss, media.go checks, counts and hashes the media parts of
// multimodal models and gives them to the template as vLLM does (docs/multimodal.md).
//
// The output side for gRPC engines (reasoning and tool-call parsers, and the API shapes of
// what they parse) is package parse (pkg/chat/parse), which imports neither this package nor
// the Jinja library; use it, not this package, to read what an engine generated. Both write
// floats as Python does with pkg/chat/internal/pyfloat.
package chat
