package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/internal/testutil/otlptest"
)

// discardExporter drops what it is given: the cost of recording and batching spans alone.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkRequestSpans measures the process CPU per traced request (getrusage, so the
// exporter's goroutine counts, not only the loop's): a server span and the four stage spans
// with the pipeline's attributes, as pkg/pipeline records a completion, through the provider
// NewProvider builds. export=none batches them into an exporter that drops them;
// export=http/discard sends them over OTLP/HTTP to a loopback handler that reads and discards
// the body (the gateway's share of an export: encoding and sending); export=grpc/receiver to
// an OTLP/gRPC receiver in this process that decodes them, as BenchmarkGatewayOverheadTraced
// does. Spans are exported in batches of 512, each span once; Shutdown's flush is timed.
func BenchmarkRequestSpans(b *testing.B) {
	for _, exp := range []string{"none", "http/discard", "grpc/receiver"} {
		b.Run("export="+exp, func(b *testing.B) {
			var tp *sdktrace.TracerProvider
			switch exp {
			case "none":
				tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(NewBatchProcessor(discardExporter{}, BatchConfig{})))
			case "http/discard":
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", "application/x-protobuf")
				}))
				b.Cleanup(srv.Close)
				b.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
				tp = benchProvider(b, srv.URL)
			default:
				b.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
				_, endpoint := otlptest.Start(b, "grpc", false)
				tp = benchProvider(b, endpoint)
			}
			tr := tp.Tracer("bench")
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				requestSpans(ctx, tr)
			}
			if err := tp.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/req")
		})
	}
}

// benchProvider is NewProvider to endpoint at 100% sampling.
func benchProvider(b *testing.B, endpoint string) *sdktrace.TracerProvider {
	b.Helper()
	tp, _, err := NewProvider(endpoint, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	return tp
}

// requestSpans records one completion's spans: the server span, parse, prompt, route (a
// timestamped span with seven attributes) and upstream (a client span).
func requestSpans(ctx context.Context, tr trace.Tracer) {
	ctx, srv := tr.Start(ctx, "POST /v1/completions", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", "POST"), attribute.String("http.route", "/v1/completions")))
	_, parse := tr.Start(ctx, "kvgate.parse")
	parse.End()
	_, prompt := tr.Start(ctx, "kvgate.prompt")
	prompt.SetAttributes(attribute.Int("kvgate.prompts", 1), attribute.Int("kvgate.prompt_tokens", 1000))
	prompt.End()
	_, route := tr.Start(ctx, "kvgate.route", trace.WithTimestamp(time.Now()))
	route.SetAttributes(attribute.String("kvgate.worker", "http://127.0.0.1:8001"), attribute.String("kvgate.policy", "cache_aware"),
		attribute.String("kvgate.route.reason", "prefix"), attribute.Int("kvgate.matched_blocks", 31), attribute.Int("kvgate.request_blocks", 62),
		attribute.String("kvgate.match_source", "events"), attribute.Int("kvgate.candidates", 3))
	route.End()
	_, up := tr.Start(ctx, "kvgate.upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("kvgate.worker", "http://127.0.0.1:8001"), attribute.Int("kvgate.attempt", 0), attribute.String("gen_ai.request.model", "m")))
	up.SetAttributes(attribute.Int("http.response.status_code", 200))
	up.End()
	srv.SetAttributes(attribute.Int("http.response.status_code", 200))
	srv.End()
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
