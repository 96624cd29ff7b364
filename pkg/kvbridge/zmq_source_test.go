package kvbridge

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	kvtest "github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/zmqtest"
	"github.com/kvgate/kvgate/pkg/indexer"
)

// recCall is one Consumer call seen by chanConsumer.
type recCall struct {
	Rank   int
	Reset  string // reason, for a Reset
	Seq    uint64
	DPRank int32
	Hash   uint64 // first hash of the first event
}

// chanConsumer publishes every Consumer call on a channel the test reads. gate, when set,
// blocks Batch until the test closes it (to fill the source's queue).
type chanConsumer struct {
	ch   chan recCall
	gate atomic.Pointer[chan struct{}]
	// resyncOn makes Batch report an unknown parent for batches whose first hash is this.
	resyncOn atomic.Uint64
}

func newChanConsumer() *chanConsumer { return &chanConsumer{ch: make(chan recCall, 100000)} }

func (c *chanConsumer) Batch(rank int, b *indexer.Batch) bool {
	if g := c.gate.Load(); g != nil {
		<-*g
	}
	r := recCall{Rank: rank, Seq: b.Seq, DPRank: b.DPRank}
	if len(b.Events) > 0 && len(b.Events[0].Hashes) > 0 {
		r.Hash = b.Events[0].Hashes[0]
	}
	c.ch <- r
	return r.Hash != 0 && r.Hash == c.resyncOn.Load()
}

func (c *chanConsumer) Reset(rank int, reason string) { c.ch <- recCall{Rank: rank, Reset: reason} }

// next returns the next call or fails after the test timeout.
func (c *chanConsumer) next(t *testing.T) recCall {
	t.Helper()
	select {
	case r := <-c.ch:
		return r
	case <-time.After(defaultTestTimeout):
		t.Fatal("no consumer call within the test timeout")
		return recCall{}
	}
}

// untilSeq collects calls for rank until a batch with seq arrives.
func (c *chanConsumer) untilSeq(t *testing.T, rank int, seq uint64) []recCall {
	t.Helper()
	var out []recCall
	for {
		r := c.next(t)
		out = append(out, r)
		if r.Rank == rank && r.Reset == "" && r.Seq == seq {
			return out
		}
	}
}

// startSource runs a ZMQSource until the test ends.
func startSource(t *testing.T, cfg ZMQConfig, c Consumer, m *Metrics) *ZMQSource {
	t.Helper()
	s, err := NewZMQSource(cfg, c, zaptest.NewLogger(t), m)
	if err != nil {
		t.Fatalf("NewZMQSource: %v", err)
	}
	runUntilCleanup(t, "source", s.Run, func() {
		if got := s.State(); got != StreamStopped {
			t.Errorf("state after Run: got %v, want stopped", got)
		}
	})
	return s
}

// waitUp waits until the source reports StreamUp.
func waitUp(t *testing.T, s *ZMQSource) {
	t.Helper()
	kvtest.WaitFor(t, "source up", func() bool { return s.State() == StreamUp })
}

// syncSource works around the slow joiner and lost tails: it publishes a batch, collects the
// consumer's calls for a short while, and repeats until the consumer has delivered the batch
// published last and at least one batch arrived live (a replay alone does not prove that the
// subscription reached the publisher). It returns the calls seen and that seq.
func syncSource(t *testing.T, p *Publisher, c *chanConsumer, s *ZMQSource, rank int) ([]recCall, uint64) {
	t.Helper()
	applied0 := s.Status().Ranks[rank].Applied
	deadline := time.Now().Add(defaultTestTimeout)
	var calls []recCall
	for time.Now().Before(deadline) {
		last, err := p.Publish(storedBatch(1000, 0))
		if err != nil {
			t.Fatal(err)
		}
		window := time.NewTimer(30 * time.Millisecond)
	collect:
		for {
			select {
			case r := <-c.ch:
				calls = append(calls, r)
				if r.Rank == rank && r.Reset == "" && r.Seq == last && s.Status().Ranks[rank].Applied > applied0 {
					window.Stop()
					return calls, last
				}
			case <-window.C:
				break collect
			}
		}
	}
	t.Fatal("consumer never delivered the last published batch live")
	return nil, 0
}

