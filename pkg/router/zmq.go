package router

import (
	"context"
	"errors"

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

// startCollectorLocked binds the --kv-listen collector.
func (rt *Router) startCollectorLocked(ctx context.Context) error {
	return errors.New("router: --kv-listen: waiting for kvbridge.NewZMQCollector")
}
