package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BatchConfig is how a BatchProcessor batches; the zero value of a field means its default,
// the OpenTelemetry specification's (the OTEL_BSP_* variables' defaults).
type BatchConfig struct {
	// ScheduleDelay is the longest a span waits before it is exported (OTEL_BSP_SCHEDULE_DELAY,
	// milliseconds; default 5 s).
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export (OTEL_BSP_EXPORT_TIMEOUT, milliseconds; default 30 s;
	// negative, or 0 in the variable: no limit).
	ExportTimeout time.Duration
	// MaxQueueSize is how many finished spans may wait; past it new ones are dropped
	// (OTEL_BSP_MAX_QUEUE_SIZE; default 2048).
	MaxQueueSize int
	// MaxExportBatchSize is the most spans one export carries, and the queue length at which
	// the exporter is woken before ScheduleDelay (OTEL_BSP_MAX_EXPORT_BATCH_SIZE; default 512,
	// at most MaxQueueSize).
	MaxExportBatchSize int
}

// The specification's defaults of BatchConfig.
const (
	DefaultScheduleDelay      = 5 * time.Second
	DefaultExportTimeout      = 30 * time.Second
	DefaultMaxQueueSize       = 2048
	DefaultMaxExportBatchSize = 512
)

// maxQueueSize bounds OTEL_BSP_MAX_QUEUE_SIZE: a queue is memory the gateway holds.
const maxQueueSize = 1 << 20

// BatchConfigFromEnv reads the OTEL_BSP_* variables (unset: the default). A value that is not
// a whole number in range is an error naming the variable, not silently the default.
func BatchConfigFromEnv() (BatchConfig, error) {
	var c BatchConfig
	var errs []error
	read := func(name string, lo, hi int) int {
		s := os.Getenv(name)
		if s == "" {
			return 0
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("tracing: %s %q: want a whole number from %d to %d", name, s, lo, hi))
			return 0
		}
		return n
	}
	const maxMillis = 24 * 3600 * 1000
	c.ScheduleDelay = time.Duration(read("OTEL_BSP_SCHEDULE_DELAY", 1, maxMillis)) * time.Millisecond
	// 0 is the specification's "no limit".
	if t := read("OTEL_BSP_EXPORT_TIMEOUT", 0, maxMillis); t > 0 {
		c.ExportTimeout = time.Duration(t) * time.Millisecond
	} else if os.Getenv("OTEL_BSP_EXPORT_TIMEOUT") == "0" {
		c.ExportTimeout = -1
	}
	c.MaxQueueSize = read("OTEL_BSP_MAX_QUEUE_SIZE", 1, maxQueueSize)
	c.MaxExportBatchSize = read("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1, maxQueueSize)
	return c, errors.Join(errs...)
}

// withDefaults returns c with its zero fields defaulted and the batch no larger than the queue.
func (c BatchConfig) withDefaults() BatchConfig {
	if c.ScheduleDelay <= 0 {
		c.ScheduleDelay = DefaultScheduleDelay
	}
	if c.ExportTimeout == 0 {
		c.ExportTimeout = DefaultExportTimeout
	}
	if c.MaxQueueSize <= 0 {
		c.MaxQueueSize = DefaultMaxQueueSize
	}
	if c.MaxExportBatchSize <= 0 {
		c.MaxExportBatchSize = DefaultMaxExportBatchSize
	}
	c.MaxExportBatchSize = min(c.MaxExportBatchSize, c.MaxQueueSize)
	return c
}

// BatchProcessor is the gateway's span processor: it queues finished sampled spans and hands
// them to its exporter in batches. Unlike the SDK's batch processor, which sends every span
// over a channel to its export goroutine (waking it once per span, several times per
// request), ending a span here appends it to a slice under a mutex, and the export goroutine
// is woken once per MaxExportBatchSize spans, or by its ScheduleDelay timer. A full queue
// drops the span and counts it (Dropped); ending a span never waits for an export.
//
// Its one goroutine is started by NewBatchProcessor and joined by Shutdown (the tracer
// provider's Shutdown calls it), which exports what is queued. Methods are safe for
// concurrent use. A BatchProcessor must not be copied.
type BatchProcessor struct {
	exp     sdktrace.SpanExporter
	cfg     BatchConfig
	wake    chan struct{} // capacity 1: one pending wake-up is enough
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped atomic.Uint64

	// mu guards queue and stopped. Never held while exporting.
	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	stopped bool

	// exportMu serialises exports (the goroutine's, ForceFlush's and Shutdown's) and guards
	// batch, the slice handed to the exporter, reused across exports.
	exportMu sync.Mutex
	batch    []sdktrace.ReadOnlySpan
}

// NewBatchProcessor returns a processor exporting to exp as cfg says (zero fields: defaults)
// and starts its export goroutine; the caller (the tracer provider) must Shutdown it.
func NewBatchProcessor(exp sdktrace.SpanExporter, cfg BatchConfig) *BatchProcessor {
	cfg = cfg.withDefaults()
	p := &BatchProcessor{exp: exp, cfg: cfg, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		queue: make([]sdktrace.ReadOnlySpan, 0, min(cfg.MaxExportBatchSize, 4096))}
	go p.run()
	return p
}

// OnStart does nothing: only finished spans are exported.
func (p *BatchProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s for export when it is sampled, or drops and counts it when the queue is full
// or the processor shut down.
func (p *BatchProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	p.mu.Lock()
	if p.stopped || len(p.queue) >= p.cfg.MaxQueueSize {
		p.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	p.queue = append(p.queue, s)
	full := len(p.queue) == p.cfg.MaxExportBatchSize
	p.mu.Unlock()
	if full {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// Dropped returns how many finished spans were dropped because the queue was full (or the
// processor shut down).
func (p *BatchProcessor) Dropped() uint64 { return p.dropped.Load() }

// run exports full batches when woken and everything queued every ScheduleDelay, until stop.
func (p *BatchProcessor) run() {
	defer close(p.done)
	timer := time.NewTimer(p.cfg.ScheduleDelay)
	defer timer.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
			p.export(context.Background(), true)
		case <-timer.C:
			p.export(context.Background(), false)
			timer.Reset(p.cfg.ScheduleDelay)
		}
	}
}

// export hands the queue to the exporter in batches of at most MaxExportBatchSize: only full
// batches when fullOnly, else everything queued. It returns the first export error; failures
// go to OpenTelemetry's error handler either way.
func (p *BatchProcessor) export(ctx context.Context, fullOnly bool) error {
	p.exportMu.Lock()
	defer p.exportMu.Unlock()
	var first error
	for {
		p.mu.Lock()
		n := min(len(p.queue), p.cfg.MaxExportBatchSize)
		if n == 0 || (fullOnly && n < p.cfg.MaxExportBatchSize) {
			p.mu.Unlock()
			return first
		}
		if n == len(p.queue) {
			// The whole queue: swap it with the spare slice instead of copying.
			p.batch, p.queue = p.queue, p.batch[:0]
		} else {
			p.batch = append(p.batch[:0], p.queue[:n]...)
			rest := copy(p.queue, p.queue[n:])
			clear(p.queue[rest:])
			p.queue = p.queue[:rest]
		}
		p.mu.Unlock()
		if err := p.exportBatch(ctx); err != nil {
			otel.Handle(err)
			if first == nil {
				first = err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// exportBatch exports p.batch within the export timeout and empties it; exportMu is held.
func (p *BatchProcessor) exportBatch(ctx context.Context) error {
	if p.cfg.ExportTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.ExportTimeout)
		defer cancel()
	}
	err := p.exp.ExportSpans(ctx, p.batch)
	clear(p.batch) // the spans are garbage now
	p.batch = p.batch[:0]
	if err != nil {
		return fmt.Errorf("tracing: export: %w", err)
	}
	return nil
}

// ForceFlush exports everything queued now, within ctx.
func (p *BatchProcessor) ForceFlush(ctx context.Context) error {
	return p.export(ctx, false)
}

// Shutdown stops the export goroutine, exports what is queued and shuts the exporter down,
// within ctx. Spans ended afterwards are dropped. Only the first call does anything.
func (p *BatchProcessor) Shutdown(ctx context.Context) error {
	var err error
	p.once.Do(func() {
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		err = errors.Join(p.export(ctx, false), p.exp.Shutdown(ctx))
	})
	return err
}

var _ sdktrace.SpanProcessor = (*BatchProcessor)(nil)