// publishN publishes n batches whose first hash is 1000+seq and returns the last seq.
func publishN(t *testing.T, p *Publisher, n int) uint64 {
	t.Helper()
	var last uint64
	for range n {
		seq := p.NextSeq()
		var err error
		if last, err = p.Publish(storedBatch(1000+seq, 0)); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// checkContiguous asserts that calls are batches of rank with consecutive seqs and no reset.
func checkContiguous(t *testing.T, calls []recCall, rank int) {
	t.Helper()
	var prev uint64
	first := true
	for _, r := range calls {
		if r.Reset != "" {
			t.Errorf("unexpected reset %q in %v", r.Reset, calls)
			return
		}
		if r.Rank != rank {
			continue
		}
		if !first && r.Seq != prev+1 {
			t.Errorf("seq %d after %d: not contiguous in %v", r.Seq, prev, calls)
			return
		}
		prev, first = r.Seq, false
	}
}

func TestZMQSourceLive(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Topic: "kv@a"})
	pubEP, _ := p.Endpoints()
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, Topic: "kv@"}, c, nil)
	_, last := syncSource(t, p, c, s, 0)
	waitUp(t, s)
	end := publishN(t, p, 5)
	calls := c.untilSeq(t, 0, end)
	checkContiguous(t, calls, 0)
	if calls[0].Seq != last+1 || calls[0].Hash != 1000+last+1 {
		t.Errorf("first call: got %+v, want seq %d", calls[0], last+1)
	}
	st := s.Status()
	if st.Ranks[0].Cursor != end || st.State != "up" {
		t.Errorf("status: got %+v, want cursor %d, up", st, end)
	}
}

// TestZMQSourceTopicFilter: batches of another topic never reach the consumer.
func TestZMQSourceTopicFilter(t *testing.T) {
	port := freePorts(t, 1)
	p := startPublisher(t, PublisherConfig{Endpoint: tcpEP(port), Mode: PubBind, Topic: "other"})
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: tcpEP(port), Topic: "kv@"}, c, nil)
	waitUp(t, s)
	publishN(t, p, 20)
	select {
	case r := <-c.ch:
		t.Fatalf("consumer got %+v for a filtered topic", r)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestZMQSourceReplayFromZeroOnConnect(t *testing.T) {
	for _, topicFrame := range []bool{false, true} {
		t.Run(fmt.Sprintf("topic frame %v", topicFrame), func(t *testing.T) {
			p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*",
				Topic: "kv@a", ReplayTopicFrame: topicFrame})
			before := publishN(t, p, 5) // seqs 0..4, only in the replay buffer
			pubEP, repEP := p.Endpoints()
			c := newChanConsumer()
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, Replay: repEP}, c, m)
			calls := c.untilSeq(t, 0, before)
			want := []recCall{{Seq: 0, Hash: 1000}, {Seq: 1, Hash: 1001}, {Seq: 2, Hash: 1002}, {Seq: 3, Hash: 1003}, {Seq: 4, Hash: 1004}}
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("replayed batches (-want +got):\n%s", diff)
			}
			waitUp(t, s)
			// Live batches continue the cursor; any lost to the slow joiner are replayed.
			more, _ := syncSource(t, p, c, s, 0)
			checkContiguous(t, append(calls, more...), 0)
			if got := testutil.ToFloat64(m.batches.WithLabelValues("w", OutcomeReplayed)); got < 5 {
				t.Errorf("replayed batches metric: got %v, want >= 5", got)
			}
			if got := testutil.ToFloat64(m.streamUp.WithLabelValues("w")); got != 1 {
				t.Errorf("stream up metric: got %v, want 1", got)
			}
		})
	}
}

func TestZMQSourceGapRepair(t *testing.T) {
	for _, topicFrame := range []bool{false, true} {
		t.Run(fmt.Sprintf("topic frame %v", topicFrame), func(t *testing.T) {
			p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*",
				ReplayTopicFrame: topicFrame, StartSeq: 1})
			pubEP, repEP := p.Endpoints()
			c := newChanConsumer()
			s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, Replay: repEP}, c, nil)
			calls, _ := syncSource(t, p, c, s, 0)
			p.SetFaults(PublisherFaults{DropEvery: 3})
			end := publishN(t, p, 12)
			calls = append(calls, c.untilSeq(t, 0, end)...)
			checkContiguous(t, calls, 0)
			st := s.Status().Ranks[0]
			if st.Gaps == 0 || st.Replayed == 0 || st.Resets != 0 {
				t.Errorf("status: got %+v, want gaps > 0, replayed > 0, no resets", st)
			}
		})
	}
}

