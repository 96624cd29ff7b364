package router

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// newZMQSource builds the ZMQ subscriber of a worker with kv_events=tcp://... (the engine's PUB,
// rank r on port+r, with the replay ROUTER when the spec names one).
func (rt *Router) newZMQSource(m *member) (eventSource, error) {
	spec := m.w.Spec()
	return kvbridge.NewZMQSource(kvbridge.ZMQConfig{
		Worker:   m.w.URL(),
		Endpoint: spec.KVEvents,
		Replay:   spec.Replay,
		Topic:    spec.Topic,
		DPSize:   spec.DPSize,
	}, newIndexConsumer(m), rt.log, rt.cfg.KVMetrics)
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
	rt.collector.Store(&sourceBox{s: col})
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
// of no (or a removed) worker is dropped.
type collectorConsumer struct {
	rt   *Router
	host string
}

func (c *collectorConsumer) Batch(rank int, b *indexer.Batch) bool {
	m := c.rt.fleet.Load().byHost[c.host]
	if m == nil {
		return false
	}
	m.evMu.Lock()
	defer m.evMu.Unlock()
	if m.removed {
		return false
	}
	m.collected.Store(true)
	return newIndexConsumer(m).Batch(rank, b)
}

func (c *collectorConsumer) Reset(rank int, reason string) {
	m := c.rt.fleet.Load().byHost[c.host]
	if m == nil {
		return
	}
	m.evMu.Lock()
	defer m.evMu.Unlock()
	if !m.removed {
		newIndexConsumer(m).Reset(rank, reason)
	}
}

var (
	_ eventSource       = (*kvbridge.ZMQSource)(nil)
	_ eventSource       = (*kvbridge.ZMQCollector)(nil)
	_ kvbridge.Consumer = (*collectorConsumer)(nil)
)
