package pipeline

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
)

// OpenTelemetry tracing of the pipeline (docs/operations.md, "Tracing"). With Config.Tracing
// nil every hook below is one nil check: no span, no context, no allocation. With it set, each
// generating request has a server span continuing the client's W3C traceparent, children for
// its stages (parse, prompt, admission, route, upstream) and the upstream span's context sent to
// the worker (pkg/engine injects it as the traceparent header or gRPC metadata).

// tracerName names the gateway's instrumentation scope (the import path the pipeline had when
// tracing was added, kept so that traces keep their scope).
const tracerName = "github.com/kvgate/kvgate/pkg/router"

// Span names.
const (
	spanParse     = "kvgate.parse"
	spanPrompt    = "kvgate.prompt"
	spanAdmission = "kvgate.admission"
	spanRoute     = "kvgate.route"
	spanUpstream  = "kvgate.upstream"
)

// Span attribute keys of the gateway's own (the HTTP and GenAI ones follow OpenTelemetry's
// semantic conventions).
const (
	attrWorker        = attribute.Key("kvgate.worker")
	attrPolicy        = attribute.Key("kvgate.policy")
	attrReason        = attribute.Key("kvgate.route.reason")
	attrMatched       = attribute.Key("kvgate.matched_blocks")
	attrRequestBlocks = attribute.Key("kvgate.request_blocks")
	attrSource        = attribute.Key("kvgate.match_source")
	attrCandidates    = attribute.Key("kvgate.candidates")
	attrPromptTokens  = attribute.Key("kvgate.prompt_tokens")
	attrPrompts       = attribute.Key("kvgate.prompts")
	attrPriority      = attribute.Key("kvgate.priority")
	attrQueueOutcome  = attribute.Key("kvgate.queue.outcome")
	attrQueueWait     = attribute.Key("kvgate.queue.wait_ms")
	attrAttempt       = attribute.Key("kvgate.attempt")
	attrModel         = attribute.Key("gen_ai.request.model")
	attrLeg           = attribute.Key("kvgate.pd.leg")
	attrStatus        = attribute.Key("http.response.status_code")
)

// clientKind is the upstream spans' kind option, made once.
var clientKind = trace.WithSpanKind(trace.SpanKindClient)

// The canonical names of the headers traceContext extracts from (tracestate is read only
// with a traceparent).
const (
	hdrTraceparent = "Traceparent"
	hdrBaggage     = "Baggage"
)

