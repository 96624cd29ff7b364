package kvbridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// grpcTestTimeout bounds every wait in these tests; nothing sleeps.
const grpcTestTimeout = 10 * time.Second

// grpcRec is one call the recording consumer saw.
type grpcRec struct {
	Reset  bool
	Rank   int
	Reason string
	Seq    uint64
	Events []indexer.Event
}

// grpcRecorder is a Consumer that publishes every call onto a channel the test reads.
type grpcRecorder struct {
	ch chan grpcRec
	// resync, when set, decides the return value of Batch.
	resync func(rank int, b *indexer.Batch) bool
}

func newGRPCRecorder() *grpcRecorder { return &grpcRecorder{ch: make(chan grpcRec, 1024)} }

func (r *grpcRecorder) Batch(rank int, b *indexer.Batch) bool {
	c := grpcCloneBatch(b)
	r.ch <- grpcRec{Rank: rank, Seq: b.Seq, Events: c.Events}
	if r.resync != nil {
		return r.resync(rank, b)
	}
	return false
}

func (r *grpcRecorder) Reset(rank int, reason string) {
	r.ch <- grpcRec{Reset: true, Rank: rank, Reason: reason}
}

// next waits for the next recorded call.
func (r *grpcRecorder) next(t *testing.T) grpcRec {
	t.Helper()
	select {
	case c := <-r.ch:
		return c
	case <-time.After(grpcTestTimeout):
		t.Fatal("timed out waiting for a consumer call")
	}
	return grpcRec{}
}

// expect reads len(want) calls and compares them, ignoring event contents when want has none.
func (r *grpcRecorder) expect(t *testing.T, want ...grpcRec) {
	t.Helper()
	got := make([]grpcRec, len(want))
	for i := range want {
		got[i] = r.next(t)
		if want[i].Events == nil {
			got[i].Events = nil
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("consumer calls mismatch (-want +got):\n%s", diff)
	}
}

func grpcSeqs(rank int, seqs ...uint64) []grpcRec {
	out := make([]grpcRec, len(seqs))
	for i, s := range seqs {
		out[i] = grpcRec{Rank: rank, Seq: s}
	}
	return out
}

// startGRPCServer serves register's services on a loopback port and returns a client
// connection to it; both are closed at cleanup (server handlers are waited for).
func startGRPCServer(t *testing.T, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(BridgeServerOptions(), grpc.WaitForHandlers(true))...)
	register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-served
	})
	return conn
}

// grpcCall is one SubscribeKvEvents call received by the scripted server; the test sends on
// Stream and ends the call by sending its status on End.
type grpcCall struct {
	Cursor uint64
	Stream grpc.ServerStreamingServer[common.KvEventBatch]
	End    chan error
}

// grpcScript is a vLLM engine server whose SubscribeKvEvents calls are driven by the test.
type grpcScript struct {
	vllm.UnimplementedVllmEngineServer
	calls chan grpcCall
}

