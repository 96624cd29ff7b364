package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
)

// The OTLP trace exporter (docs/operations.md, "Tracing"). It is on when --otlp-traces-endpoint
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (vLLM's flag and the standard variable), unless
// OTEL_SDK_DISABLED=true; everything else comes from the standard OTEL_* variables: the
// protocol (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, grpc by default as in vLLM, or http/protobuf),
// headers, TLS, timeout, the sampler (OTEL_TRACES_SAMPLER[_ARG], unless
// --otlp-traces-sample-ratio is given), the batch processor (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; the service name defaults to kvgate).

// tracingShutdownTimeout bounds the final flush of buffered spans at shutdown.
const tracingShutdownTimeout = 5 * time.Second

// tracesEndpoint returns the configured OTLP traces endpoint, "" when tracing is off.
func tracesEndpoint(o *options) string {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return ""
	}
	if o.OTLPTracesEndpoint != "" {
		return o.OTLPTracesEndpoint
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
}

// tracesProtocol returns the OTLP protocol from the standard variables: grpc or http/protobuf.
func tracesProtocol() (string, error) {
	p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", "grpc":
		return "grpc", nil
	case "http/protobuf":
		return p, nil
	}
	return "", fmt.Errorf("gateway: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL %q: want grpc or http/protobuf", p)
}

// newTracing builds the tracer provider of o, nil when tracing is off; shutdown flushes and
// stops it (a no-op when off).
func newTracing(o *options, log *zap.Logger) (tp *sdktrace.TracerProvider, shutdown func(), err error) {
	endpoint := tracesEndpoint(o)
	if endpoint == "" {
		return nil, func() {}, nil
	}
	exp, err := newTraceExporter(endpoint)
	if err != nil {
		return nil, nil, err
	}
	// The service name defaults to kvgate; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
	// detected after it, override it.
	res, err := resource.New(context.Background(), resource.WithAttributes(attribute.String("service.name", "kvgate")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: tracing resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if r := o.OTLPTracesSampleRatio; r >= 0 {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))))
	}
	tp = sdktrace.NewTracerProvider(opts...)
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

// newTraceExporter returns the OTLP exporter for endpoint, a URL (http:// or grpc:// for plain
// text, https:// for TLS), by the configured protocol. An http/protobuf URL without a path
// gets the standard /v1/traces.
func newTraceExporter(endpoint string) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("gateway: --otlp-traces-endpoint %q: want a URL such as http://127.0.0.1:4317", endpoint)
	}
	proto, err := tracesProtocol()
	if err != nil {
		return nil, err
	}
	if proto == "grpc" {
		return otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(endpoint))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	if u.Scheme == "grpc" {
		u.Scheme = "http"
	}
	return otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u.String()))
}
