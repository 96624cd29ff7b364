package kvbridge

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"

	kvtest "github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/indexer"
)

// startCollector runs a ZMQCollector on a wildcard loopback port until the test ends and
// returns it once bound.
func startCollector(t *testing.T, cfg CollectorConfig, route CollectorRoute) *ZMQCollector {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "tcp://127.0.0.1:*"
	}
	c, err := NewZMQCollector(cfg, route, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatalf("NewZMQCollector: %v", err)
	}
	runUntilCleanup(t, "collector", c.Run, nil)
	kvtest.WaitFor(t, "collector bound", func() bool { return c.Endpoint() != "" && c.State() == StreamUp })
	return c
}

// topicRoute routes known topics to consumers at rank 0.
func topicRoute(m map[string]*chanConsumer) CollectorRoute {
	return func(topic string) (Consumer, int, bool) {
		c, ok := m[topic]
		if !ok {
			return nil, 0, false
		}
		return c, 0, true
	}
}

// syncPublish publishes b until c delivers the batch published last (slow joiner: a connecting
// PUB drops what it sends before the connection is up). It returns the calls seen.
func syncPublish(t *testing.T, p *Publisher, c *chanConsumer, b func() *indexer.Batch) []recCall {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	var calls []recCall
	for time.Now().Before(deadline) {
		last, err := p.Publish(b())
		if err != nil {
			t.Fatal(err)
		}
		window := time.NewTimer(30 * time.Millisecond)
	collect:
		for {
			select {
			case r := <-c.ch:
				calls = append(calls, r)
				if r.Reset == "" && r.Seq == last {
					window.Stop()
					return calls
				}
			case <-window.C:
				break collect
			}
		}
	}
	t.Fatal("consumer never delivered the last published batch")
	return nil
}

func TestZMQCollectorByTopic(t *testing.T) {
	topics := []string{"kv@127.0.0.1:18001@sim-model", "kv@127.0.0.1:18002@sim-model"}
	cons := map[string]*chanConsumer{topics[0]: newChanConsumer(), topics[1]: newChanConsumer()}
	col := startCollector(t, CollectorConfig{}, topicRoute(cons))
	var pubs []*Publisher
	for i, tp := range topics {
		pubs = append(pubs, startPublisher(t, PublisherConfig{Endpoint: col.Endpoint(), Topic: tp, StartSeq: 1,
			Encode: EncodeOptions{MapEvents: i == 1, ZeroParent: i == 0}}))
	}
	stranger := startPublisher(t, PublisherConfig{Endpoint: col.Endpoint(), Topic: "kv@10.0.0.9:1@other"})
	for i, p := range pubs {
		calls := syncPublish(t, p, cons[topics[i]], func() *indexer.Batch { return storedBatch(uint64(i+1), 0) })
		end := publishN(t, p, 5)
		calls = append(calls, cons[topics[i]].untilSeq(t, 0, end)...)
		checkContiguous(t, calls, 0)
	}
	kvtest.WaitFor(t, "unrouted batches counted", func() bool {
		if _, err := stranger.Publish(storedBatch(9, 0)); err != nil {
			t.Fatal(err)
		}
		return col.Status().Unrouted > 0
	})
	st := col.Status()
	if len(st.Streams) != 2 || st.Streams[0].Topic != topics[0] || st.Streams[1].Topic != topics[1] {
		t.Errorf("streams: got %+v, want one per routed topic", st.Streams)
	}
	for _, s := range st.Streams {
		if s.Resets != 0 || !s.HasCursor {
			t.Errorf("stream %s: got %+v, want a cursor and no resets", s.Topic, s.RankStatus)
		}
	}
}