func TestZMQSourceRestart(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*"})
	pubEP, _ := p.Endpoints()
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP}, c, nil)
	syncSource(t, p, c, s, 0)
	publishN(t, p, 3)
	p.Restart()
	if _, err := p.Publish(storedBatch(7, 0)); err != nil { // seq 0 again
		t.Fatal(err)
	}
	var calls []recCall
	for {
		r := c.next(t)
		calls = append(calls, r)
		if r.Reset != "" {
			break
		}
	}
	if r := c.next(t); r.Seq != 0 || r.Hash != 7 {
		t.Errorf("after the restart reset: got %+v, want seq 0", r)
	}
	if got := calls[len(calls)-1].Reset; got != ResetRestart {
		t.Errorf("reset reason: got %q, want %q", got, ResetRestart)
	}
}

func TestZMQSourceUnrepairableGap(t *testing.T) {
	tests := []struct {
		name   string
		replay bool
		faults PublisherFaults
	}{
		{"no replay endpoint", false, PublisherFaults{DropEvery: 4}},
		{"replay lost the batch", true, PublisherFaults{DropEvery: 4, DropFromHistory: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := PublisherConfig{Endpoint: "tcp://127.0.0.1:*", StartSeq: 1}
			if tt.replay {
				cfg.Replay = "tcp://127.0.0.1:*"
			}
			p := startPublisher(t, cfg)
			pubEP, repEP := p.Endpoints()
			c := newChanConsumer()
			s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, Replay: repEP}, c, nil)
			syncSource(t, p, c, s, 0)
			p.Restart() // counts DropEvery from here: seq 4 is lost
			p.SetFaults(tt.faults)
			publishN(t, p, 6)
			var got []string
			for len(got) < 7 {
				r := c.next(t)
				if r.Reset != "" {
					got = append(got, "reset:"+r.Reset)
				} else {
					got = append(got, fmt.Sprint(r.Seq))
				}
			}
			// Seq 1 after the restart is seen as a publisher restart, then 4 is missing.
			want := []string{"reset:publisher_restart", "1", "2", "3", "reset:unrepaired_gap", "5", "6"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("consumer calls (-want +got):\n%s", diff)
			}
			if st := s.Status().Ranks[0]; st.Gaps != 1 {
				t.Errorf("gaps: got %d, want 1", st.Gaps)
			}
		})
	}
}

// TestZMQSourceReplayTimeout: a replay endpoint nobody serves times out, and the live stream
// continues.
func TestZMQSourceReplayTimeout(t *testing.T) {
	port := freePorts(t, 1) // nothing listens here
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*"})
	pubEP, _ := p.Endpoints()
	c := newChanConsumer()
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, Replay: tcpEP(port), ReplayTimeout: 200 * time.Millisecond}, c, m)
	calls, _ := syncSource(t, p, c, s, 0)
	checkContiguous(t, calls, 0)
	if got := testutil.ToFloat64(m.replays.WithLabelValues("w", ReplayTimeout)); got < 1 {
		t.Errorf("replay timeouts: got %v, want >= 1", got)
	}
	if st := s.Status().Ranks[0]; st.Replaying {
		t.Errorf("still replaying after the timeout: %+v", st)
	}
}

