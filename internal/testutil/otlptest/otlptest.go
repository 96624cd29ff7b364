package otlptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Sink collects the spans OTLP exporters send it. Its methods are safe for concurrent use.
// Sink must not be copied.
type Sink struct {
	coltrace.UnimplementedTraceServiceServer
	keep bool

	// mu guards the fields below.
	mu      sync.Mutex
	spans   []*tracepb.Span
	count   int
	exports int
	service string
}

// Start serves a sink on loopback by protocol ("grpc", else OTLP/HTTP) until the test ends and
// returns it with the endpoint URL to export to (grpc://host:port or http://host:port). With
// keep false the sink only counts spans, so a long benchmark holds no memory for them.
func Start(t testing.TB, protocol string, keep bool) (*Sink, string) {
	t.Helper()
	s := &Sink{keep: keep}
	if protocol != "grpc" {
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return s, srv.URL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return s, "grpc://" + ln.Addr().String()
}

// Spans returns a copy of the spans received (none when the sink only counts).
func (s *Sink) Spans() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracepb.Span(nil), s.spans...)
}

// Count returns how many spans were received, and in how many export requests.
func (s *Sink) Count() (spans, exports int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count, s.exports
}

// Service returns the service.name of the last resource received.
func (s *Sink) Service() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.service
}

func (s *Sink) add(req *coltrace.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exports++
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				s.service = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			s.count += len(ss.Spans)
			if s.keep {
				s.spans = append(s.spans, ss.Spans...)
			}
		}
	}
}

// Export is the TraceService's one call.
func (s *Sink) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	s.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// ServeHTTP answers OTLP/HTTP's POST /v1/traces (binary protobuf).
func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var req coltrace.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	s.add(&req)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}