func (s *grpcScript) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	c := grpcCall{Cursor: req.GetStartSequenceNumber(), Stream: stream, End: make(chan error, 1)}
	select {
	case s.calls <- c:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	select {
	case err := <-c.End:
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

func (s *grpcScript) next(t *testing.T) grpcCall {
	t.Helper()
	select {
	case c := <-s.calls:
		return c
	case <-time.After(grpcTestTimeout):
		t.Fatal("timed out waiting for a SubscribeKvEvents call")
	}
	return grpcCall{}
}

// send sends batches with the given sequence numbers (one cleared event each) on c.
func (c grpcCall) send(t *testing.T, rank *int32, seqs ...uint64) {
	t.Helper()
	for _, s := range seqs {
		if err := c.Stream.Send(&common.KvEventBatch{SequenceNumber: s, DpRank: rank, Events: []*common.KvCacheEvent{grpcRemovedEv(int64(s))}}); err != nil {
			t.Fatalf("send seq %d: %v", s, err)
		}
	}
}

// grpcDelays records the backoff delays a source asked for and fires at once.
type grpcDelays struct {
	mu sync.Mutex
	d  []time.Duration
}

func (g *grpcDelays) after(d time.Duration) <-chan time.Time {
	g.mu.Lock()
	g.d = append(g.d, d)
	g.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func (g *grpcDelays) get() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.d...)
}

// runSource starts src.Run and returns a stop func that cancels it and returns Run's error.
func runSource(t *testing.T, src *GRPCSource) (stop func() error, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- src.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-ch:
			case <-time.After(grpcTestTimeout):
				t.Fatal("Run did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop, ch
}

func newTestSource(t *testing.T, conn grpc.ClientConnInterface, runtime worker.Runtime, c Consumer, log *zap.Logger) (*GRPCSource, *grpcDelays) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewGRPCSource(GRPCConfig{Runtime: runtime, Worker: "w0"}, conn, c, log, m)
	if err != nil {
		t.Fatal(err)
	}
	d := &grpcDelays{}
	src.after = d.after
	src.rand = func() uint64 { return 0 } // jitter picks the low end: d/2
	return src, d
}

func newScript(t *testing.T) (*grpcScript, *grpc.ClientConn) {
	s := &grpcScript{calls: make(chan grpcCall)}
	conn := startGRPCServer(t, func(srv grpc.ServiceRegistrar) { vllm.RegisterVllmEngineServer(srv, s) })
	return s, conn
}

func TestGRPCSourceResumesFromCursor(t *testing.T) {
	script, conn := newScript(t)
	rec := newGRPCRecorder()
	src, delays := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
	stop, _ := runSource(t, src)

	c := script.next(t)
	if c.Cursor != 0 {
		t.Fatalf("first subscription cursor: got %d, want 0", c.Cursor)
	}
	c.send(t, nil, 1, 2)
	rec.expect(t, grpcSeqs(0, 1, 2)...)
	c.End <- status.Error(codes.Unavailable, "engine restarting")

	c = script.next(t)
	if c.Cursor != 2 {
		t.Fatalf("resubscription cursor: got %d, want 2", c.Cursor)
	}
	c.send(t, nil, 2, 3) // 2 is a duplicate of what was applied: skipped
	rec.expect(t, grpcSeqs(0, 3)...)
	c.End <- nil // clean end: reconnect too

	c = script.next(t)
	if c.Cursor != 3 {
		t.Fatalf("after clean end cursor: got %d, want 3", c.Cursor)
	}
	m := src.metrics
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"applied batches", promtestutil.ToFloat64(m.batches.WithLabelValues("w0", OutcomeApplied)), 3},
		{"duplicate batches", promtestutil.ToFloat64(m.batches.WithLabelValues("w0", OutcomeDuplicate)), 1},
		{"removed events", promtestutil.ToFloat64(m.events.WithLabelValues("w0", "removed")), 3},
		{"cursor rank 0", promtestutil.ToFloat64(m.cursor.WithLabelValues("w0", "0")), 3},
	} {
		if tc.got != tc.want {
			t.Errorf("metric %s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("Run after cancel: got %v, want nil", err)
	}
	if got, want := src.State(), StreamStopped; got != want {
		t.Errorf("state after Run: got %v, want %v", got, want)
	}
	// Two reconnects, each after progress: both use the first backoff step (100 ms, jitter low end).
	if diff := cmp.Diff([]time.Duration{50 * time.Millisecond, 50 * time.Millisecond}, delays.get()); diff != "" {
		t.Errorf("backoff delays (-want +got):\n%s", diff)
	}
}

func TestGRPCSourceGap(t *testing.T) {
	t.Run("repaired by the server", func(t *testing.T) {
		script, conn := newScript(t)
		rec := newGRPCRecorder()
		src, delays := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
		runSource(t, src)

		c := script.next(t)
		c.send(t, nil, 1, 2, 5)
		rec.expect(t, grpcSeqs(0, 1, 2)...)
		c = script.next(t) // dropped at the jump, resubscribed with the old cursor at once
		if c.Cursor != 2 {
			t.Fatalf("resubscription after gap: got cursor %d, want 2", c.Cursor)
		}
		c.send(t, nil, 3, 4, 5, 6)
		rec.expect(t, grpcSeqs(0, 3, 4, 5, 6)...)
		if got := delays.get(); len(got) != 0 {
			t.Errorf("gap reconnect delays: got %v, want none (immediate)", got)
		}
	})
	t.Run("not repairable: reset and continue", func(t *testing.T) {
		script, conn := newScript(t)
		rec := newGRPCRecorder()
		src, _ := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
		runSource(t, src)

		c := script.next(t)
		r1 := int32(1)
		c.send(t, &r1, 1)
		rec.expect(t, grpcSeqs(1, 1)...)
		c.send(t, nil, 2, 7)
		rec.expect(t, grpcSeqs(0, 2)...)
		c = script.next(t)
		if c.Cursor != 2 {
			t.Fatalf("resubscription after gap: got cursor %d, want 2", c.Cursor)
		}
		c.send(t, nil, 8, 9) // a non-replaying server (SMG's Python bridge) starts live
		rec.expect(t,
			grpcRec{Reset: true, Rank: 0, Reason: ResetGap},
			grpcRec{Reset: true, Rank: 1, Reason: ResetGap},
			grpcRec{Rank: 0, Seq: 8}, grpcRec{Rank: 0, Seq: 9})
	})
	t.Run("persistent gaps back off", func(t *testing.T) {
		script, conn := newScript(t)
		rec := newGRPCRecorder()
		src, delays := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
		runSource(t, src)
		c := script.next(t)
		c.send(t, nil, 1, 3) // gap: immediate resubscribe
		rec.expect(t, grpcSeqs(0, 1)...)
		for range 3 {
			c = script.next(t)
			c.End <- status.Error(codes.Internal, "boom") // no progress: backoff grows
		}
		script.next(t)
		// The immediate gap reconnect counts as the first attempt without progress.
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
		if diff := cmp.Diff(want, delays.get()); diff != "" {
			t.Errorf("backoff delays (-want +got):\n%s", diff)
		}
	})
}

func TestGRPCSourceDataLossAndOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		code   codes.Code
		reason string
	}{{codes.DataLoss, ResetDataLoss}, {codes.OutOfRange, ResetOutOfRange}} {
		t.Run(tc.code.String(), func(t *testing.T) {
			script, conn := newScript(t)
			rec := newGRPCRecorder()
			src, _ := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
			runSource(t, src)
			c := script.next(t)
			r2 := int32(2)
			c.send(t, &r2, 1, 2)
			rec.expect(t, grpcSeqs(2, 1, 2)...)
			c.End <- status.Error(tc.code, "publisher restarted")
			c = script.next(t)
			if c.Cursor != 0 {
				t.Fatalf("resubscription after %v: got cursor %d, want 0", tc.code, c.Cursor)
			}
			rec.expect(t, grpcRec{Reset: true, Rank: 0, Reason: tc.reason}, grpcRec{Reset: true, Rank: 2, Reason: tc.reason})
			c.send(t, &r2, 1) // after a restart, seq 1 again is applied: the cursor was zeroed
			rec.expect(t, grpcSeqs(2, 1)...)
		})
	}
}

