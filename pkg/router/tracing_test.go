package router

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
)

// The span names and attributes operators see (docs/operations.md, "Tracing"), spelled out so
// that renaming one in the pipeline fails here.
const (
	spanParse      = "kvgate.parse"
	spanPrompt     = "kvgate.prompt"
	spanRoute      = "kvgate.route"
	spanUpstream   = "kvgate.upstream"
	legNamePrefill = "prefill"
	legNameDecode  = "decode"
)

const (
	attrWorker       = attribute.Key("kvgate.worker")
	attrPolicy       = attribute.Key("kvgate.policy")
	attrReason       = attribute.Key("kvgate.route.reason")
	attrMatched      = attribute.Key("kvgate.matched_blocks")
	attrCandidates   = attribute.Key("kvgate.candidates")
	attrPromptTokens = attribute.Key("kvgate.prompt_tokens")
	attrLeg          = attribute.Key("kvgate.pd.leg")
	attrStatus       = attribute.Key("http.response.status_code")
)

// clientTraceparent is the W3C trace context a client sends (sampled).
const (
	clientTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID      = "00f067aa0ba902b7"
	clientTraceparent = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// newTracedGateway returns a gateway over one fake worker whose spans the returned recorder
// holds.
func newTracedGateway(t *testing.T, tc testConfig) (*testGateway, *fakeWorker, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	tc.Tracing = tp
	fw := newFakeWorker(t, "test-model")
	return newTestGateway(t, tc, fw.url()), fw, rec
}

// postTraced sends a completion with the given traceparent ("" for none).
func postTraced(t *testing.T, g *testGateway, traceparent, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
		req.Header.Set("Tracestate", "vendor=1")
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// endedSpans waits until a span named name has ended and returns every ended span by name (the
// last of each name).
func endedSpans(t *testing.T, g *testGateway, rec *tracetest.SpanRecorder, name string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	g.waitFor(t, "span "+name, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				return true
			}
		}
		return false
	})
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		out[s.Name()] = s
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestTracingSpanTreeAndPropagation(t *testing.T) {
	g, fw, rec := newTracedGateway(t, testConfig{Policy: &fixedPolicy{}})
	resp := postTraced(t, g, clientTraceparent, `{"model":"test-model","prompt":"hello traced world","max_tokens":1}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := endedSpans(t, g, rec, "POST /v1/completions")
	server := spans["POST /v1/completions"]
	if server.SpanKind() != trace.SpanKindServer || server.SpanContext().TraceID().String() != clientTraceID ||
		server.Parent().SpanID().String() != clientSpanID || !server.Parent().IsRemote() {
		t.Fatalf("server span does not continue the client's trace: kind %v trace %s parent %s", server.SpanKind(), server.SpanContext().TraceID(), server.Parent().SpanID())
	}
	if got := attrs(server)[attrStatus].AsInt64(); got != 200 {
		t.Errorf("server span status attribute %d, want 200", got)
	}
	if got := server.SpanContext().TraceState().Get("vendor"); got != "1" {
		t.Errorf("tracestate vendor=%q, want the client's 1", got)
	}
	for _, name := range []string{spanParse, spanPrompt, spanRoute, spanUpstream} {
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no %s span; have %v", name, spanNames(rec))
		}
		if s.Parent().SpanID() != server.SpanContext().SpanID() || s.SpanContext().TraceID() != server.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the server span", name)
		}
	}
	route := attrs(spans[spanRoute])
	if route[attrWorker].AsString() != fw.url() || route[attrReason].AsString() != string(policy.ReasonRoundRobin) ||
		route[attrPolicy].AsString() == "" || route[attrCandidates].AsInt64() != 1 {
		t.Errorf("route span attributes %v", route)
	}
	if _, ok := route[attrMatched]; !ok {
		t.Errorf("route span has no %s", attrMatched)
	}
	if got := attrs(spans[spanPrompt])[attrPromptTokens].AsInt64(); got != int64(len("hello traced world")) {
		t.Errorf("prompt tokens %d", got)
	}
	up := spans[spanUpstream]
	if up.SpanKind() != trace.SpanKindClient || attrs(up)[attrWorker].AsString() != fw.url() || attrs(up)[attrStatus].AsInt64() != 200 {
		t.Errorf("upstream span kind %v attributes %v", up.SpanKind(), attrs(up))
	}
	if ev := eventNames(up); !strings.Contains(ev, "response") || !strings.Contains(ev, "first_token") {
		t.Errorf("upstream span events %q, want response and first_token", ev)
	}
	// The worker sees the upstream span as its parent, in the client's trace.
	h := <-fw.headers
	want := "00-" + clientTraceID + "-" + up.SpanContext().SpanID().String() + "-01"
	if got := h.Get("Traceparent"); got != want {
		t.Errorf("worker traceparent %q, want %q", got, want)
	}
	if got := h.Get("Tracestate"); got != "vendor=1" {
		t.Errorf("worker tracestate %q", got)
	}
}

func TestTracingNewTraceWithoutClientContext(t *testing.T) {
	g, fw, rec := newTracedGateway(t, testConfig{})
	postTraced(t, g, "", `{"model":"test-model","prompt":"hi","max_tokens":1}`)
	spans := endedSpans(t, g, rec, "POST /v1/completions")
	if spans["POST /v1/completions"].Parent().IsValid() {
		t.Error("server span has a parent without a client traceparent")
	}
	up := spans[spanUpstream]
	h := <-fw.headers
	if got, want := h.Get("Traceparent"), "00-"+up.SpanContext().TraceID().String()+"-"+up.SpanContext().SpanID().String()+"-01"; got != want {
		t.Errorf("worker traceparent %q, want %q", got, want)
	}
}

func TestTracingRejectedRequestSpan(t *testing.T) {
	g, _, rec := newTracedGateway(t, testConfig{})
	if resp := postTraced(t, g, clientTraceparent, `{"model":"no-such-model","prompt":"hi"}`); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := endedSpans(t, g, rec, "POST /v1/completions")
	if got := attrs(spans["POST /v1/completions"])[attrStatus].AsInt64(); got != 404 {
		t.Errorf("server span status %d", got)
	}
	if got := attrs(spans[spanParse])[attrStatus].AsInt64(); got != 404 {
		t.Errorf("parse span status %d", got)
	}
	if _, ok := spans[spanUpstream]; ok {
		t.Error("an upstream span for a request never sent")
	}
}

func TestTracingOffForwardsClientContext(t *testing.T) {
	fw := newFakeWorker(t, "test-model")
	g := newTestGateway(t, testConfig{}, fw.url())
	postTraced(t, g, clientTraceparent, `{"model":"test-model","prompt":"hi","max_tokens":1}`)
	if got := (<-fw.headers).Get("Traceparent"); got != clientTraceparent {
		t.Errorf("worker traceparent %q, want the client's", got)
	}
}

func spanNames(rec *tracetest.SpanRecorder) []string {
	var out []string
	for _, s := range rec.Ended() {
		out = append(out, s.Name())
	}
	return out
}

func eventNames(s sdktrace.ReadOnlySpan) string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return strings.Join(out, ",")
}

// A gRPC worker gets the upstream span's context as traceparent metadata.
func TestTracingPropagatesToGRPCWorkers(t *testing.T) {
	f := newFakeVLLM()
	seen := make(chan []string, 4)
	f.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		md, _ := metadata.FromIncomingContext(s.Context())
		seen <- md.Get("traceparent")
		return echoUpper(r, s)
	}
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	g := newTestGateway(t, testConfig{Tracing: tp}, "url=grpc://"+addr+",runtime=vllm")
	if resp := postTraced(t, g, clientTraceparent, `{"prompt":"abc","max_tokens":2}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	up := endedSpans(t, g, rec, "POST /v1/completions")[spanUpstream]
	if up == nil {
		t.Fatalf("no upstream span; have %v", spanNames(rec))
	}
	want := "00-" + clientTraceID + "-" + up.SpanContext().SpanID().String() + "-01"
	if got := <-seen; len(got) != 1 || got[0] != want {
		t.Errorf("gRPC worker traceparent %v, want [%s]", got, want)
	}
}

// A prefill/decode pair's legs are each an upstream span under the request's, and each worker
// gets its own leg's span as parent.
func TestTracingPDLegs(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	nixlPrefill(p, nixlParams)
	decodeAnswer(d)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1}, Tracing: tp}, "url="+p.url()+",role=prefill", "url="+d.url()+",role=decode")
	body, _ := json.Marshal(map[string]any{"prompt": longPrompt, "max_tokens": 5})
	if resp := postTraced(t, g, clientTraceparent, string(body)); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	endedSpans(t, g, rec, "POST /v1/completions")
	var server sdktrace.ReadOnlySpan
	legs := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "POST /v1/completions":
			server = s
		case spanUpstream:
			legs[attrs(s)[attrLeg].AsString()] = s
		}
	}
	for leg, w := range map[string]*fakeWorker{legNamePrefill: p, legNameDecode: d} {
		s, ok := legs[leg]
		if !ok {
			t.Fatalf("no %s leg span; have %v", leg, spanNames(rec))
		}
		if s.Parent().SpanID() != server.SpanContext().SpanID() || attrs(s)[attrWorker].AsString() != w.url() {
			t.Errorf("%s leg: parent %s worker %s", leg, s.Parent().SpanID(), attrs(s)[attrWorker].AsString())
		}
		if got, want := (<-w.headers).Get("Traceparent"), "00-"+clientTraceID+"-"+s.SpanContext().SpanID().String()+"-01"; got != want {
			t.Errorf("%s worker traceparent %q, want %q", leg, got, want)
		}
	}
}
