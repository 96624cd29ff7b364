// Package anthropic is Anthropic's Messages API wire format (POST /v1/messages and
// /v1/messages/count_tokens) as the gateway serves it, the sibling of pkg/openai for another
// API's shapes. It knows nothing of workers.
//
// A Messages body is parsed (Parse) and converted into the OpenAI chat request the engine runs
// it as, by the rules of vLLM's Anthropic serving (vllm/entrypoints/anthropic): the system
// prompt becomes the leading system message, content blocks become chat parts, tool_use blocks
// assistant tool_calls, tool_result blocks tool messages, thinking blocks the assistant's
// reasoning, tools with input_schema function tools, tool_choice any → required, stop_sequences
// → stop. The chat body (Request.ChatBody) is what pkg/router parses with openai.ParseChat and
// renders, so the prompt is exactly the one the engine renders for the same request. System
// messages inside messages are kept in place (ChatBody) or folded into their neighbours
// (FoldedChatBody) by vLLM's rules (inline.go); which of the two a model gets depends on its
// chat template, which the caller probes, as vLLM does.
//
// The output side converts the engine's chat answer back: a chat.completion body into a
// message (Message), and a chat.completion.chunk stream into the Messages events, piece by
// piece (Stream). Errors are written in Anthropic's shape,
// {"type":"error","error":{"type","message"}}, with the status of the *openai.Error they carry
// (WriteError, AppendErrorEvent).
package anthropic
