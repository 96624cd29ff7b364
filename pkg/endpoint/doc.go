// Package endpoint holds the public API's endpoints as plug-ins of the request pipeline
// (pkg/pipeline): each adapts its wire format (pkg/openai, pkg/anthropic, pkg/conversation) to
// an engine request and writes the worker's answer back in that format, and none copies the
// pipeline.
//
// Completions and Chat are endpoint values relayed as the engine answers (completions.go,
// chat.go); Pass and Form forward the pooling and audio endpoints untouched (pooling.go).
// API serves what needs state or answers without a worker: Anthropic's Messages and
// count_tokens (messages.go), the Responses and Conversations APIs over their stored state
// (responses.go, responses_api.go), and /tokenize and /detokenize (tokenize.go).
// docs/architecture.md ("Adding an endpoint") walks through adding one.
package endpoint
