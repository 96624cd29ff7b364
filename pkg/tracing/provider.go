package tracing

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Endpoint returns the OTLP traces endpoint tracing exports to, "" when tracing is off: flag
// (vLLM's --otlp-traces-endpoint) when set, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, and
// nothing when OTEL_SDK_DISABLED=true.
func Endpoint(flag string) string {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return ""
	}
	if flag != "" {
		return flag
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
}

// Protocol returns the OTLP protocol from the standard variables: grpc (the default, as in
// vLLM) or http/protobuf.
func Protocol() (string, error) {
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
	return "", fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL %q: want grpc or http/protobuf", p)
}

// NewProvider returns a tracer provider exporting over OTLP to endpoint (a URL: http:// or
// grpc:// for plain text, https:// for TLS) by Protocol, with the rest of the exporter's
// settings (headers, TLS, timeout, compression) and the batching (OTEL_BSP_*) from the standard
// variables. sampleRatio in [0, 1] samples that fraction of new traces and follows a client's
// sampled flag; negative leaves the sampler to OTEL_TRACES_SAMPLER[_ARG] (default: every
// trace). The service name defaults to kvgate; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// override it. Finished spans go through a BatchProcessor, returned so its drops can be
// counted. An OTEL_BSP_* value out of range is given to warn (nil: dropped) and its default
// used, as the OpenTelemetry specification asks of SDKs: a typo in a tracing variable must not
// keep the gateway from starting. The caller owns the provider and must Shutdown it, which
// flushes what is queued.
func NewProvider(endpoint string, sampleRatio float64, warn func(error)) (*sdktrace.TracerProvider, *BatchProcessor, error) {
	bcfg, err := BatchConfigFromEnv()
	if err != nil && warn != nil {
		warn(err)
	}
	// The resource detected from the environment comes after the default, so it wins.
	res, err := resource.New(context.Background(), resource.WithAttributes(attribute.String("service.name", "kvgate")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	exp, err := newExporter(endpoint)
	if err != nil {
		return nil, nil, err
	}
	bsp := NewBatchProcessor(exp, bcfg)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(bsp), sdktrace.WithResource(res)}
	if sampleRatio >= 0 {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampleRatio))))
	}
	return sdktrace.NewTracerProvider(opts...), bsp, nil
}

// newExporter returns the OTLP exporter for endpoint by Protocol. An http/protobuf URL without
// a path gets the standard /v1/traces.
func newExporter(endpoint string) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("tracing: endpoint %q: want a URL such as http://127.0.0.1:4317", endpoint)
	}
	proto, err := Protocol()
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
