// Package tracing builds the gateway's OpenTelemetry tracer provider (docs/operations.md,
// "Tracing"): the OTLP trace exporter (gRPC or HTTP) configured from the standard OTEL_*
// variables, the sampler, the resource and the span processor that batches finished spans for
// it. cmd/gateway builds its provider here, and the gateway benchmarks build theirs the same way,
// so that what they measure is what production runs.
//
// It is a leaf package: the pipeline only sees a trace.TracerProvider (DESIGN.md §2).
package tracing
