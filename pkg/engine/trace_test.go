package engine

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

func TestOutgoingTraceMetadata(t *testing.T) {
	client := http.Header{}
	client.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	client.Set("Tracestate", "vendor=1")
	// Without a gateway span the client's context is passed on as sent.
	md, _ := metadata.FromOutgoingContext(outgoingTrace(context.Background(), client))
	if got := md.Get("traceparent"); len(got) != 1 || got[0] != client.Get("Traceparent") {
		t.Errorf("traceparent %v, want the client's", got)
	}
	if got := md.Get("tracestate"); len(got) != 1 || got[0] != "vendor=1" {
		t.Errorf("tracestate %v", got)
	}
	// With one (tracing on), the span's replaces it.
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("1111111111111111")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	md, _ = metadata.FromOutgoingContext(outgoingTrace(trace.ContextWithSpanContext(context.Background(), sc), client))
	if got := md.Get("traceparent"); len(got) != 1 || got[0] != "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01" {
		t.Errorf("traceparent %v, want the span's", got)
	}
	// Neither: no metadata.
	if _, ok := metadata.FromOutgoingContext(outgoingTrace(context.Background(), http.Header{})); ok {
		t.Error("metadata without any trace context")
	}
}