func TestZMQSourceDPRanks(t *testing.T) {
	base := freePorts(t, 4) // PUB base, base+1; ROUTER base+2, base+3
	var pubs []*Publisher
	for r := range 2 {
		pubs = append(pubs, startPublisher(t, PublisherConfig{Endpoint: tcpEP(base), Mode: PubBind,
			Replay: tcpEP(base + 2), Rank: r, StartSeq: uint64(100 * r)}))
	}
	// Batches published before the source starts reach it through the replay from 0.
	var ends [2]uint64
	for r := range 2 {
		ends[r] = publishN(t, pubs[r], 4)
	}
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: tcpEP(base), Replay: tcpEP(base + 2), DPSize: 2}, c, nil)
	subs, reps := s.Endpoints()
	if diff := cmp.Diff([]string{tcpEP(base), tcpEP(base + 1)}, subs); diff != "" {
		t.Errorf("SUB endpoints (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{tcpEP(base + 2), tcpEP(base + 3)}, reps); diff != "" {
		t.Errorf("replay endpoints (-want +got):\n%s", diff)
	}
	waitUp(t, s)
	for r := range 2 {
		ends[r] = publishN(t, pubs[r], 4)
	}
	seen := map[int][]recCall{}
	for len(seen[0]) == 0 || seen[0][len(seen[0])-1].Seq != ends[0] || len(seen[1]) == 0 || seen[1][len(seen[1])-1].Seq != ends[1] {
		r := c.next(t)
		if r.Reset != "" {
			t.Fatalf("unexpected reset %+v", r)
		}
		if r.DPRank != int32(r.Rank) {
			t.Errorf("batch of rank %d carries dp rank %d", r.Rank, r.DPRank)
		}
		seen[r.Rank] = append(seen[r.Rank], r)
	}
	for r := range 2 {
		checkContiguous(t, seen[r], r)
		if first := seen[r][0].Seq; first != uint64(100*r) {
			t.Errorf("rank %d first seq: got %d, want %d (replayed from 0)", r, first, 100*r)
		}
	}
}

// TestZMQSourceMalformedFrames: bad frames are counted and skipped; the stream survives.
func TestZMQSourceMalformedFrames(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Topic: "kv"})
	pubEP, _ := p.Endpoints()
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP}, c, nil)
	syncSource(t, p, c, s, 0)
	bad := [][][]byte{
		{[]byte("kv")},                                 // one frame
		{[]byte("kv"), {1, 2, 3}, {0x90}},              // short seq
		{[]byte("kv\xff"), AppendSeq(nil, 1), {0x90}},  // non-UTF-8 topic
		{[]byte("kv"), AppendSeq(nil, 1), {0x90}, {0}}, // four frames
	}
	for _, frames := range bad {
		if err := p.SendRaw(frames...); err != nil {
			t.Fatal(err)
		}
	}
	end := publishN(t, p, 3)
	checkContiguous(t, c.untilSeq(t, 0, end), 0)
	if got := s.Status().Ranks[0].Malformed; got != uint64(len(bad)) {
		t.Errorf("malformed: got %d, want %d", got, len(bad))
	}
}

// TestZMQSourceQueueDrops: with the consumer stalled, a tiny queue overflows; drops are counted
// and the resulting gaps are repaired by replay.
func TestZMQSourceQueueDrops(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*", StartSeq: 1})
	pubEP, repEP := p.Endpoints()
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, Replay: repEP, QueueSize: 2}, c, nil)
	calls, _ := syncSource(t, p, c, s, 0)
	gate := make(chan struct{})
	c.gate.Store(&gate)
	end := publishN(t, p, 50)
	kvtest.WaitFor(t, "drops with a stalled consumer", func() bool { return s.Status().Ranks[0].Dropped > 0 })
	close(gate)
	// If the very last batches were dropped, only a later batch shows the gap: keep publishing
	// until the consumer is past end.
	more, last := syncSource(t, p, c, s, 0)
	calls = append(calls, more...)
	checkContiguous(t, calls, 0)
	if last <= end || calls[len(calls)-1].Seq != last {
		t.Errorf("last delivered: got %d, want %d (> %d)", calls[len(calls)-1].Seq, last, end)
	}
}

