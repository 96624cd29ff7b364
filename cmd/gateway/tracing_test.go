package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/kvgate/kvgate/internal/testutil/otlptest"
)

// The built gateway exports a streamed request's spans over OTLP (both protocols) in the
// client's trace, and the worker receives the upstream span as its parent.
func TestServeExportsTracesOverOTLP(t *testing.T) {
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
			sink, endpoint := otlptest.Start(t, protocol, true)
			seen := make(chan string, 4)
			w := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/completions" {
					seen <- r.Header.Get("Traceparent")
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\ndata: [DONE]\n\n")
				}
			}))
			defer w.Close()
			gw := startGateway(t, "--worker", w.URL, "--model", "m", "--otlp-traces-endpoint", endpoint)
			waitReady(t, gw.api)
			req, _ := http.NewRequest(http.MethodPost, gw.api+"/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Traceparent", "00-"+traceID+"-"+clientSpan+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := gw.stop(); err != nil { // flushes the exporter
				t.Fatal(err)
			}
			byName := map[string]*tracepb.Span{}
			for _, s := range sink.Spans() {
				if hex.EncodeToString(s.TraceId) == traceID {
					byName[s.Name] = s
				}
			}
			server, up := byName["POST /v1/completions"], byName["kvgate.upstream"]
			if server == nil || up == nil || byName["kvgate.route"] == nil {
				t.Fatalf("spans of the client's trace: %v", byName)
			}
			if hex.EncodeToString(server.ParentSpanId) != clientSpan || string(up.ParentSpanId) != string(server.SpanId) {
				t.Errorf("parent links: server's %x, upstream's %x (server %x)", server.ParentSpanId, up.ParentSpanId, server.SpanId)
			}
			if got := sink.Service(); got != "kvgate" {
				t.Errorf("service.name %q", got)
			}
			select {
			case got := <-seen:
				if want := "00-" + traceID + "-" + hex.EncodeToString(up.SpanId) + "-01"; got != want {
					t.Errorf("worker traceparent %q, want %q", got, want)
				}
			case <-time.After(time.Second):
				t.Error("the worker got no request")
			}
		})
	}
}
