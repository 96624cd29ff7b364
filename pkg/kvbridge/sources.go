package kvbridge

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/pkg/worker"
)

// Source is a running event source: it delivers a worker's KV events until ctx ends (Run
// returns nil then) or the worker turns out to have no event stream (an error wrapping
// ErrUnimplemented). State is safe from any goroutine.
type Source interface {
	Run(ctx context.Context) error
	State() StreamState
}

// SourceOptions is what NewSource needs beyond the worker's spec.
type SourceOptions struct {
	// Self returns the worker's own gRPC connection and runtime, for a grpc:// worker that
	// subscribes on its own connection (worker.EventsSelf); it waits until the runtime is
	// known. nil: such workers have no source.
	Self func(ctx context.Context) (grpc.ClientConnInterface, worker.Runtime, error)
	// Dial are the options of the connection to a `kvbridge serve` sidecar (kv_events=grpc://).
	Dial []grpc.DialOption
	// Logger and Metrics are passed to the source; both may be nil.
	Logger  *zap.Logger
	Metrics *Metrics
	// OnState, when set, is called with every state the source enters, on the goroutine
	// that enters it and before State returns it, so a caller can keep what it needs of
	// the state where its hot path already reads (fleet.Member keeps one bit). It must be
	// fast and must not call back into the source. A source enters StreamUnavailable and
	// StreamStopped only on its Run goroutine, and once it is there no other goroutine
	// enters another state, so calls that race each other differ only between the
	// connecting, up and down states.
	OnState func(StreamState)
}

// NewSource builds the event source a worker's spec names (DESIGN.md §6), delivering into c:
// a ZMQ subscriber for kv_events=tcp:// (every DP rank, with the replay endpoint when given), a
// SubscribeKvEvents client for kv_events=grpc:// (a sidecar: its own connection, the spec's
// runtime, vLLM's service by default, which `kvbridge serve` answers unless told otherwise) or
// for a grpc:// worker's own connection. It returns nil and no error when the worker has no
// event stream. It starts nothing.
func NewSource(spec worker.Spec, c Consumer, o SourceOptions) (Source, error) {
	ep := spec.EventEndpoint()
	switch {
	case ep == "":
		return nil, nil
	case ep == worker.EventsSelf:
		if o.Self == nil {
			return nil, fmt.Errorf("kvbridge: source %s: no connection to subscribe on", spec.URL)
		}
		return &deferredSource{build: func(ctx context.Context) (Source, error) {
			conn, runtime, err := o.Self(ctx)
			if err != nil {
				return nil, err
			}
			return NewGRPCSource(GRPCConfig{Runtime: runtime, Worker: spec.URL, OnState: o.OnState}, conn, c, o.Logger, o.Metrics)
		}, onState: o.OnState}, nil
	case strings.HasPrefix(ep, "grpc://"):
		runtime := spec.Runtime
		if runtime == "" {
			runtime = worker.RuntimeVLLM
		}
		conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(ep, "grpc://"), o.Dial...)
		if err != nil {
			return nil, fmt.Errorf("kvbridge: source %s: %w", ep, err)
		}
		src, err := NewGRPCSource(GRPCConfig{Runtime: runtime, Worker: spec.URL, OnState: o.OnState}, conn, c, o.Logger, o.Metrics)
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
		return &closingSource{Source: src, close: func() { _ = conn.Close() }}, nil
	case strings.HasPrefix(ep, "tcp://"):
		return NewZMQSource(ZMQConfig{Worker: spec.URL, Endpoint: spec.KVEvents, Replay: spec.Replay, Topic: spec.Topic, DPSize: spec.DPSize,
			OnState: o.OnState},
			c, o.Logger, o.Metrics)
	}
	return nil, fmt.Errorf("kvbridge: source %s: unsupported kv_events endpoint %q", spec.URL, ep)
}

// deferredSource builds its source inside Run (after a gRPC worker's runtime is known); until
// then it reports StreamConnecting. It must not be copied.
type deferredSource struct {
	build   func(ctx context.Context) (Source, error)
	onState func(StreamState) // SourceOptions.OnState, told of a failed build
	inner   atomic.Pointer[sourceBox]
	final   atomic.Int32 // StreamState after a failed build, 0 = none
}

// sourceBox lets an interface value sit in an atomic.Pointer.
type sourceBox struct{ s Source }

func (d *deferredSource) Run(ctx context.Context) error {
	src, err := d.build(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if d.onState != nil {
			d.onState(StreamDown)
		}
		d.final.Store(int32(StreamDown))
		return err
	}
	d.inner.Store(&sourceBox{s: src})
	return src.Run(ctx)
}

func (d *deferredSource) State() StreamState {
	if b := d.inner.Load(); b != nil {
		return b.s.State()
	}
	if f := d.final.Load(); f != 0 {
		return StreamState(f)
	}
	return StreamConnecting
}

// closingSource closes a resource (the sidecar connection) when its source's Run returns.
type closingSource struct {
	Source
	close func()
}

func (c *closingSource) Run(ctx context.Context) error {
	defer c.close()
	return c.Source.Run(ctx)
}

var (
	_ Source = (*GRPCSource)(nil)
	_ Source = (*ZMQSource)(nil)
	_ Source = (*ZMQCollector)(nil)
	_ Source = (*deferredSource)(nil)
	_ Source = (*closingSource)(nil)
)
