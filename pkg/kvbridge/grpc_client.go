package kvbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// ErrUnimplemented is returned (wrapped) by GRPCSource.Run when the worker answers
// SubscribeKvEvents with UNIMPLEMENTED: it has no event stream, and the router should use the
// approximate tree for it. It is final; Run does not retry.
var ErrUnimplemented = errors.New("kvbridge: no KV event stream (UNIMPLEMENTED): use the approximate tree for this worker")

// grpcUnimplementedMessage is logged once when a worker has no event stream (issue 2 item 3).
const grpcUnimplementedMessage = "no events: use the approximate tree for this worker"

// GRPCConfig configures a GRPCSource. Zero durations take the defaults.
type GRPCConfig struct {
	// Runtime selects the engine service whose SubscribeKvEvents is called.
	Runtime worker.Runtime `json:"runtime" yaml:"runtime"`
	// Worker labels logs and metrics (e.g. the worker URL).
	Worker string `json:"worker" yaml:"worker"`
	// MinBackoff and MaxBackoff bound the jittered exponential reconnect delay
	// (default DefaultMinBackoff → DefaultMaxBackoff, DESIGN.md §6).
	MinBackoff time.Duration `json:"min_backoff" yaml:"min_backoff"`
	MaxBackoff time.Duration `json:"max_backoff" yaml:"max_backoff"`
	// ResyncInterval is the least time between two resyncs asked for by the Consumer
	// (default DefaultResyncInterval).
	ResyncInterval time.Duration `json:"resync_interval" yaml:"resync_interval"`
	// OnState, when set, is called with every state the source enters, on the goroutine
	// that enters it (see SourceOptions.OnState).
	OnState func(StreamState) `json:"-" yaml:"-"`
}

// grpcSubscribeFunc opens a SubscribeKvEvents stream on one engine service.
type grpcSubscribeFunc func(ctx context.Context, in *common.SubscribeKvEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[common.KvEventBatch], error)

// GRPCSource follows one worker's gRPC SubscribeKvEvents stream and delivers its batches, in
// order and per DP rank, into a Consumer, under the stream rules of DESIGN.md §6 (streamRules),
// with resubscription as the repair:
//
//   - every subscription carries the last applied sequence number (0 = none yet), and its
//     first batch must continue it: when the server cannot (it starts past cursor+1), every
//     rank is Reset and the stream continues from the new batch;
//   - batches with seq ≤ cursor are skipped as duplicates;
//   - a jump (seq > cursor+1) drops the stream and resubscribes with the cursor, so a
//     replaying server (kvbridge serve) fills the hole;
//   - a Consumer's resync wish (unknown parent) resets every rank and resubscribes from 0, at
//     most once per ResyncInterval;
//   - UNIMPLEMENTED: state StreamUnavailable, logged once, Run returns ErrUnimplemented;
//   - OUT_OF_RANGE or DATA_LOSS: every rank is Reset and the source resubscribes from 0;
//   - a subscription that opens with a snapshot (kvbridge serve: response headers
//     MDSnapshotFirst/MDSnapshotLast; the source announces it applies them with
//     MDAcceptSnapshot): its batches replace what was known (every rank is Reset first when a
//     cursor was held) and are neither gaps nor duplicates; a stream cut inside its snapshot
//     resubscribes from 0;
//   - a clean end or any other error: reconnect after a jittered exponential backoff
//     (MinBackoff doubling to MaxBackoff, reset once a stream delivers a batch). Reconnects
//     meant to be immediate (gap, OUT_OF_RANGE, resync) are immediate only once between two
//     delivered batches, so a misbehaving server never causes a busy loop.
//
// The DP rank of a batch is its dp_rank, 0 when unset. A GRPCSource has one cursor: the server
// numbers its merged stream.
//
// Run must be called at most once at a time; State is safe from any goroutine. It must not be
// copied.
type GRPCSource struct {
	cfg       GRPCConfig
	subscribe grpcSubscribeFunc
	consumer  Consumer
	log       *zap.Logger
	metrics   *Metrics

	// Injected for tests (STYLE rule 21): rand draws the backoff jitter, now reads the clock
	// for resync rate limiting, after waits for a backoff delay.
	rand  func() uint64
	now   func() time.Time
	after func(time.Duration) <-chan time.Time

	state stateCell

	// Owned by the Run goroutine.
	rules    *streamRules[*common.KvEventBatch]
	ranks    map[int]bool // ranks seen so far: the ones Reset clears
	dec      ProtoDecoder
	batch    indexer.Batch
	msg      common.KvEventBatch
	upLogged bool // a "stream up" line was logged since the last "down" line
	// repair is set by the rules asking for the stream again (gap, resync): the subscription
	// ends and the next one starts from the cursor.
	repair bool
}

