// Package otlptest is a minimal OTLP trace receiver for tests and benchmarks: the collector's
// TraceService over gRPC, or POST /v1/traces over HTTP, on loopback, keeping (or only counting)
// the spans it is sent. The end-to-end suite tests against a real collector (tools/otelcol);
// this one lives in the test's process.
package otlptest
