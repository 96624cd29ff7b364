package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Engine is one upstream worker. Its methods are safe for concurrent use; ctx bounds each call
// (STYLE.md rule 15).
type Engine interface {
	// Health checks the worker (HTTP /health, gRPC HealthCheck); nil means healthy. A gRPC
	// engine whose runtime is not known yet detects it here.
	Health(ctx context.Context) error
	// Model returns the base model the worker reports and the LoRA adapters it lists.
	Model(ctx context.Context) (Model, error)
	// Load returns the engine's own running and waiting requests, summed over its DP ranks.
	Load(ctx context.Context) (Load, error)
	// Generate sends req. On success the returned Response must be closed; on failure nothing
	// was sent to the client and the error (an *openai.Error) may be retried elsewhere.
	Generate(ctx context.Context, req *Request) (*Response, error)
	// Runtime returns the gRPC runtime in use ("" for HTTP workers and while undetected).
	Runtime() worker.Runtime
	// Close releases the engine's connections. Call it after the last use.
	Close()
}

// Model is what a worker says it serves.
type Model struct {
	Name     string
	Adapters []string
}

// Request is one client request as the engines need it.
type Request struct {
	// Completion, Chat or Pass is the parsed client request (exactly one is set). A Pass
	// request (the pooling endpoints) is forwarded as it is to HTTP workers; gRPC workers
	// refuse it.
	Completion *openai.CompletionRequest
	Chat       *openai.ChatRequest
	Pass       *openai.PassRequest
	// ChatOutput says how a gRPC worker's chat output becomes the message (an HTTP worker's
	// engine parses its own).
	ChatOutput ChatOutput
	// Model is the model name the client asked for (defaulted); responses carry it.
	Model string
	// Tokens holds each prompt's token ids (a chat request has one prompt, the rendered
	// conversation); an entry is nil for a prompt the gateway could not tokenize (then only
	// HTTP workers can serve it).
	Tokens [][]uint32
	// ForwardTokenIDs sends Tokens as the prompt to HTTP workers (when every prompt has them).
	ForwardTokenIDs bool
	// Edits change the body an HTTP worker gets (a leg of a prefill/decode pair, wire/pd.md);
	// an edit of "stream" decides whether the call streams. nil: the client's body.
	Edits openai.Edits
	// Media counts the request's media items (images, audio, video): HTTP workers get them in
	// the client's body; gRPC workers cannot (ErrMediaOverGRPC).
	Media int
	// PD, when set, makes the call a leg of a prefill/decode pair on a gRPC worker (HTTP
	// workers get the pair through Edits and ignore it); a runtime that cannot carry the leg
	// refuses it (ErrPDNotSupported). nil: an ordinary call.
	PD *PDLeg
	// Header holds the client's request headers; only request ids and trace context are passed
	// on (forwardHeaders), never credentials.
	Header http.Header
	// SetHeader holds headers the gateway itself sets on an HTTP worker's call (a Mooncake
	// prefill leg's X-Data-Parallel-Rank); nil: none.
	SetHeader http.Header
}

// Response is a worker's answer. Status and Header are final once Body.Next has returned its
// first piece (an engine may still set, say, Content-Length while reading it).
type Response struct {
	Status int
	Header http.Header
	// SSE reports an event stream: the router flushes each piece and reports a failure after the
	// first byte as one OpenAI error event.
	SSE  bool
	Body Body
	// KVTransferParams, set on a gRPC NIXL prefill leg's answer (Request.PD.Prefill), returns
	// the hand-off the engine sent in its GenerateComplete (vLLM field 12), verbatim, or nil
	// when it sent none; call it after Body.Next returned io.EOF. nil for HTTP workers, whose
	// hand-off is the body's kv_transfer_params.
	KVTransferParams func() json.RawMessage
}

// Body yields the bytes to send to the client.
type Body interface {
	// Next returns the next piece (valid until the next call) or an error: io.EOF at the end,
	// otherwise the failure (an *openai.Error when the engine classified it).
	Next() ([]byte, error)
	// Close ends the upstream call, aborting it when the body did not reach its end.
	Close()
}

// TransportError is a failure to exchange a request with a worker at all (refused, reset, timed
// out before a response, gRPC UNAVAILABLE): the router also marks the worker down until its
// next health check.
type TransportError struct{ Err error }

