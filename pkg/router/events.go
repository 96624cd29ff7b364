package router

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
func (rt *Router) newEventSource(m *member) (kvbridge.Source, error) {
	dial, err := engine.DialOptions(m.w.Spec())
	if err != nil {
		return nil, err
	}
	opts := kvbridge.SourceOptions{Dial: dial, Logger: rt.log, Metrics: rt.cfg.KVMetrics}
	if ec, ok := m.eng.(engine.EventConn); ok {
		opts.Self = func(ctx context.Context) (grpc.ClientConnInterface, worker.Runtime, error) { return ec.EventConn(ctx) }
	}
	return kvbridge.NewSource(m.w.Spec(), m.sink, opts)
}

// startCollectorLocked starts the --kv-listen collector under ctx: one bound SUB, batches
// attributed to workers by topic (collectorConsumer).
func (rt *Router) startCollectorLocked(ctx context.Context) error {
	col, err := kvbridge.NewZMQCollector(kvbridge.CollectorConfig{
		Listen: rt.cfg.KVListen,
		Replay: func(topic string) string {
			if m := rt.memberForTopic(topic); m != nil && m.w.Spec().Replay != "" {
				return m.w.Spec().Replay
			}
			return ""
		},
	}, func(topic string) (kvbridge.Consumer, int, bool) {
		host, ok := topicHost(topic)
		if !ok {
			return nil, 0, false
		}
		return &collectorConsumer{rt: rt, host: host}, 0, true
	}, rt.log.Named("kv-listen"), rt.cfg.KVMetrics)
	if err != nil {
		return fmt.Errorf("router: --kv-listen: %w", err)
	}
	rt.collector.Store(col)
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := col.Run(ctx); err != nil && ctx.Err() == nil {
			rt.log.Warn("kv-listen collector ended", zap.Error(err))
		}
	}()
	rt.log.Info("kv-listen collector started", zap.String("listen", rt.cfg.KVListen))
	return nil
}

// syncCollector waits until the --kv-listen collector delivers nothing into a member removed
// before the call (it delivers on one goroutine; see kvbridge.ZMQCollector.Sync), so that the
// member's WorkerIDs can be freed and reused.
func (rt *Router) syncCollector() {
	col := rt.collector.Load()
	if col == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := col.Sync(ctx); err != nil {
		rt.log.Warn("kv-listen collector did not settle", zap.Error(err))
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
func (rt *Router) memberForTopic(topic string) *member {
	host, ok := topicHost(topic)
	if !ok {
		return nil
	}
	return rt.fleet.Load().byHost[host]
}

// collectorConsumer delivers one topic's batches into whichever worker currently has that
// host:port: looked up per batch, so a worker removed and added again is fed again, and a topic
// of no (or a removed) worker is dropped. It takes no lock: RemoveWorker marks the member
// removed and then waits for the collector (syncCollector) before freeing its IDs.
type collectorConsumer struct {
	rt   *Router
	host string
}

func (c *collectorConsumer) member() *member {
	m := c.rt.fleet.Load().byHost[c.host]
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

// isUnimplemented reports whether a source ended because the worker has no event stream.
func isUnimplemented(err error) bool { return errors.Is(err, kvbridge.ErrUnimplemented) }

var _ kvbridge.Consumer = (*collectorConsumer)(nil)