// TestZMQCollectorRanksShareTopic: two DP ranks publishing under one topic, each with its own
// sequence counter, are kept apart by the envelope's rank.
func TestZMQCollectorRanksShareTopic(t *testing.T) {
	const topic = "kv@127.0.0.1:18003@m"
	c := newChanConsumer()
	col := startCollector(t, CollectorConfig{}, topicRoute(map[string]*chanConsumer{topic: c}))
	rankBatch := func(rank int32) func() *indexer.Batch {
		return func() *indexer.Batch {
			b := storedBatch(uint64(rank)+1, 0)
			b.DPRank, b.HasDPRank = rank, true
			return b
		}
	}
	var all []recCall
	var lasts [2]uint64
	for r := range int32(2) {
		p := startPublisher(t, PublisherConfig{Endpoint: col.Endpoint(), Topic: topic})
		all = append(all, syncPublish(t, p, c, rankBatch(r))...)
		for range 3 {
			seq, err := p.Publish(rankBatch(r)())
			if err != nil {
				t.Fatal(err)
			}
			lasts[r] = seq
		}
	}
	// Drain until both ranks delivered their last batch.
	reached := [2]bool{}
	for _, r := range all {
		reached[r.DPRank] = reached[r.DPRank] || (r.Reset == "" && r.Seq == lasts[r.DPRank])
	}
	for !reached[0] || !reached[1] {
		r := c.next(t)
		all = append(all, r)
		reached[r.DPRank] = reached[r.DPRank] || (r.Reset == "" && r.Seq == lasts[r.DPRank])
	}
	byRank := map[int32][]recCall{}
	for _, r := range all {
		if r.Reset != "" {
			t.Fatalf("unexpected reset: %+v in %v", r, all)
		}
		if r.Rank != int(r.DPRank) {
			t.Errorf("delivered as rank %d, envelope rank %d", r.Rank, r.DPRank)
		}
		byRank[r.DPRank] = append(byRank[r.DPRank], r)
	}
	for r := range int32(2) {
		checkContiguous(t, byRank[r], int(r))
		if n := len(byRank[r]); n < 4 {
			t.Errorf("rank %d: %d batches, want >= 4", r, n)
		}
	}
	if got := len(col.Status().Streams); got != 2 {
		t.Errorf("streams: got %d, want 2 (one per rank)", got)
	}
}

// TestZMQCollectorReplay: with a replay endpoint configured for the topic, a new stream starts
// with a replay from 0, so batches the connecting PUB lost before its connection was up arrive.
func TestZMQCollectorReplay(t *testing.T) {
	const topic = "kv@127.0.0.1:18004@m"
	c := newChanConsumer()
	var replayEP atomicString
	col := startCollector(t, CollectorConfig{Replay: func(tp string) string {
		if tp == topic {
			return replayEP.load()
		}
		return ""
	}}, topicRoute(map[string]*chanConsumer{topic: c}))
	p := startPublisher(t, PublisherConfig{Endpoint: col.Endpoint(), Topic: topic, Replay: "tcp://127.0.0.1:*",
		ReplayTopicFrame: true, StartSeq: 1})
	_, rep := p.Endpoints()
	replayEP.store(rep)
	calls := syncPublish(t, p, c, func() *indexer.Batch { return storedBatch(5, 0) })
	checkContiguous(t, calls, 0)
	if calls[0].Seq != 1 {
		t.Errorf("first delivered seq: got %d, want 1 (replayed from 0)", calls[0].Seq)
	}
	st := col.Status().Streams[0]
	if st.Replayed == 0 {
		t.Errorf("status: got %+v, want replayed batches", st)
	}
}

