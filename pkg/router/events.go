package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// newIndexConsumer feeds one worker's event stream into the index: rank r as the worker's
// r-th WorkerID. The index learns the worker's block size from its stored events.
func newIndexConsumer(m *member) *kvbridge.SinkConsumer {
	return &kvbridge.SinkConsumer{Sink: m.rt.cfg.Index, IDs: m.ids}
}

// newEventSource builds the worker's own event source from its spec (DESIGN.md §6), or returns
// nil when it has none.
func (rt *Router) newEventSource(m *member) (eventSource, error) {
	spec := m.w.Spec()
	ep := spec.EventEndpoint()
	switch {
	case ep == "":
		return nil, nil
	case ep == worker.EventsSelf:
		// SubscribeKvEvents on the worker's own connection, once its runtime is known.
		ec, ok := m.eng.(engine.EventConn)
		if !ok {
			return nil, fmt.Errorf("router: kv events of %s: the worker has no gRPC connection", m.w.URL())
		}
		return &deferredSource{build: func(ctx context.Context) (eventSource, error) {
			conn, runtime, err := ec.EventConn(ctx)
			if err != nil {
				return nil, err
			}
			return kvbridge.NewGRPCSource(kvbridge.GRPCConfig{Runtime: runtime, Worker: m.w.URL()},
				conn, newIndexConsumer(m), rt.log, rt.cfg.KVMetrics)
		}}, nil
	case strings.HasPrefix(ep, "grpc://"):
		// A `kvbridge serve` sidecar: its own connection, the spec's runtime (vLLM's service by
		// default, which the bridge serves unless told otherwise).
		runtime := spec.Runtime
		if runtime == "" {
			runtime = worker.RuntimeVLLM
		}
		conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(ep, "grpc://"), engine.DialOptions()...)
		if err != nil {
			return nil, fmt.Errorf("router: kv events %s: %w", ep, err)
		}
		src, err := kvbridge.NewGRPCSource(kvbridge.GRPCConfig{Runtime: runtime, Worker: m.w.URL()}, conn, newIndexConsumer(m), rt.log, rt.cfg.KVMetrics)
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
		return &closingSource{eventSource: src, close: func() { _ = conn.Close() }}, nil
	case strings.HasPrefix(ep, "tcp://"):
		return rt.newZMQSource(m)
	}
	return nil, fmt.Errorf("router: kv events %q: unsupported endpoint", ep)
}

// deferredSource builds its source inside Run (e.g. after a gRPC worker's runtime has been
// detected); until then it reports StreamConnecting. It must not be copied.
type deferredSource struct {
	build func(ctx context.Context) (eventSource, error)
	inner atomic.Pointer[sourceBox]
	final atomic.Int32 // StreamState after a failed build, 0 = none
}

func (d *deferredSource) Run(ctx context.Context) error {
	src, err := d.build(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		d.final.Store(int32(kvbridge.StreamDown))
		return err
	}
	d.inner.Store(&sourceBox{s: src})
	return src.Run(ctx)
}

func (d *deferredSource) State() kvbridge.StreamState {
	if b := d.inner.Load(); b != nil {
		return b.s.State()
	}
	if f := d.final.Load(); f != 0 {
		return kvbridge.StreamState(f)
	}
	return kvbridge.StreamConnecting
}

// closingSource closes a resource (the sidecar connection) when its source's Run returns.
type closingSource struct {
	eventSource
	close func()
}

func (c *closingSource) Run(ctx context.Context) error {
	defer c.close()
	return c.eventSource.Run(ctx)
}

// isUnimplemented reports whether a source ended because the worker has no event stream.
func isUnimplemented(err error) bool { return errors.Is(err, kvbridge.ErrUnimplemented) }

var (
	_ eventSource = (*kvbridge.GRPCSource)(nil)
	_ eventSource = (*deferredSource)(nil)
	_ eventSource = (*closingSource)(nil)
)
