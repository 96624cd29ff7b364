// Package openai is the OpenAI wire format as the gateway speaks it to clients: request types
// and their parsing and validation (POST /v1/completions; chat completions build on the same
// pieces), response, chunk and usage types, the one SSE writer with its one error-event path,
// and the OpenAI error body {"error":{"message","type","param","code"}}.
//
// It knows nothing of workers, tokenizers or routing: it turns bytes into validated requests
// and responses into bytes. Every failure a client can cause is an *Error carrying the HTTP
// status and the OpenAI error fields, classified before anything is written (STYLE.md rule 14).
//
// Request bodies are scanned once by a hand-written top-level JSON scanner (scan.go, kept
// because encoding/json is 4–11× slower on request bodies: see its comment and
// BenchmarkScanObject); FuzzScanObject checks it accepts exactly what encoding/json accepts.
package openai