// traceContext is the W3C propagator the server span extracts with.
var traceContext = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Traced wraps a generating endpoint's handler with its server span when tracing is on; off, it
// returns h itself. The span's context becomes the request's, so every stage's span and the
// upstream call descend from it.
func (pl *Pipeline) Traced(route string, h http.HandlerFunc) http.HandlerFunc {
	if pl.tracer == nil {
		return h
	}
	name := http.MethodPost + " " + route
	// The options are the same for every request of the route: built once, not per request.
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", http.MethodPost), attribute.String("http.route", route))}
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		// Most requests carry no trace context: skip the propagators, whose header lookups
		// canonicalise (and allocate) each name.
		if r.Header[hdrTraceparent] != nil || r.Header[hdrBaggage] != nil {
			ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		ctx, span := pl.tracer.Start(ctx, name, opts...)
		sw, ok := w.(*StatusWriter)
		if !ok {
			sw = &StatusWriter{ResponseWriter: w}
		}
		defer func() {
			code := sw.Code
			if code == 0 {
				code = http.StatusOK
			}
			span.SetAttributes(attrStatus.Int(code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
			span.End()
		}()
		h(sw, r.WithContext(ctx))
	}
}

// startTrace points c at the request's trace, when tracing is on and r carries a span.
func (pl *Pipeline) startTrace(r *http.Request, c *Call) {
	if pl.tracer != nil {
		c.tctx = r.Context()
	}
}

// stageSpan starts a child span of c's request span, or returns nil when c is not traced.
func (pl *Pipeline) stageSpan(c *Call, name string, opts ...trace.SpanStartOption) trace.Span {
	if c.tctx == nil {
		return nil
	}
	_, span := pl.tracer.Start(c.tctx, name, opts...)
	return span
}

// endSpan ends span (nil: untraced), marking it failed with aerr when set.
func endSpan(span trace.Span, aerr *openai.Error) {
	if span == nil {
		return
	}
	if aerr != nil {
		span.SetStatus(codes.Error, aerr.Message)
		span.SetAttributes(attrStatus.Int(aerr.Status))
	}
	span.End()
}

// tracePrompt ends the prompt span with what the prompt became.
func tracePrompt(span trace.Span, c *Call, aerr *openai.Error) {
	if span == nil {
		return
	}
	if aerr == nil && len(c.Req.Tokens) > 0 {
		span.SetAttributes(attrPrompts.Int(len(c.Req.Tokens)), attrPromptTokens.Int(len(c.RouteTokens())))
	}
	endSpan(span, aerr)
}

// traceRoute records a routing decision as a span from start to now.
func (pl *Pipeline) traceRoute(c *Call, dec *Decision, requestBlocks, candidates int, start time.Time) {
	if c.tctx == nil {
		return
	}
	_, span := pl.tracer.Start(c.tctx, spanRoute, trace.WithTimestamp(start))
	span.SetAttributes(attrWorker.String(dec.m.Worker().URL()), attrPolicy.String(policyName(c.Served.policy)),
		attrReason.String(string(dec.reason)), attrMatched.Int(dec.matched), attrRequestBlocks.Int(requestBlocks),
		attrSource.String(sourceName(dec.source)), attrCandidates.Int(candidates))
	span.End()
}

// sourceName names where a match came from.
func sourceName(s indexer.Source) string {
	switch s {
	case indexer.SourceEvents:
		return "events"
	case indexer.SourceTree:
		return "tree"
	case indexer.SourcePending:
		return "pending"
	}
	return "none"
}

// traceQueue records a request's wait in the admission queue as a span from enqueued to now.
func (pl *Pipeline) traceQueue(c *Call, prio int, outcome string, enqueued time.Time) {
	if c.tctx == nil {
		return
	}
	_, span := pl.tracer.Start(c.tctx, spanAdmission, trace.WithTimestamp(enqueued))
	span.SetAttributes(attrPriority.Int(prio), attrQueueOutcome.String(outcome),
		attrQueueWait.Float64(float64(time.Since(enqueued).Microseconds())/1000))
	if outcome != "admitted" {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// startUpstream starts the upstream call's client span under ctx (the request's) when c is
// traced, returning the context the engine is called with: it carries the span, whose context
// the engine passes on to the worker.
func (pl *Pipeline) startUpstream(ctx context.Context, c *Call, dec *Decision, attempt int) context.Context {
	if c.tctx == nil {
		return ctx
	}
	attrs := [4]attribute.KeyValue{attrWorker.String(dec.m.Worker().URL()), attrAttempt.Int(attempt), attrModel.String(c.Req.Model)}
	n := 3
	if c.leg != "" {
		attrs[3], n = attrLeg.String(c.leg), 4
	}
	ctx, c.up = pl.tracer.Start(ctx, spanUpstream, clientKind, trace.WithAttributes(attrs[:n]...))
	return ctx
}

// Pair legs' names, in kvgate.pd.leg.
const (
	legNamePrefill = "prefill"
	legNameDecode  = "decode"
)

// prefillSpan starts a prefill leg's upstream span under ctx when c is traced (nil
// otherwise); the returned context carries it to the prefill worker. It is the call's own span,
// not c.up: an SGLang pair runs its legs at once.
func (pl *Pipeline) prefillSpan(ctx context.Context, c *Call, dec *Decision) (context.Context, trace.Span) {
	if c.tctx == nil {
		return ctx, nil
	}
	return pl.tracer.Start(ctx, spanUpstream, clientKind,
		trace.WithAttributes(attrWorker.String(dec.m.Worker().URL()), attrLeg.String(legNamePrefill), attrModel.String(c.Req.Model)))
}

// endUpstream ends the upstream span (if any) with the worker's status and the call's error.
func endUpstream(c *Call, status int, aerr *openai.Error) {
	if c.up == nil {
		return
	}
	if status != 0 {
		c.up.SetAttributes(attrStatus.Int(status))
	}
	if aerr != nil {
		c.up.SetStatus(codes.Error, aerr.Message)
	}
	c.up.End()
	c.up = nil
}
