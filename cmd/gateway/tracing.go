package main

import (
	"context"
	"fmt"
	"time"

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

// newTracing builds the tracer provider of o, nil when tracing is off; shutdown flushes and
// stops it (a no-op when off).
func newTracing(o *options, log *zap.Logger) (tp *sdktrace.TracerProvider, shutdown func(), err error) {
	endpoint := tracing.Endpoint(o.OTLPTracesEndpoint)
	if endpoint == "" {
		return nil, func() {}, nil
	}
	if tp, err = tracing.NewProvider(endpoint, o.OTLPTracesSampleRatio); err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
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