// TestZMQCollectorMalformed: bad frames are counted and skipped; routed streams survive.
func TestZMQCollectorMalformed(t *testing.T) {
	const topic = "kv@127.0.0.1:18005@m"
	c := newChanConsumer()
	col := startCollector(t, CollectorConfig{}, topicRoute(map[string]*chanConsumer{topic: c}))
	p := startPublisher(t, PublisherConfig{Endpoint: col.Endpoint(), Topic: topic})
	syncPublish(t, p, c, func() *indexer.Batch { return storedBatch(1, 0) })
	bad := [][][]byte{
		{[]byte(topic), {1}},
		{[]byte(topic), AppendSeq(nil, 1)},
		{[]byte(topic), AppendSeq(nil, 99), {0xdd, 0xff, 0xff, 0xff, 0xff}}, // a 4-billion-element envelope
	}
	for _, fr := range bad {
		if err := p.SendRaw(fr...); err != nil {
			t.Fatal(err)
		}
	}
	end := publishN(t, p, 3)
	checkContiguous(t, c.untilSeq(t, 0, end), 0)
	if got := col.Status().Malformed; got != uint64(len(bad)) {
		t.Errorf("malformed: got %d, want %d", got, len(bad))
	}
}

func TestPeekRank(t *testing.T) {
	tests := []struct {
		name   string
		opts   EncodeOptions
		rank   int32
		has    bool
		wantOK bool
	}{
		{"array 3", EncodeOptions{}, 3, true, true},
		{"array 3 nil rank", EncodeOptions{}, 0, false, false},
		{"array 2", EncodeOptions{Envelope: Envelope2}, 3, true, false},
		{"map vllm", EncodeOptions{Envelope: EnvelopeMap}, 2, true, true},
		{"map sglang", EncodeOptions{Envelope: EnvelopeMap, RankKey: "attn_dp_rank"}, 1, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := sampleBatch()
			b.DPRank, b.HasDPRank = tt.rank, tt.has
			got, ok, err := peekRank(EncodeBatch(nil, &b, tt.opts))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([2]any{tt.wantOK, tt.wantOK && got == tt.rank}, [2]any{ok, ok && got == tt.rank}); diff != "" {
				t.Errorf("got (%d, %v), want (%d, %v)", got, ok, tt.rank, tt.wantOK)
			}
		})
	}
	for _, bad := range [][]byte{nil, {0xc1}, {0x93, 0xcb}, {0x81, 0xa1, 'x'}} {
		if _, _, err := peekRank(bad); err == nil {
			t.Errorf("peekRank(%x): got nil error", bad)
		}
	}
}

// atomicString is a string readable from the collector's goroutine while the test sets it.
type atomicString struct {
	mu sync.Mutex
	s  string
}

func (a *atomicString) load() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.s
}

func (a *atomicString) store(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.s = s
}

// blockingConsumer signals each Batch call on entered and returns only when release is closed.
type blockingConsumer struct {
	entered chan struct{}
	release chan struct{}
}

func (c *blockingConsumer) Batch(int, *indexer.Batch) bool {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-c.release
	return false
}

func (c *blockingConsumer) Reset(int, string) {}

// TestZMQCollectorSync: Sync waits for a Consumer call already running, so the router can free
// a removed worker's IDs without holding a lock across deliveries.
func TestZMQCollectorSync(t *testing.T) {
	if err := (&ZMQCollector{}).Sync(t.Context()); err != nil {
		t.Fatalf("Sync before Run: %v", err)
	}
	const topic = "kv@127.0.0.1:18005@m"
	bc := &blockingConsumer{entered: make(chan struct{}, 1), release: make(chan struct{})}
	col := startCollector(t, CollectorConfig{}, func(string) (Consumer, int, bool) { return bc, 0, true })
	pub := startPublisher(t, PublisherConfig{Endpoint: col.Endpoint(), Topic: topic})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(defaultTestTimeout)
publish:
	for { // a connecting PUB drops what it sends before the connection is up
		if _, err := pub.Publish(storedBatch(1, 0)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-bc.entered:
			break publish
		case <-tick.C:
		case <-deadline:
			t.Fatal("the consumer was never called")
		}
	}
	synced := make(chan error, 1)
	go func() { synced <- col.Sync(t.Context()) }()
	select {
	case err := <-synced:
		t.Fatalf("Sync returned (%v) while a Consumer call was running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(bc.release)
	select {
	case err := <-synced:
		if err != nil {
			t.Fatalf("Sync: %v", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Sync did not return after the Consumer call ended")
	}
}
