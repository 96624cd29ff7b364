package tracing

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

const defaultTestTimeout = 10 * time.Second

// recExporter publishes each batch's span names on batches; with block set, an export waits
// for it (or its context) first.
type recExporter struct {
	batches  chan []string
	block    chan struct{}
	shutdown atomic.Bool
}

func newRecExporter() *recExporter { return &recExporter{batches: make(chan []string, 64)} }

func (e *recExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.block != nil {
		select {
		case <-e.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name()
	}
	e.batches <- names
	return nil
}

func (e *recExporter) Shutdown(context.Context) error { e.shutdown.Store(true); return nil }

// next returns the next exported batch, failing the test after defaultTestTimeout.
func (e *recExporter) next(t *testing.T) []string {
	t.Helper()
	select {
	case b := <-e.batches:
		return b
	case <-time.After(defaultTestTimeout):
		t.Fatal("no export")
		return nil
	}
}

// none fails the test if a batch was exported.
func (e *recExporter) none(t *testing.T) {
	t.Helper()
	select {
	case b := <-e.batches:
		t.Fatalf("unexpected export of %v", b)
	default:
	}
}

// spans ends n sampled spans named prefix0, prefix1, … through p.
func spans(tp *sdktrace.TracerProvider, prefix string, n int) {
	tr := tp.Tracer("test")
	for i := range n {
		_, s := tr.Start(context.Background(), prefix+strconv.Itoa(i))
		s.End()
	}
}

func newTestProvider(t *testing.T, exp sdktrace.SpanExporter, cfg BatchConfig) (*sdktrace.TracerProvider, *BatchProcessor) {
	t.Helper()
	p := NewBatchProcessor(exp, cfg)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, p
}

// A full batch is exported at once, long before the schedule delay; a partial one waits.
func TestBatchProcessorExportsFullBatches(t *testing.T) {
	exp := newRecExporter()
	tp, p := newTestProvider(t, exp, BatchConfig{ScheduleDelay: time.Hour, MaxExportBatchSize: 3, MaxQueueSize: 16})
	spans(tp, "a", 7)
	if got, want := exp.next(t), []string{"a0", "a1", "a2"}; !cmp.Equal(got, want) {
		t.Errorf("first batch: got %v, want %v", got, want)
	}
	if got, want := exp.next(t), []string{"a3", "a4", "a5"}; !cmp.Equal(got, want) {
		t.Errorf("second batch: got %v, want %v", got, want)
	}
	exp.none(t)
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := exp.next(t), []string{"a6"}; !cmp.Equal(got, want) {
		t.Errorf("flushed: got %v, want %v", got, want)
	}
}

// A partial batch is exported after the schedule delay.
func TestBatchProcessorScheduleDelay(t *testing.T) {
	exp := newRecExporter()
	tp, _ := newTestProvider(t, exp, BatchConfig{ScheduleDelay: 10 * time.Millisecond})
	spans(tp, "a", 2)
	if got, want := exp.next(t), []string{"a0", "a1"}; !cmp.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// With the exporter stuck, ending spans never blocks: past the queue's size they are dropped
// and counted; what was queued is exported once the exporter moves again.
func TestBatchProcessorDropsWhenFull(t *testing.T) {
	exp := newRecExporter()
	exp.block = make(chan struct{})
	tp, p := newTestProvider(t, exp, BatchConfig{ScheduleDelay: time.Hour, MaxExportBatchSize: 2, MaxQueueSize: 4})
	spans(tp, "a", 2) // woken: the exporter takes these two and blocks
	waitTaken(t, p)
	spans(tp, "b", 7) // four queue, three are dropped
	if got := p.Dropped(); got != 3 {
		t.Errorf("dropped: got %d, want 3", got)
	}
	close(exp.block)
	var got []string
	for len(got) < 6 {
		got = append(got, exp.next(t)...)
	}
	if want := []string{"a0", "a1", "b0", "b1", "b2", "b3"}; !cmp.Equal(got, want) {
		t.Errorf("exported: got %v, want %v", got, want)
	}
}

// waitTaken waits until p's queue is empty (the exporter took the batch).
func waitTaken(t *testing.T, p *BatchProcessor) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		n := len(p.queue)
		p.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the exporter never took its batch")
		}
		<-tick.C
	}
}

