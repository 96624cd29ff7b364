package tracing

import (
	"context"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/otlptest"
)

// The provider's batching follows OTEL_BSP_*: with a batch of 2 and an hour's delay, four spans
// reach the receiver at once, in two exports.
func TestNewProviderBatchesByEnv(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
			t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
			sink, endpoint := otlptest.Start(t, protocol, true)
			tp, _, err := NewProvider(endpoint, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tp.Shutdown(context.Background()) }()
			spans(tp, "a", 4)
			testutil.WaitFor(t, "four spans", func() bool { n, _ := sink.Count(); return n == 4 })
			if n, exports := sink.Count(); exports != 2 {
				t.Errorf("%d spans in %d exports, want 2 exports", n, exports)
			}
			if got := sink.Service(); got != "kvgate" {
				t.Errorf("service.name: got %q, want kvgate", got)
			}
		})
	}
}

func TestNewProviderErrors(t *testing.T) {
	tests := []struct {
		name, endpoint, env, value, want string
	}{
		{"bad protocol", "grpc://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift", "want grpc or http/protobuf"},
		{"not a URL", "127.0.0.1:4317", "", "", "want a URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(tt.env, tt.value)
			}
			_, _, err := NewProvider(tt.endpoint, 1, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	tests := []struct {
		name, flag, env, disabled, want string
	}{
		{"off", "", "", "", ""},
		{"flag", "http://a:4317", "http://b:4317", "", "http://a:4317"},
		{"variable", "", "http://b:4317", "", "http://b:4317"},
		{"disabled", "http://a:4317", "", "TRUE", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tt.env)
			t.Setenv("OTEL_SDK_DISABLED", tt.disabled)
			if got := Endpoint(tt.flag); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// A bad OTEL_BSP_* value is a warning and its default, not a failure to start.
func TestNewProviderWarnsOnBadBatchVariable(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "lots")
	var warned []error
	tp, bp, err := NewProvider("grpc://127.0.0.1:1", 1, func(e error) { warned = append(warned, e) })
	if err != nil {
		t.Fatalf("got %v, want a provider", err)
	}
	defer tp.Shutdown(context.Background())
	if len(warned) != 1 || !strings.Contains(warned[0].Error(), "OTEL_BSP_MAX_QUEUE_SIZE") {
		t.Errorf("warnings: got %v, want one naming OTEL_BSP_MAX_QUEUE_SIZE", warned)
	}
	if got := bp.cfg.MaxQueueSize; got != DefaultMaxQueueSize {
		t.Errorf("queue size: got %d, want the default %d", got, DefaultMaxQueueSize)
	}
}