func TestGRPCSourceOutOfRangeFromBridge(t *testing.T) {
	// Without snapshots, a cursor older than the history gets OUT_OF_RANGE (a server that has
	// none behaves so; TestGRPCSourceSnapshotForOldCursor covers kvbridge serve's default).
	bridge, err := NewBridgeServer(BridgeConfig{Runtime: worker.RuntimeSGLang, History: 2, SnapshotMaxBlocks: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := startGRPCServer(t, bridge.Register)
	for i := range 5 {
		bridge.Batch(0, &indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventRemoved, Hashes: []uint64{uint64(i)}}}})
	}
	rec := newGRPCRecorder()
	src, _ := newTestSource(t, conn, worker.RuntimeSGLang, rec, nil)
	src.rules.setCursor(1) // a cursor from an earlier connection, older than the history (4..5)
	runSource(t, src)
	rec.expect(t,
		grpcRec{Reset: true, Rank: 0, Reason: ResetOutOfRange},
		grpcRec{Rank: 0, Seq: 4, Events: []indexer.Event{{Kind: indexer.EventRemoved, Hashes: []uint64{3}}}},
		grpcRec{Rank: 0, Seq: 5, Events: []indexer.Event{{Kind: indexer.EventRemoved, Hashes: []uint64{4}}}},
	)
}

