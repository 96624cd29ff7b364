// Package openai is the OpenAI wire format as the gateway speaks it to clients: request types
// and their parsing and validation (POST /v1/completions and /v1/chat/completions), response,
// chunk and usage types, the one SSE writer with its one error-event path, and the OpenAI
// error body {"error":{"message","type","param","code"}}.
//
// It knows nothing of workers, tokenizers or routing: it turns bytes into validated requests
// and responses into bytes. Every failure a client can cause is an *Error carrying the HTTP
// status and the OpenAI error fields, classified before anything is written (STYLE.md rule 14).
//
// Which call to use: ReadBody reads a bounded request body; ParseCompletion and ParseChat
// validate one (with the Limits the gateway is configured with) into a CompletionRequest or a
// ChatRequest, whose AppendUpstream re-encodes it for an http:// worker. Responses are written
// with the types of response.go and chat_response.go, streamed through SSE (or AppendEvent for
// a caller that builds its own buffer), failures with WriteError or SSE.Fail.
//
// Files: request.go is what every request shares (Limits, the scan of the top-level fields,
// model, the upstream re-encoding), sampling.go the generation parameters completions and chat
// share (Sampling), completion.go the completions request; chat.go the chat request and its
// top-level fields, chat_messages.go its messages and content, chat_tools.go its tools and
// tool_choice; walk.go the readers of nested values of an already validated body.
//
// Request bodies are scanned once by a hand-written top-level JSON scanner (scan.go, kept
// because encoding/json is 4–11× slower on request bodies: see its comment and
// BenchmarkScanObject); FuzzScanObject checks it accepts exactly what encoding/json accepts.
package openai
