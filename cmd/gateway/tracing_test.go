package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpSink collects the spans an OTLP exporter sends, over HTTP (/v1/traces) or gRPC.
type otlpSink struct {
	coltrace.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []*tracepb.Span
	service string
}

func (s *otlpSink) add(req *coltrace.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				s.service = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			s.spans = append(s.spans, ss.Spans...)
		}
	}
}

func (s *otlpSink) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	s.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	s.add(&req)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(out)
}

// startSink serves a sink by protocol and returns it with the endpoint URL to export to.
func startSink(t *testing.T, protocol string) (*otlpSink, string) {
	sink := &otlpSink{}
	if protocol == "http/protobuf" {
		srv := httptest.NewServer(sink)
		t.Cleanup(srv.Close)
		return sink, srv.URL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, sink)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return sink, "grpc://" + ln.Addr().String()
}

// The built gateway exports a streamed request's spans over OTLP (both protocols) in the
// client's trace, and the worker receives the upstream span as its parent.
func TestServeExportsTracesOverOTLP(t *testing.T) {
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
			sink, endpoint := startSink(t, protocol)
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
			sink.mu.Lock()
			defer sink.mu.Unlock()
			byName := map[string]*tracepb.Span{}
			for _, s := range sink.spans {
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
			if sink.service != "kvgate" {
				t.Errorf("service.name %q", sink.service)
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