func TestGRPCSourceUnimplemented(t *testing.T) {
	tests := []struct {
		name     string
		register func(grpc.ServiceRegistrar)
	}{
		{"service not registered", func(grpc.ServiceRegistrar) {}},
		{"KV events disabled", func(s grpc.ServiceRegistrar) {
			tokenspeed.RegisterTokenSpeedSchedulerServer(s, tokenspeed.UnimplementedTokenSpeedSchedulerServer{})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := startGRPCServer(t, tc.register)
			core, logs := observer.New(zapcore.InfoLevel)
			rec := newGRPCRecorder()
			src, delays := newTestSource(t, conn, worker.RuntimeTokenSpeed, rec, zap.New(core))
			var err error
			select {
			case err = <-func() <-chan error {
				ch := make(chan error, 1)
				go func() { ch <- src.Run(context.Background()) }()
				return ch
			}():
			case <-time.After(grpcTestTimeout):
				t.Fatal("Run did not return on UNIMPLEMENTED")
			}
			if !errors.Is(err, ErrUnimplemented) {
				t.Fatalf("Run: got %v, want ErrUnimplemented", err)
			}
			if got, want := src.State(), StreamUnavailable; got != want {
				t.Errorf("state: got %v, want %v", got, want)
			}
			// A second Run returns at once without subscribing or logging again.
			if err := src.Run(context.Background()); !errors.Is(err, ErrUnimplemented) {
				t.Errorf("second Run: got %v, want ErrUnimplemented", err)
			}
			n := logs.FilterMessageSnippet("approximate tree").Len()
			if n != 1 {
				t.Errorf("UNIMPLEMENTED reports: got %d, want 1; logs %v", n, logs.All())
			}
			if got := delays.get(); len(got) != 0 {
				t.Errorf("backoff delays: got %v, want none (never retried)", got)
			}
			if len(rec.ch) != 0 {
				t.Errorf("consumer calls: got %d, want 0", len(rec.ch))
			}
		})
	}
}

func TestGRPCSourceResync(t *testing.T) {
	script, conn := newScript(t)
	rec := newGRPCRecorder()
	rec.resync = func(_ int, b *indexer.Batch) bool { return b.Seq%2 == 0 } // even seqs "have unknown parents"
	src, _ := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	src.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	runSource(t, src)

	c := script.next(t)
	c.send(t, nil, 1, 2)
	rec.expect(t, grpcRec{Seq: 1}, grpcRec{Seq: 2}, grpcRec{Reset: true, Reason: ResetResync})
	c = script.next(t)
	if c.Cursor != 0 {
		t.Fatalf("resubscription after resync: got cursor %d, want 0", c.Cursor)
	}
	// Within 30 s a second resync request is ignored: the stream goes on.
	c.send(t, nil, 1, 2, 3)
	rec.expect(t, grpcSeqs(0, 1, 2, 3)...)
	mu.Lock()
	now = now.Add(DefaultResyncInterval)
	mu.Unlock()
	c.send(t, nil, 4)
	rec.expect(t, grpcRec{Seq: 4}, grpcRec{Reset: true, Reason: ResetResync})
	if c = script.next(t); c.Cursor != 0 {
		t.Fatalf("second resync: got cursor %d, want 0", c.Cursor)
	}
}

func TestNewGRPCSourceErrors(t *testing.T) {
	rec := newGRPCRecorder()
	if _, err := NewGRPCSource(GRPCConfig{Runtime: "trtllm"}, &grpc.ClientConn{}, rec, nil, nil); err == nil || !strings.Contains(err.Error(), "unknown runtime") {
		t.Errorf("unknown runtime: got %v, want an error", err)
	}
	if _, err := NewGRPCSource(GRPCConfig{Runtime: worker.RuntimeVLLM}, nil, rec, nil, nil); err == nil {
		t.Errorf("nil conn: got nil error")
	}
	if _, err := NewGRPCSource(GRPCConfig{Runtime: worker.RuntimeVLLM}, &grpc.ClientConn{}, nil, nil, nil); err == nil {
		t.Errorf("nil consumer: got nil error")
	}
}