// An export that outlasts the export timeout is cancelled, and the flush reports it.
func TestBatchProcessorExportTimeout(t *testing.T) {
	exp := newRecExporter()
	exp.block = make(chan struct{}) // never closed: only the timeout ends the export
	tp, p := newTestProvider(t, exp, BatchConfig{ScheduleDelay: time.Hour, ExportTimeout: 20 * time.Millisecond})
	spans(tp, "a", 1)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	err := p.ForceFlush(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("flush: got %v, want a deadline exceeded", err)
	}
	if d := time.Since(start); d > defaultTestTimeout/2 {
		t.Errorf("flush took %v", d)
	}
}

// Shutdown exports what is queued, shuts the exporter down, and drops later spans; unsampled
// spans are never exported.
func TestBatchProcessorShutdownFlushes(t *testing.T) {
	exp := newRecExporter()
	p := NewBatchProcessor(exp, BatchConfig{ScheduleDelay: time.Hour})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	spans(tp, "a", 3)
	never := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p), sdktrace.WithSampler(sdktrace.NeverSample()))
	spans(never, "unsampled", 2)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := exp.next(t), []string{"a0", "a1", "a2"}; !cmp.Equal(got, want) {
		t.Errorf("flushed at shutdown: got %v, want %v", got, want)
	}
	if !exp.shutdown.Load() {
		t.Error("the exporter was not shut down")
	}
	spans(tp, "late", 1) // the provider is shut down: nothing reaches the processor
	p.OnEnd(endedSpan(t))
	if got := p.Dropped(); got != 1 {
		t.Errorf("dropped after shutdown: got %d, want 1", got)
	}
	exp.none(t)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
}

// endedSpan returns a finished sampled span from a provider of its own.
func endedSpan(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	var got sdktrace.ReadOnlySpan
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, s := tp.Tracer("x").Start(context.Background(), "late")
	s.End()
	got, ok := s.(sdktrace.ReadOnlySpan)
	if !ok {
		t.Fatal("not a ReadOnlySpan")
	}
	return got
}

func TestBatchConfigFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    BatchConfig
		wantErr string
	}{
		{"unset", nil, BatchConfig{}, ""},
		{"all set", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BSP_EXPORT_TIMEOUT": "1500",
			"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10"},
			BatchConfig{ScheduleDelay: 250 * time.Millisecond, ExportTimeout: 1500 * time.Millisecond, MaxQueueSize: 100, MaxExportBatchSize: 10}, ""},
		{"no export limit", map[string]string{"OTEL_BSP_EXPORT_TIMEOUT": "0"}, BatchConfig{ExportTimeout: -1}, ""},
		{"not a number", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "5s"}, BatchConfig{}, "OTEL_BSP_SCHEDULE_DELAY"},
		{"zero delay", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "0"}, BatchConfig{}, "OTEL_BSP_SCHEDULE_DELAY"},
		{"negative queue", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, BatchConfig{}, "OTEL_BSP_MAX_QUEUE_SIZE"},
		{"huge queue", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "99999999999"}, BatchConfig{}, "OTEL_BSP_MAX_QUEUE_SIZE"},
		{"zero batch", map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "0"}, BatchConfig{}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"} {
				t.Setenv(k, tt.env[k])
			}
			got, err := BatchConfigFromEnv()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBatchConfigDefaults(t *testing.T) {
	got := BatchConfig{MaxQueueSize: 8, MaxExportBatchSize: 100}.withDefaults()
	want := BatchConfig{ScheduleDelay: DefaultScheduleDelay, ExportTimeout: DefaultExportTimeout, MaxQueueSize: 8, MaxExportBatchSize: 8}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}