func (e *TransportError) Error() string { return e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// forwardHeaders are the client headers passed on to HTTP workers: request ids and W3C trace
// context, so engine logs correlate. Credentials are not forwarded: the gateway's clients are
// not the workers' clients.
var forwardHeaders = []string{"X-Request-Id", "Traceparent", "Tracestate"}

// traceContext writes a span context as W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// injectTrace sets h's traceparent and tracestate to ctx's span (the gateway's upstream span,
// when tracing is on), replacing the client's forwarded ones, so the engine's own spans join
// the gateway's trace. Without a span in ctx the client's are left as forwarded.
func injectTrace(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// outgoingTrace returns ctx with the request's W3C trace context as gRPC metadata (traceparent,
// tracestate): ctx's span's when it has one, else the client's headers, else ctx unchanged.
func outgoingTrace(ctx context.Context, client http.Header) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		var m propagation.MapCarrier = make(map[string]string, 2)
		traceContext.Inject(ctx, m)
		kv := make([]string, 0, 4)
		for k, v := range m {
			kv = append(kv, k, v)
		}
		return metadata.AppendToOutgoingContext(ctx, kv...)
	}
	tp := client.Get("Traceparent")
	if tp == "" {
		return ctx
	}
	if ts := client.Get("Tracestate"); ts != "" {
		return metadata.AppendToOutgoingContext(ctx, "traceparent", tp, "tracestate", ts)
	}
	return metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
}

// Config is what both implementations share.
type Config struct {
	// Tokenizer decodes generated token ids for gRPC workers; nil: gRPC workers answer 501.
	Tokenizer Detokenizer
	// HTTP is the transport for HTTP workers (one shared by every worker: NewTransport); a
	// worker whose spec names a CA bundle or a client certificate gets a clone with them.
	HTTP http.RoundTripper
	// Logger receives debug lines (failed aborts); nil: none.
	Logger *zap.Logger
	// Now is the clock for response timestamps; nil: time.Now.
	Now func() time.Time
}

// Detokenizer is what gRPC workers need of the tokenizer: incremental decoders of generated
// token ids, skipping special tokens or keeping them (for output parsers whose markers are
// special tokens, parse.Parsers.SkipSpecialTokens).
type Detokenizer interface {
	NewDecoder(skipSpecial bool) StreamDecoder
}

// Where reasoning text goes in chat responses (ChatOutput.ReasoningField, --reasoning-field).
const (
	// ReasoningBoth writes it as reasoning (current vLLM) and as reasoning_content (SGLang,
	// older vLLM and most clients); the default ("").
	ReasoningBoth = "both"
	// ReasoningOnly writes only reasoning.
	ReasoningOnly = "reasoning"
	// ReasoningContentOnly writes only reasoning_content.
	ReasoningContentOnly = "reasoning_content"
)

// ReasoningFields lists the accepted ReasoningField values.
func ReasoningFields() []string { return []string{ReasoningBoth, ReasoningOnly, ReasoningContentOnly} }

// ChatOutput configures the chat output of gRPC workers.
type ChatOutput struct {
	// Parsers splits reasoning and tool calls out of the generated text as vLLM's server
	// does; nil: all text is content.
	Parsers *parse.Parsers
	// Info describes the request to the parsers (tools, tool_choice, whether the prompt
	// already ended reasoning).
	Info parse.RequestInfo
	// ReasoningField is one of the Reasoning* constants; "" is ReasoningBoth.
	ReasoningField string
}

// StreamDecoder turns generated token ids into text incrementally: Add returns the text that
// became final with id (possibly ""), Flush what remains at the end. One goroutine uses it.
type StreamDecoder interface {
	Add(id uint32) string
	Flush() string
}

// New returns the engine for w by its URL scheme, with the spec's upstream credentials: its
// api_key (or api_key_file, read now) and TLS files, which fail New when unreadable.
func New(w *worker.Worker, cfg Config) (Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch w.Kind() {
	case worker.KindHTTP:
		if cfg.HTTP == nil {
			return nil, errors.New("engine: new: an HTTP transport is required")
		}
		return newHTTP(w, cfg)
	case worker.KindGRPC:
		return newGRPC(w, cfg)
	}
	return nil, fmt.Errorf("engine: new %s: unsupported scheme", w.URL())
}

// mapFinishReason maps an engine finish reason to OpenAI's (wire/smg-grpc.md §7.2): empty is
// "stop"; anything else passes through.
func mapFinishReason(s string) string {
	if s == "" {
		return "stop"
	}
	return s
}

// stripURL unwraps *url.Error so messages carry the cause without repeating the URL.
func stripURL(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && u.Unwrap() != nil && strings.HasPrefix(fmt.Sprintf("%T", err), "*url.") {
		return u.Unwrap()
	}
	return err
}
