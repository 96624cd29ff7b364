package router

import (
	"context"
	"errors"
)

// newZMQSource builds the ZMQ subscriber of an http:// worker with kv_events=tcp://...
func (rt *Router) newZMQSource(m *member) (eventSource, error) {
	return nil, errors.New("router: zmq kv events: waiting for kvbridge.NewZMQSource")
}

// startCollectorLocked binds the --kv-listen collector.
func (rt *Router) startCollectorLocked(ctx context.Context) error {
	return errors.New("router: --kv-listen: waiting for kvbridge.NewZMQCollector")
}