// TestBridgeEndToEnd runs the bridge server and the client source together, for each runtime:
// history then live, DP ranks, contiguous numbering from 1, Reset as a cleared batch.
func TestBridgeEndToEnd(t *testing.T) {
	for _, runtime := range worker.Runtimes() {
		t.Run(string(runtime), func(t *testing.T) {
			bridge, err := NewBridgeServer(BridgeConfig{Runtime: runtime}, nil)
			if err != nil {
				t.Fatal(err)
			}
			conn := startGRPCServer(t, bridge.Register)
			stored := indexer.Event{Kind: indexer.EventStored, Hashes: []uint64{1 << 63, 2}, Parent: 7, HasParent: true,
				Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, LoraID: 3, HasLoraID: true}
			removed := indexer.Event{Kind: indexer.EventRemoved, Hashes: []uint64{2}}
			// Engine-side sequence numbers and ranks are the bridge's input; its output is renumbered.
			offloaded := stored
			offloaded.Medium = "CPU" // not forwarded: the wire has no medium
			gpu := stored
			gpu.Medium = "gpu"
			bridge.Batch(0, &indexer.Batch{Seq: 500, Events: []indexer.Event{offloaded, gpu}})
			bridge.Batch(1, &indexer.Batch{Seq: 17, Events: []indexer.Event{removed}})

			rec := newGRPCRecorder()
			src, _ := newTestSource(t, conn, runtime, rec, nil)
			stop, _ := runSource(t, src)
			rec.expect(t,
				grpcRec{Rank: 0, Seq: 1, Events: []indexer.Event{stored}},
				grpcRec{Rank: 1, Seq: 2, Events: []indexer.Event{removed}},
			)
			bridge.Reset(1, ResetRestart)
			bridge.Batch(0, &indexer.Batch{Seq: 501, Events: []indexer.Event{removed}})
			rec.expect(t,
				grpcRec{Rank: 1, Seq: 3, Events: []indexer.Event{{Kind: indexer.EventCleared}}},
				grpcRec{Rank: 0, Seq: 4, Events: []indexer.Event{removed}},
			)
			if got := src.State(); got != StreamUp {
				t.Errorf("state while streaming: got %v, want %v", got, StreamUp)
			}
			if err := stop(); err != nil {
				t.Errorf("Run: got %v, want nil", err)
			}
			if got := bridge.lastSeq(); got != 4 {
				t.Errorf("lastSeq: got %d, want 4", got)
			}
		})
	}
}

// grpcRawSubscribe opens a SubscribeKvEvents stream on the vLLM service without a GRPCSource.
func grpcRawSubscribe(t *testing.T, ctx context.Context, conn grpc.ClientConnInterface, cursor uint64) grpc.ServerStreamingClient[common.KvEventBatch] {
	t.Helper()
	st, err := vllm.NewVllmEngineClient(conn).SubscribeKvEvents(ctx, &common.SubscribeKvEventsRequest{StartSequenceNumber: cursor})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// grpcRecvSeqs reads n batches and returns their sequence numbers.
func grpcRecvSeqs(t *testing.T, st grpc.ServerStreamingClient[common.KvEventBatch], n int) []uint64 {
	t.Helper()
	var out []uint64
	for range n {
		b, err := st.Recv()
		if err != nil {
			t.Fatalf("recv after %v: %v", out, err)
		}
		out = append(out, b.GetSequenceNumber())
	}
	return out
}

func TestBridgeHistoryAndCursors(t *testing.T) {
	for _, snapshots := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshots=%v", snapshots), func(t *testing.T) {
			testBridgeHistoryAndCursors(t, snapshots)
		})
	}
}