// TestZMQSourcePublisherProcessRestart: a publisher process that goes away and comes back on
// the same ports is rebuilt through a replay from 0 when libzmq reconnects.
func TestZMQSourcePublisherProcessRestart(t *testing.T) {
	ports := freePorts(t, 2)
	cfg := PublisherConfig{Endpoint: tcpEP(ports), Mode: PubBind, Replay: tcpEP(ports + 1)}
	p1, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() {
		defer close(done1)
		p1.Run(ctx1)
	}()
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: tcpEP(ports), Replay: tcpEP(ports + 1)}, c, nil)
	syncSource(t, p1, c, s, 0)
	// Past seq 0 before the restart: a new instance's first batch then goes back in sequence,
	// as an engine's does after any real run. (Had the first instance stopped at seq 0, the
	// new one's seq 0 would read as a duplicate of it, and the test would race on whether the
	// SUB reconnected before the new batches.)
	for end := publishN(t, p1, 3); ; {
		if r := c.next(t); r.Reset == "" && r.Seq == end {
			break
		}
	}
	cancel1()
	<-done1
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	kvtest.WaitFor(t, "source down", func() bool { return s.State() == StreamDown })

	p2 := startPublisher(t, cfg) // a new instance: seq 0 again, empty buffer
	end := publishN(t, p2, 3)
	var got []string
	for {
		r := c.next(t)
		if r.Reset != "" {
			got = append(got, r.Reset)
			continue
		}
		got = append(got, fmt.Sprint(r.Seq))
		if r.Seq == end {
			break
		}
	}
	// Batches published before the SUB reconnected come from the replay of the new instance.
	want := []string{ResetReplayFromZero, "0", "1", "2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("consumer calls after the restart (-want +got):\n%s", diff)
	}
	waitUp(t, s)
}