// NewGRPCSource builds a source that subscribes over conn (which the caller owns and closes)
// and delivers into c. m may be nil. It starts nothing; call Run.
func NewGRPCSource(cfg GRPCConfig, conn grpc.ClientConnInterface, c Consumer, log *zap.Logger, m *Metrics) (*GRPCSource, error) {
	if conn == nil {
		return nil, errors.New("kvbridge: new grpc source: nil connection")
	}
	if c == nil {
		return nil, errors.New("kvbridge: new grpc source: nil consumer")
	}
	sub, err := grpcSubscribeFor(cfg.Runtime, conn)
	if err != nil {
		return nil, fmt.Errorf("kvbridge: new grpc source: %w", err)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &GRPCSource{
		cfg:       cfg,
		subscribe: sub,
		consumer:  c,
		log:       log.With(zap.String("worker", cfg.Worker), zap.Stringer("runtime", cfg.Runtime)),
		metrics:   m,
		rand:      rand.Uint64,
		now:       time.Now,
		after:     time.After,
		ranks:     map[int]bool{},
	}
	s.rules = &streamRules[*common.KvEventBatch]{worker: cfg.Worker, m: m, log: s.log, now: func() time.Time { return s.now() },
		resyncInterval: cfg.ResyncInterval, scratch: &s.batch, t: streamTransport[*common.KvEventBatch]{
			decode:  func(msg *common.KvEventBatch, dst *indexer.Batch) (int, error) { return s.dec.Decode(dst, msg), nil },
			deliver: s.deliver, reset: s.resetAll, request: func(uint64, uint64) { s.repair = true }, rewinds: true,
		}}
	s.state.notify = cfg.OnState
	s.state.store(StreamConnecting)
	return s, nil
}

// grpcSubscribeFor returns the SubscribeKvEvents call of runtime's engine service.
func grpcSubscribeFor(runtime worker.Runtime, conn grpc.ClientConnInterface) (grpcSubscribeFunc, error) {
	switch runtime {
	case worker.RuntimeVLLM:
		return vllm.NewVllmEngineClient(conn).SubscribeKvEvents, nil
	case worker.RuntimeSGLang:
		return sglang.NewSglangSchedulerClient(conn).SubscribeKvEvents, nil
	case worker.RuntimeTokenSpeed:
		return tokenspeed.NewTokenSpeedSchedulerClient(conn).SubscribeKvEvents, nil
	}
	return nil, fmt.Errorf("unknown runtime %q (want one of %v)", runtime, worker.Runtimes())
}

// State returns the stream state. After Run returns it is StreamStopped, or
// StreamUnavailable when the worker has no event stream.
func (s *GRPCSource) State() StreamState { return s.state.load() }

// grpcStreamEnd says why one subscription ended and what to do next.
type grpcStreamEnd int

const (
	endRetry         grpcStreamEnd = iota // clean end or transient error: back off, resume
	endRepair                             // the rules asked for the stream again: resubscribe at once
	endUnimplemented                      // final
)

// Run subscribes and follows the stream until ctx is done (then it returns nil) or the worker
// answers UNIMPLEMENTED (then it returns an error wrapping ErrUnimplemented). It runs in the
// caller's goroutine and starts none of its own.
func (s *GRPCSource) Run(ctx context.Context) error {
	if s.state.load() == StreamUnavailable {
		return fmt.Errorf("kvbridge: subscribe %s: %w", s.cfg.Worker, ErrUnimplemented)
	}
	defer func() {
		s.metrics.setStreamUp(s.cfg.Worker, false)
		if s.state.load() != StreamUnavailable {
			s.state.store(StreamStopped)
		}
	}()
	bo := newBackoff(s.cfg.MinBackoff, s.cfg.MaxBackoff, s.rand)
	failures := 0 // subscriptions since the last one that delivered a batch
	for {
		s.state.store(StreamConnecting)
		end, progressed, err := s.runStream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.metrics.setStreamUp(s.cfg.Worker, false)
		if end == endUnimplemented {
			s.state.store(StreamUnavailable)
			s.log.Warn(grpcUnimplementedMessage, zap.Error(err))
			return fmt.Errorf("kvbridge: subscribe %s: %w", s.cfg.Worker, ErrUnimplemented)
		}
		if progressed {
			failures = 0
			bo.progressed()
		}
		// Every attempt moves the delay on, immediate ones included, so that a server that keeps
		// asking for repairs backs off like one that keeps failing.
		var delay time.Duration
		if d := bo.next(); end == endRetry || failures > 0 {
			delay = d
		}
		if end == endRetry {
			// One warning per outage (the stream was up, or this is the first failed attempt
			// in a row); the retries that follow log at debug level.
			if s.upLogged || failures == 0 {
				s.log.Warn("kv event stream down; reconnecting", zap.Error(err), zap.Duration("backoff", delay))
				s.upLogged = false
			} else {
				s.log.Debug("kv event stream attempt failed", zap.Error(err), zap.Duration("backoff", delay))
			}
		}
		failures++
		if delay > 0 {
			s.state.store(StreamDown)
			select {
			case <-ctx.Done():
				return nil
			case <-s.after(delay):
			}
		}
	}
}

// runStream runs one subscription from the cursor. progressed reports whether it delivered a
// batch.
func (s *GRPCSource) runStream(ctx context.Context) (end grpcStreamEnd, progressed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when we drop it (repair)

	s.repair = false
	if s.rules.snapshotCut() {
		// The cursor points into a snapshot, not into the server's history: resuming from it
		// would apply history batches to part of a state. Start over.
		s.rules.restart(ResetSnapshotCut)
	}
	s.rules.resumed()
	delivered := s.rules.delivered()
	sctx = metadata.AppendToOutgoingContext(sctx, MDAcceptSnapshot, "1")
	stream, err := s.subscribe(sctx, &common.SubscribeKvEventsRequest{StartSequenceNumber: s.rules.resumeFrom()})
	if err != nil {
		return s.classify(err), false, err
	}
	// Header returns metadata once the server accepted the call; nil when it answered with a
	// status only (e.g. UNIMPLEMENTED), which Recv then reports.
	if md, _ := stream.Header(); md != nil {
		s.markUp()
		if first, last, ok := snapshotHeader(md); ok {
			s.rules.snapshot(first, last)
		}
	}
	for {
		if err := stream.RecvMsg(&s.msg); err != nil {
			progressed = s.rules.delivered() > delivered
			if errors.Is(err, io.EOF) {
				return endRetry, progressed, errors.New("stream ended by server")
			}
			return s.classify(err), progressed, err
		}
		s.markUp()
		// The batch is converted and applied in one of the shared apply slots, as a ZMQ
		// source's; RecvMsg's protobuf decoding runs before, outside them.
		applySlots.acquire()
		s.rules.live(s.msg.GetSequenceNumber(), &s.msg)
		applySlots.release()
		if s.repair {
			return endRepair, s.rules.delivered() > delivered, errors.New("repair: resubscribing from the cursor")
		}
	}
}

// snapshotHeader reads the snapshot headers of a kvbridge serve stream (MDSnapshotFirst,
// MDSnapshotLast); ok is false without them or when they do not parse as first ≤ last.
func snapshotHeader(md metadata.MD) (first, last uint64, ok bool) {
	f, l := md.Get(MDSnapshotFirst), md.Get(MDSnapshotLast)
	if len(f) != 1 || len(l) != 1 {
		return 0, 0, false
	}
	first, err1 := strconv.ParseUint(f[0], 10, 64)
	last, err2 := strconv.ParseUint(l[0], 10, 64)
	if err1 != nil || err2 != nil || first == 0 || first > last {
		return 0, 0, false
	}
	return first, last, true
}

// deliver hands the decoded batch to the consumer under its DP rank.
func (s *GRPCSource) deliver(b *indexer.Batch) (int, bool) {
	rank := 0
	if b.HasDPRank && b.DPRank > 0 {
		rank = int(b.DPRank)
	}
	s.ranks[rank] = true
	return rank, s.consumer.Batch(rank, b)
}

// classify maps a gRPC status to the next step; OUT_OF_RANGE and DATA_LOSS restart the stream
// from 0 (every rank reset) before the resubscription.
func (s *GRPCSource) classify(err error) grpcStreamEnd {
	switch status.Code(err) {
	case codes.Unimplemented:
		return endUnimplemented
	case codes.OutOfRange:
		s.log.Info("kv event cursor out of the server's range; resetting and resubscribing from 0",
			zap.Uint64("cursor", s.rules.resumeFrom()))
		s.rules.restart(ResetOutOfRange)
		return endRepair
	case codes.DataLoss:
		s.log.Info("kv event stream lost data; resetting and resubscribing from 0", zap.Error(err))
		s.rules.restart(ResetDataLoss)
		return endRepair
	}
	return endRetry
}

// resetAll tells the consumer to drop every rank seen so far (rank 0 at least).
func (s *GRPCSource) resetAll(reason string) {
	s.ranks[0] = true
	ranks := make([]int, 0, len(s.ranks))
	for r := range s.ranks {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks) // deterministic order for consumers and tests
	for _, r := range ranks {
		s.consumer.Reset(r, reason)
	}
}

func (s *GRPCSource) markUp() {
	if s.state.load() == StreamUp {
		return
	}
	s.state.store(StreamUp)
	s.metrics.setStreamUp(s.cfg.Worker, true)
	if !s.upLogged {
		s.log.Info("kv event stream up", zap.Uint64("cursor", s.rules.resumeFrom()))
		s.upLogged = true
	}
}