func testBridgeHistoryAndCursors(t *testing.T, snapshots bool) {
	cfg := BridgeConfig{Runtime: worker.RuntimeVLLM, History: 4, SnapshotMaxBlocks: -1}
	if snapshots {
		cfg.SnapshotMaxBlocks = 0 // the default
	}
	bridge, err := NewBridgeServer(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := startGRPCServer(t, bridge.Register)
	ctx, cancel := context.WithTimeout(context.Background(), grpcTestTimeout)
	defer cancel()

	// Empty history: cursor 0 is fine (waits for live), any other cursor is from another life.
	if _, err := grpcRawSubscribe(t, ctx, conn, 3).Recv(); status.Code(err) != codes.OutOfRange {
		t.Errorf("cursor 3 on an empty bridge: got %v, want OUT_OF_RANGE", err)
	}
	for i := range 10 {
		r := i % 2
		bridge.Batch(r, &indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventCleared}}})
	}
	whole := []uint64{7, 8, 9, 10} // whole (bounded) history
	if snapshots {
		// The history rolled over: a snapshot of ranks 0 and 1 (one KvCacheCleared batch
		// each, both sets being empty), numbered to end at the newest batch.
		whole = []uint64{9, 10}
	}
	tests := []struct {
		cursor uint64
		want   []uint64
		code   codes.Code
	}{
		{cursor: 0, want: whole},
		{cursor: 6, want: []uint64{7, 8, 9, 10}}, // just before the oldest kept batch
		{cursor: 8, want: []uint64{9, 10}},
		{cursor: 5, code: codes.OutOfRange},  // older than the history (the client does not accept snapshots)
		{cursor: 11, code: codes.OutOfRange}, // newer than the bridge: it restarted
	}
	for _, tc := range tests {
		st := grpcRawSubscribe(t, ctx, conn, tc.cursor)
		if tc.code != codes.OK {
			if _, err := st.Recv(); status.Code(err) != tc.code {
				t.Errorf("cursor %d: got %v, want %v", tc.cursor, err, tc.code)
			}
			continue
		}
		if diff := cmp.Diff(tc.want, grpcRecvSeqs(t, st, len(tc.want))); diff != "" {
			t.Errorf("cursor %d: seqs mismatch (-want +got):\n%s", tc.cursor, diff)
		}
	}
	// A subscriber at the head gets live batches, with dp_rank on each.
	st := grpcRawSubscribe(t, ctx, conn, 10)
	bridge.Batch(3, &indexer.Batch{})
	b, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if b.GetSequenceNumber() != 11 || b.DpRank == nil || b.GetDpRank() != 3 {
		t.Errorf("live batch: got seq %d rank %v, want seq 11 rank 3", b.GetSequenceNumber(), b.DpRank)
	}
}

// TestBridgeSlowClientDataLoss: a client that stops reading while the bridge publishes more
// than its history is cut off with DATA_LOSS instead of being buffered without bound.
func TestBridgeSlowClientDataLoss(t *testing.T) {
	bridge, err := NewBridgeServer(BridgeConfig{Runtime: worker.RuntimeVLLM, History: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := startGRPCServer(t, bridge.Register)
	ctx, cancel := context.WithTimeout(context.Background(), grpcTestTimeout)
	defer cancel()
	st := grpcRawSubscribe(t, ctx, conn, 0)
	bridge.Batch(0, &indexer.Batch{})
	if got := grpcRecvSeqs(t, st, 1); got[0] != 1 {
		t.Fatalf("first batch: got seq %d, want 1", got[0])
	}
	// Each batch is ~128 KiB of token ids, so HTTP/2 flow control (64 KiB initial window) stops
	// the server's sends while the client does not read; 40 batches overrun a history of 4.
	big := indexer.Event{Kind: indexer.EventStored, BlockSize: 1024}
	for i := range 32 {
		big.Hashes = append(big.Hashes, uint64(i))
		for range 1024 {
			big.Tokens = append(big.Tokens, uint32(i))
		}
	}
	for range 40 {
		bridge.Batch(0, &indexer.Batch{Events: []indexer.Event{big}})
	}
	var last uint64 = 1
	for {
		b, err := st.Recv()
		if err != nil {
			if status.Code(err) != codes.DataLoss {
				t.Fatalf("slow client: got %v after seq %d, want DATA_LOSS", err, last)
			}
			break
		}
		if b.GetSequenceNumber() != last+1 {
			t.Fatalf("slow client: got seq %d after %d, want contiguous", b.GetSequenceNumber(), last)
		}
		last = b.GetSequenceNumber()
	}
	if last >= 41 {
		t.Errorf("slow client received every batch up to %d: the history bound was not exercised", last)
	}
}

func TestBridgeOtherRPCs(t *testing.T) {
	tests := []struct {
		runtime worker.Runtime
		check   func(ctx context.Context, conn grpc.ClientConnInterface) (healthy bool, genErr error)
	}{
		{worker.RuntimeVLLM, func(ctx context.Context, conn grpc.ClientConnInterface) (bool, error) {
			c := vllm.NewVllmEngineClient(conn)
			h, err := c.HealthCheck(ctx, &vllm.HealthCheckRequest{})
			if err != nil {
				return false, err
			}
			_, err = c.GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
			return h.Healthy, err
		}},
		{worker.RuntimeSGLang, func(ctx context.Context, conn grpc.ClientConnInterface) (bool, error) {
			c := sglang.NewSglangSchedulerClient(conn)
			h, err := c.HealthCheck(ctx, &sglang.HealthCheckRequest{})
			if err != nil {
				return false, err
			}
			_, err = c.FlushCache(ctx, &common.FlushCacheRequest{})
			return h.Healthy, err
		}},
		{worker.RuntimeTokenSpeed, func(ctx context.Context, conn grpc.ClientConnInterface) (bool, error) {
			c := tokenspeed.NewTokenSpeedSchedulerClient(conn)
			h, err := c.HealthCheck(ctx, &tokenspeed.HealthCheckRequest{})
			if err != nil {
				return false, err
			}
			st, err := c.Generate(ctx, &tokenspeed.GenerateRequest{})
			if err != nil {
				return h.Healthy, err
			}
			_, err = st.Recv()
			return h.Healthy, err
		}},
	}
	for _, tc := range tests {
		t.Run(string(tc.runtime), func(t *testing.T) {
			bridge, err := NewBridgeServer(BridgeConfig{Runtime: tc.runtime}, nil)
			if err != nil {
				t.Fatal(err)
			}
			conn := startGRPCServer(t, bridge.Register)
			ctx, cancel := context.WithTimeout(context.Background(), grpcTestTimeout)
			defer cancel()
			healthy, err := tc.check(ctx, conn)
			if !healthy {
				t.Errorf("HealthCheck: got unhealthy, want healthy")
			}
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("other RPC: got %v, want UNIMPLEMENTED", err)
			}
			// Only the configured runtime's service exists.
			other := worker.RuntimeVLLM
			if tc.runtime == worker.RuntimeVLLM {
				other = worker.RuntimeSGLang
			}
			if other == worker.RuntimeVLLM {
				_, err = vllm.NewVllmEngineClient(conn).HealthCheck(ctx, &vllm.HealthCheckRequest{})
			} else {
				_, err = sglang.NewSglangSchedulerClient(conn).HealthCheck(ctx, &sglang.HealthCheckRequest{})
			}
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("HealthCheck on %s service: got %v, want UNIMPLEMENTED", other, err)
			}
		})
	}
}