// TestZMQSourceBackoff: an endpoint that cannot be connected is retried with backoff, never in
// a busy loop, and the stream shows as down.
func TestZMQSourceBackoff(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s, err := NewZMQSource(ZMQConfig{Worker: "w", Endpoint: "tcp://127.0.0.1:notaport", Rand: func() uint64 { return 0 }},
		newChanConsumer(), zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	kvtest.WaitFor(t, "first failure", func() bool { return logs.Len() > 0 })
	if got := s.State(); got != StreamDown {
		t.Errorf("state: got %v, want down", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Waits of 50, 100, 200, 400 ms (half of 100 ms → 5 s, jitter 0) fit in 700 ms: at most
	// 5 attempts, where a busy loop would make thousands.
	if n := logs.FilterMessageSnippet("reconnecting").Len(); n < 2 || n > 5 {
		t.Errorf("reconnect attempts in 700ms: got %d, want 2..5", n)
	}
}

// TestZMQSourceResync: an unknown parent reported by the consumer clears the rank and rebuilds
// it from a replay from 0, at most once per resync interval.
func TestZMQSourceResync(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*", StartSeq: 1})
	pubEP, repEP := p.Endpoints()
	c := newChanConsumer()
	now := time.Unix(5000, 0)
	var clock sync.Mutex
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, Replay: repEP,
		Now: func() time.Time { clock.Lock(); defer clock.Unlock(); return now }}, c, nil)
	syncSource(t, p, c, s, 0)
	c.resyncOn.Store(777)
	first, err := p.Publish(storedBatch(777, 0))
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Publish(storedBatch(777, 0)) // rate-limited: no second resync
	if err != nil {
		t.Fatal(err)
	}
	var resets []string
	seenFirst := 0
	for seenFirst < 2 || resets == nil {
		r := c.next(t)
		switch {
		case r.Reset != "":
			resets = append(resets, r.Reset)
		case r.Seq == first:
			seenFirst++ // live, then again from the rebuild
		}
	}
	calls := c.untilSeq(t, 0, second)
	for _, r := range calls {
		if r.Reset != "" {
			resets = append(resets, r.Reset)
		}
	}
	if diff := cmp.Diff([]string{ResetResync}, resets); diff != "" {
		t.Errorf("resets (-want +got):\n%s", diff)
	}
	clock.Lock()
	now = now.Add(31 * time.Second)
	clock.Unlock()
	if _, err := p.Publish(storedBatch(777, 0)); err != nil {
		t.Fatal(err)
	}
	for {
		if r := c.next(t); r.Reset != "" {
			if r.Reset != ResetResync {
				t.Errorf("reset after the interval: got %q, want %q", r.Reset, ResetResync)
			}
			break
		}
	}
}

// TestZMQSourceOversizedFrame: a frame above MaxMsgSize is refused by libzmq instead of being
// allocated; libzmq then drops the connection for good, so the source recreates its sockets
// after ReconnectGrace and the stream carries on.
func TestZMQSourceOversizedFrame(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*"})
	pubEP, _ := p.Endpoints()
	c := newChanConsumer()
	s := startSource(t, ZMQConfig{Worker: "w", Endpoint: pubEP, MaxMsgSize: 4096, ReconnectGrace: 300 * time.Millisecond}, c, nil)
	_, before := syncSource(t, p, c, s, 0)
	if err := p.SendRaw([]byte{}, AppendSeq(nil, before+1), make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	calls, _ := syncSource(t, p, c, s, 0)
	for _, r := range calls {
		if r.Reset == "" && r.Seq == before+1 {
			t.Fatalf("the oversized message was delivered: %+v", r)
		}
	}
}

// countingConsumer tallies delivered events by kind for batches with seq >= from.
type countingConsumer struct {
	from   uint64
	mu     sync.Mutex
	counts eventCounts
	seqs   []uint64
	seen   chan uint64
}

func (c *countingConsumer) Batch(rank int, b *indexer.Batch) bool {
	c.mu.Lock()
	if b.Seq >= c.from {
		countEvents(&c.counts, b)
		c.seqs = append(c.seqs, b.Seq)
	}
	c.mu.Unlock()
	c.seen <- b.Seq
	return false
}

func (c *countingConsumer) Reset(int, string) {}

// TestZMQSourceFixtureFrames sends the captured llm-d-inference-sim frames over a real PUB and
// checks that the source delivers the README's event counts.
func TestZMQSourceFixtureFrames(t *testing.T) {
	for _, file := range []string{"sim-array-live.jsonl", "sim-map-live.jsonl"} {
		t.Run(file, func(t *testing.T) {
			msgs := loadFixture(t, file)
			pub := zmqtest.Socket(t, zmq.PUB)
			if err := pub.Bind("tcp://127.0.0.1:*"); err != nil {
				t.Fatal(err)
			}
			ep, err := pub.GetLastEndpoint()
			if err != nil {
				t.Fatal(err)
			}
			c := &countingConsumer{from: 2, seen: make(chan uint64, 1000)}
			startSource(t, ZMQConfig{Worker: "sim", Endpoint: ep, Topic: "kv@127.0.0.1:"}, c, nil)
			send := func(frames [][]byte) {
				if _, err := pub.SendMessage(frames[0], frames[1], frames[2]); err != nil {
					t.Fatal(err)
				}
			}
			// Slow joiner: repeat message 1 until it arrives, then send the rest once.
			deadline := time.Now().Add(defaultTestTimeout)
		sync:
			for {
				if time.Now().After(deadline) {
					t.Fatal("message 1 never arrived")
				}
				send(msgs[0])
				select {
				case <-c.seen:
					break sync
				case <-time.After(30 * time.Millisecond):
				}
			}
			for _, m := range msgs[1:] {
				send(m)
			}
			for seq := uint64(0); seq != 8; {
				select {
				case seq = <-c.seen:
				case <-time.After(defaultTestTimeout):
					t.Fatal("batch 8 never arrived")
				}
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			// The README's totals minus batch 1 (two BlockStored events, 4 blocks).
			if diff := cmp.Diff(eventCounts{Stored: 16, Removed: 5, Cleared: 1, StoredHashes: 36}, c.counts); diff != "" {
				t.Errorf("event counts of batches 2..8 (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]uint64{2, 3, 4, 5, 6, 7, 8}, c.seqs); diff != "" {
				t.Errorf("seqs (-want +got):\n%s", diff)
			}
		})
	}
}

// processThreads returns the process's OS thread count.
func processThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("Threads: %q", v)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// TestZMQSourceWaitsWithoutThreads: waiting sources are entries in the process's one epoll
// poller on their sockets' ZMQ_FD, so connected idle streams do not hold an OS thread each (a
// reader blocked in zmq_poll does: a cgo call keeps its thread).
func TestZMQSourceWaitsWithoutThreads(t *testing.T) {
	const n = 48
	pubs := make([]*Publisher, n)
	for i := range pubs {
		pubs[i] = startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", StartSeq: 1})
	}
	time.Sleep(100 * time.Millisecond)
	before := processThreads(t)
	cs := make([]*chanConsumer, n)
	for i, p := range pubs {
		pubEP, _ := p.Endpoints()
		cs[i] = newChanConsumer()
		s := startSource(t, ZMQConfig{Worker: fmt.Sprint("w", i), Endpoint: pubEP}, cs[i], nil)
		syncSource(t, p, cs[i], s, 0)
	}
	time.Sleep(300 * time.Millisecond) // every reader is waiting now
	if grown := processThreads(t) - before; grown > n/4 {
		t.Errorf("OS threads grew by %d for %d idle sources, want at most %d", grown, n, n/4)
	}
}

// TestZMQSourceManyStreamsNoStall: many sources, each fed bursts with pauses in between from
// its own goroutine, deliver every batch in order. A wake-up lost between a drain and the
// next wait would leave a stream's batches unread until its next one; the last batch of each
// stream has no next one, so it would never arrive.
func TestZMQSourceManyStreamsNoStall(t *testing.T) {
	const n, bursts = 16, 40
	type stream struct {
		p     *Publisher
		c     *chanConsumer
		first uint64
	}
	ss := make([]stream, n)
	for i := range ss {
		p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", StartSeq: 1})
		pubEP, _ := p.Endpoints()
		c := newChanConsumer()
		s := startSource(t, ZMQConfig{Worker: fmt.Sprint("w", i), Endpoint: pubEP}, c, nil)
		_, last := syncSource(t, p, c, s, 0)
		ss[i] = stream{p: p, c: c, first: last + 1}
	}
	var wg sync.WaitGroup
	lasts := make([]uint64, n)
	for i := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range bursts {
				for range 1 + (i+b)%7 {
					seq, err := ss[i].p.Publish(storedBatch(1000, 0))
					if err != nil {
						t.Error(err)
						return
					}
					lasts[i] = seq
				}
				time.Sleep(time.Duration((i*b)%3) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for i := range ss {
		calls := ss[i].c.untilSeq(t, 0, lasts[i])
		checkContiguous(t, calls, 0)
		if got := calls[0].Seq; got > ss[i].first {
			t.Errorf("stream %d: first batch after sync %d, want %d", i, got, ss[i].first)
		}
	}
}

// overlapConsumer records how many Batch calls run at once across the sources sharing it.
type overlapConsumer struct {
	*chanConsumer
	now, peak *atomic.Int32
}

func (c overlapConsumer) Batch(rank int, b *indexer.Batch) bool {
	n := c.now.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	time.Sleep(time.Millisecond) // an apply long enough for the sources' calls to overlap
	c.now.Add(-1)
	return c.chanConsumer.Batch(rank, b)
}

// TestZMQSourcesShareApplySlots: sources busy at once decode and apply at most
// cap(applySlots) batches at a time (GOMAXPROCS − 1, at least 1), so that a burst of
// replays after a partition never takes every P from the requests; every batch still
// arrives, in order.
func TestZMQSourcesShareApplySlots(t *testing.T) {
	const n, per = 8, 20
	var now, peak atomic.Int32
	pubs := make([]*Publisher, n)
	cs := make([]overlapConsumer, n)
	for i := range pubs {
		pubs[i] = startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", StartSeq: 1})
		pubEP, _ := pubs[i].Endpoints()
		cs[i] = overlapConsumer{newChanConsumer(), &now, &peak}
		s := startSource(t, ZMQConfig{Worker: fmt.Sprint("w", i), Endpoint: pubEP}, cs[i], nil)
		syncSource(t, pubs[i], cs[i].chanConsumer, s, 0)
	}
	peak.Store(0)
	lasts := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				seq, err := pubs[i].Publish(storedBatch(1000, 0))
				if err != nil {
					t.Error(err)
					return
				}
				lasts[i] = seq
			}
		}()
	}
	wg.Wait()
	for i := range cs {
		checkContiguous(t, cs[i].untilSeq(t, 0, lasts[i]), 0)
	}
	if got, want := int(peak.Load()), cap(applySlots); got > want || got == 0 {
		t.Errorf("%d sources applied batches at once, want between 1 and %d", got, want)
	}
}

// TestZMQItemSize: every source's queue holds DefaultQueueSize items whether used or not
// (320 KiB a stream at 80 bytes an item), so a field that adds padding shows here.
func TestZMQItemSize(t *testing.T) {
	if got := unsafe.Sizeof(zmqItem{}); got > 80 {
		t.Errorf("zmqItem is %d bytes, want at most 80", got)
	}
}
