package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/tracing"
)

// The OTLP trace exporter (docs/operations.md, "Tracing"). It is on when --otlp-traces-endpoint
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (vLLM's flag and the standard variable), unless
// OTEL_SDK_DISABLED=true; everything else comes from the standard OTEL_* variables (pkg/tracing
// reads them): the protocol, headers, TLS, timeout, the sampler (unless
// --otlp-traces-sample-ratio is given), the batching (OTEL_BSP_*) and the resource.

// tracingShutdownTimeout bounds the final flush of buffered spans at shutdown.
const tracingShutdownTimeout = 5 * time.Second

// newTracing builds the tracer provider of o, nil when tracing is off, and registers on reg the
// count of spans its processor dropped; shutdown flushes and stops it (a no-op when off).
func newTracing(o *options, log *zap.Logger, reg prometheus.Registerer) (tp *sdktrace.TracerProvider, shutdown func(), err error) {
	endpoint := tracing.Endpoint(o.OTLPTracesEndpoint)
	if endpoint == "" {
		return nil, func() {}, nil
	}
	tp, bsp, err := tracing.NewProvider(endpoint, o.OTLPTracesSampleRatio, func(err error) {
		log.Warn("tracing: ignoring a batch processor setting, its default is used", zap.Error(err))
	})
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
	}
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvgate_trace_spans_dropped_total",
		Help: "Finished spans dropped because the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full."},
		func() float64 { return float64(bsp.Dropped()) })
	if err := reg.Register(dropped); err != nil {
		_ = tp.Shutdown(context.Background())
		return nil, nil, fmt.Errorf("gateway: tracing metrics: %w", err)
	}
	// Export failures (a collector down) are logged, never fatal to requests.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", zap.Error(err)) }))
	log.Info("tracing on", zap.String("otlp_endpoint", endpoint))
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("tracing: final export failed", zap.Error(err))
		}
	}, nil
}
