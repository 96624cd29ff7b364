package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// The event path: each member's own source (kvbridge.NewSource from its spec) delivers into the
// index through the member's SinkConsumer (rank r as its r-th WorkerID); the --kv-listen
// collector delivers by topic into whichever member has that host:port. The index learns block
// sizes from the events itself.

// newEventSource builds the member's own event source, or nil when it has none.
func (m *Member) newEventSource() (kvbridge.Source, error) {
	dial, err := engine.DialOptions(m.w.Spec())
	if err != nil {
		return nil, err
	}
	opts := kvbridge.SourceOptions{Dial: dial, Logger: m.f.log, Metrics: m.f.cfg.KVMetrics, OnState: m.sourceState}
	if ec, ok := m.eng.(engine.EventConn); ok {
		opts.Self = func(ctx context.Context) (grpc.ClientConnInterface, worker.Runtime, error) { return ec.EventConn(ctx) }
	}
	return kvbridge.NewSource(m.w.Spec(), m.sink, opts)
}

// runSource returns the goroutine body that runs src until ctx ends.
func (m *Member) runSource(src kvbridge.Source) func(context.Context) {
	return func(ctx context.Context) {
		err := src.Run(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, kvbridge.ErrUnimplemented):
			m.f.log.Info("worker has no KV event stream; scoring it from the approximate tree", zap.String("worker", m.w.URL()))
		default:
			m.f.log.Warn("worker event stream ended", zap.String("worker", m.w.URL()), zap.Error(err))
		}
	}
}

// startCollectorLocked starts the --kv-listen collector under ctx: one bound SUB, batches
// attributed to workers by topic (collectorConsumer).
func (f *Fleet) startCollectorLocked(ctx context.Context) error {
	col, err := kvbridge.NewZMQCollector(kvbridge.CollectorConfig{
		Listen: f.cfg.KVListen,
		Replay: func(topic string) string {
			if m := f.memberForTopic(topic); m != nil && m.w.Spec().Replay != "" {
				return m.w.Spec().Replay
			}
			return ""
		},
	}, func(topic string) (kvbridge.Consumer, int, bool) {
		c := f.TopicConsumer(topic)
		return c, 0, c != nil
	}, f.log.Named("kv-listen"), f.cfg.KVMetrics)
	if err != nil {
		return fmt.Errorf("fleet: --kv-listen: %w", err)
	}
	f.collector.Store(col)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := col.Run(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("kv-listen collector ended", zap.Error(err))
		}
	}()
	f.log.Info("kv-listen collector started", zap.String("listen", f.cfg.KVListen))
	return nil
}

// syncCollector waits until the --kv-listen collector delivers nothing into a member removed
// before the call (it delivers on one goroutine; see kvbridge.ZMQCollector.Sync), so that the
// member's WorkerIDs can be freed and reused.
func (f *Fleet) syncCollector() {
	col := f.collector.Load()
	if col == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := col.Sync(ctx); err != nil {
		f.log.Warn("kv-listen collector did not settle", zap.Error(err))
	}
}

// topicHost extracts host:port from a collector topic kv@<host:port>@<model> (llm-d's
// simulator's format); a topic without '@' is taken as host:port itself.
func topicHost(topic string) (string, bool) {
	parts := strings.Split(topic, "@")
	switch {
	case len(parts) >= 2 && parts[1] != "":
		return parts[1], true
	case len(parts) == 1 && parts[0] != "":
		return parts[0], true
	}
	return "", false
}

// memberForTopic returns the current worker a collector topic names, or nil.
func (f *Fleet) memberForTopic(topic string) *Member {
	host, ok := topicHost(topic)
	if !ok {
		return nil
	}
	return f.Snapshot().byHost[host]
}

// TopicConsumer returns the consumer of one collector topic (kv@<host:port>@<model>, or
// host:port alone), nil for a topic that names no host: the --kv-listen collector delivers each
// topic's batches through it, and any other event transport of the embedding program may do the
// same. Its batches go into whichever serving worker has that host:port at the time (see
// collectorConsumer), which is then scored from the event index.
func (f *Fleet) TopicConsumer(topic string) kvbridge.Consumer {
	host, ok := topicHost(topic)
	if !ok {
		return nil
	}
	return &collectorConsumer{f: f, host: host}
}

// collectorConsumer delivers one topic's batches into whichever worker currently has that
// host:port: looked up per batch, so a worker removed and added again is fed again, and a topic
// of no (or a removed) worker is dropped. It takes no lock: teardown marks the member
// removed and then waits for the collector (syncCollector) before freeing its IDs.
type collectorConsumer struct {
	f    *Fleet
	host string
}

func (c *collectorConsumer) member() *Member {
	m := c.f.Snapshot().byHost[c.host]
	if m == nil || m.removed.Load() {
		return nil
	}
	return m
}

func (c *collectorConsumer) Batch(rank int, b *indexer.Batch) bool {
	m := c.member()
	if m == nil {
		return false
	}
	m.collected.Store(true)
	return m.sink.Batch(rank, b)
}

func (c *collectorConsumer) Reset(rank int, reason string) {
	if m := c.member(); m != nil {
		m.sink.Reset(rank, reason)
	}
}

var _ kvbridge.Consumer = (*collectorConsumer)(nil)

// CollectorEndpoint returns the endpoint the --kv-listen collector is bound to (its port
// resolved when Config.KVListen asked for any), or "" before Run has bound it or without one.
func (f *Fleet) CollectorEndpoint() string {
	if col := f.collector.Load(); col != nil {
		return col.Endpoint()
	}
	return ""
}