func TestBridgeClose(t *testing.T) {
	bridge, err := NewBridgeServer(BridgeConfig{Runtime: worker.RuntimeVLLM}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := startGRPCServer(t, bridge.Register)
	ctx, cancel := context.WithTimeout(context.Background(), grpcTestTimeout)
	defer cancel()
	st := grpcRawSubscribe(t, ctx, conn, 0)
	if _, err := st.Header(); err != nil {
		t.Fatal(err)
	}
	bridge.Close()
	bridge.Close() // idempotent
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("after Close: got %v, want UNAVAILABLE", err)
	}
}

func TestNewBridgeServerErrors(t *testing.T) {
	for _, cfg := range []BridgeConfig{{Runtime: ""}, {Runtime: "mlx"}, {Runtime: worker.RuntimeVLLM, History: -1}} {
		if _, err := NewBridgeServer(cfg, nil); err == nil {
			t.Errorf("NewBridgeServer(%+v): got nil error, want one", cfg)
		}
	}
}

// TestGRPCSourcesShareApplySlots: gRPC sources busy at once convert and apply at most
// cap(applySlots) batches at a time, the slots ZMQ sources take too; every batch still
// arrives, in order.
func TestGRPCSourcesShareApplySlots(t *testing.T) {
	const n, per = 8, 20
	var now, peak atomic.Int32
	script, conn := newScript(t)
	cs := make([]overlapConsumer, n)
	calls := make([]grpcCall, n)
	for i := range cs {
		cs[i] = overlapConsumer{newChanConsumer(), &now, &peak}
		src, _ := newTestSource(t, conn, worker.RuntimeVLLM, cs[i], nil)
		runSource(t, src)
		calls[i] = script.next(t)
	}
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := uint64(1); s <= per; s++ {
				if err := calls[i].Stream.Send(&common.KvEventBatch{SequenceNumber: s, Events: []*common.KvCacheEvent{grpcRemovedEv(int64(s))}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range cs {
		checkContiguous(t, cs[i].untilSeq(t, 0, per), 0)
	}
	if got, want := int(peak.Load()), cap(applySlots); got > want || got == 0 {
		t.Errorf("%d sources applied batches at once, want between 1 and %d", got, want)
	}
}
