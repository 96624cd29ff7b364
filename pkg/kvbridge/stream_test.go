package kvbridge

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// logConsumer records Consumer calls as strings: "b<seq>" for a batch, "reset:<reason>".
// resyncAt makes Batch ask for a resync at those seqs.
type logConsumer struct {
	log      []string
	resyncAt map[uint64]bool
}

func (c *logConsumer) Batch(rank int, b *indexer.Batch) bool {
	c.log = append(c.log, fmt.Sprintf("b%d", b.Seq))
	return c.resyncAt[b.Seq]
}

func (c *logConsumer) Reset(rank int, reason string) { c.log = append(c.log, "reset:"+reason) }

// streamHarness drives the stream rules of a ZMQ rank without sockets.
type streamHarness struct {
	s    *streamRules[[]byte]
	c    *logConsumer
	reqs []zmqReplayReq
	now  time.Time
}

func newStreamHarness(replay bool) *streamHarness {
	h := &streamHarness{c: &logConsumer{resyncAt: map[uint64]bool{}}, now: time.Unix(1000, 0)}
	h.s = &streamRules[[]byte]{worker: "w", t: rankTransport(h.c, 0), log: zap.NewNop(), now: func() time.Time { return h.now },
		replayTimeout: time.Second, resyncInterval: 30 * time.Second, maxHeld: 4, scratch: &indexer.Batch{}}
	if replay {
		h.s.t.request = func(start, gen uint64) { h.reqs = append(h.reqs, zmqReplayReq{start, gen}) }
	}
	return h
}

func payloadFor(seq uint64) []byte {
	return EncodeBatch(nil, storedBatch(1000+seq, 0), EncodeOptions{})
}

func (h *streamHarness) live(seqs ...uint64) {
	for _, s := range seqs {
		h.s.live(s, payloadFor(s))
	}
}

// replay answers the last request with seqs and a terminator.
func (h *streamHarness) replay(seqs ...uint64) {
	gen := h.reqs[len(h.reqs)-1].gen
	for _, s := range seqs {
		h.s.replayMsg(gen, s, payloadFor(s), false)
	}
	h.s.replayMsg(gen, ReplayEndSeq, nil, true)
}

// replayOther answers the last request like replay, with other payloads at the same seqs (a
// publisher that restarted).
func (h *streamHarness) replayOther(seqs ...uint64) {
	gen := h.reqs[len(h.reqs)-1].gen
	for _, s := range seqs {
		h.s.replayMsg(gen, s, payloadFor(s+500), false)
	}
	h.s.replayMsg(gen, ReplayEndSeq, nil, true)
}

func (h *streamHarness) starts() []uint64 {
	var out []uint64
	for _, r := range h.reqs {
		out = append(out, r.start)
	}
	return out
}

func TestStreamRules(t *testing.T) {
	tests := []struct {
		name       string
		replay     bool
		run        func(h *streamHarness)
		want       []string
		wantStarts []uint64
		// wantSkipped: sequence numbers passed over without being applied.
		wantSkipped uint64
	}{
		{
			name: "first batch sets the cursor, then in order",
			run:  func(h *streamHarness) { h.live(7, 8, 9) },
			want: []string{"b7", "b8", "b9"},
		},
		{
			name: "live seq <= cursor is a publisher restart",
			run:  func(h *streamHarness) { h.live(3, 4, 0, 1) },
			want: []string{"b3", "b4", "reset:publisher_restart", "b0", "b1"},
		},
		{
			name:        "gap without replay resets and continues",
			run:         func(h *streamHarness) { h.live(1, 2, 5, 6) },
			want:        []string{"b1", "b2", "reset:unrepaired_gap", "b5", "b6"},
			wantSkipped: 2,
		},
		{
			name:   "gap repaired by replay, held batches after it, duplicates skipped",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 2, 5, 6, 7) // 5 starts a replay from 3; 6, 7 held
				h.replay(3, 4, 5, 6)  // 6 also replayed: the held 6 is a duplicate
			},
			want:       []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7"},
			wantStarts: []uint64{3},
		},
		{
			name:   "a live copy arriving after its replayed copy is a duplicate, not a restart",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 3)
				h.replay(2, 3, 4)
				h.live(4, 5)
			},
			want:       []string{"b1", "b2", "b3", "b4", "b5"},
			wantStarts: []uint64{2},
		},
		{
			name:   "a restart seen while replaying is applied after the replay",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 3, 0)
				h.replay(2, 3)
			},
			want:       []string{"b1", "b2", "b3", "reset:publisher_restart", "b0"},
			wantStarts: []uint64{2},
		},
		{
			name:   "replay not starting at cursor+1 resets and continues from the held batch",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 2, 6, 7)
				h.replay(4, 5, 6) // the buffer lost 3
			},
			want:        []string{"b1", "b2", "reset:unrepaired_gap", "b6", "b7"},
			wantStarts:  []uint64{3},
			wantSkipped: 3,
		},
		{
			name:   "replay with only the terminator resets",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 3)
				h.replay()
			},
			want:        []string{"b1", "reset:unrepaired_gap", "b3"},
			wantStarts:  []uint64{2},
			wantSkipped: 1,
		},
		{
			name:   "connect replays from 0 and holds live batches; first replayed sets the cursor",
			replay: true,
			run: func(h *streamHarness) {
				h.s.connected()
				h.live(5, 6)
				h.replay(2, 3, 4, 5)
			},
			want:       []string{"b2", "b3", "b4", "b5", "b6"},
			wantStarts: []uint64{0},
		},
		{
			name:   "reconnect to the same publisher resumes from the cursor",
			replay: true,
			run: func(h *streamHarness) {
				h.s.connected()
				h.replay(1, 2)
				h.s.connected() // the network failed; the publisher went on
				h.live(5)       // held until the replay ends
				h.replay(2, 3, 4, 5)
				h.live(6)
			},
			want:       []string{"b1", "b2", "b3", "b4", "b5", "b6"},
			wantStarts: []uint64{0, 2},
		},
		{
			name:   "reconnect with nothing published meanwhile resumes",
			replay: true,
			run: func(h *streamHarness) {
				h.s.connected()
				h.replay(1)
				h.s.connected()
				h.replay(1)
				h.live(2)
			},
			want:       []string{"b1", "b2"},
			wantStarts: []uint64{0, 1},
		},
		{
			name:   "reconnect to a restarted publisher fails the check and rebuilds",
			replay: true,
			run: func(h *streamHarness) {
				h.s.connected()
				h.replay(1)
				h.s.connected()
				h.replayOther(1) // a new instance's seq 1: other bytes
				h.replayOther(0, 1)
			},
			want:       []string{"b1", "reset:replay_from_zero", "b0", "b1"},
			wantStarts: []uint64{0, 1, 0},
		},
		{
			name:   "reconnect to a restarted publisher that has not reached the cursor rebuilds",
			replay: true,
			run: func(h *streamHarness) {
				h.s.connected()
				h.replay(4)
				h.s.connected()
				h.replay() // nothing at or after 4
				h.replayOther(0, 1)
			},
			want:       []string{"b4", "reset:replay_from_zero", "b0", "b1"},
			wantStarts: []uint64{0, 4, 0},
		},
		{
			name:   "reconnect after the buffer rolled past the cursor rebuilds",
			replay: true,
			run: func(h *streamHarness) {
				h.s.connected()
				h.replay(1)
				h.s.connected()
				h.replay(3, 4) // 1 and 2 are gone
				h.replay(3, 4)
			},
			want:        []string{"b1", "reset:replay_from_zero", "b3", "b4"},
			wantStarts:  []uint64{0, 1, 0},
			wantSkipped: 1, // 2 was lost
		},
		{
			name:   "hole inside the replayed buffer resets at the hole",
			replay: true,
			run: func(h *streamHarness) {
				h.s.connected()
				h.replay(1, 2, 4)
			},
			want:        []string{"b1", "b2", "reset:unrepaired_gap", "b4"},
			wantStarts:  []uint64{0},
			wantSkipped: 1,
		},
		{
			name:   "a truncated replay is continued by a second one",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 5)
				h.replay(2, 3) // HWM cut the tail
				h.replay(4)
			},
			want:       []string{"b1", "b2", "b3", "b4", "b5"},
			wantStarts: []uint64{2, 4},
		},
		{
			name:   "late replies of an abandoned replay are ignored",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 3)
				old := h.reqs[0].gen
				h.now = h.now.Add(2 * time.Second)
				h.s.tick(h.now) // timeout: reset, continue from 3
				h.s.replayMsg(old, 2, payloadFor(2), false)
				h.live(4)
			},
			want:        []string{"b1", "reset:unrepaired_gap", "b3", "b4"},
			wantStarts:  []uint64{2},
			wantSkipped: 1,
		},
		{
			name:   "a replay that keeps answering outlives the timeout; silence after a reply still ends it",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 5) // replay from 2; the timeout is 1 s
				gen := h.reqs[0].gen
				for seq := uint64(2); seq <= 3; seq++ {
					h.now = h.now.Add(900 * time.Millisecond)
					h.s.tick(h.now)
					h.s.replayMsg(gen, seq, payloadFor(seq), false)
				}
				h.now = h.now.Add(900 * time.Millisecond)
				h.s.tick(h.now) // 2.7 s after the request, 0.9 s after the last reply
				h.s.replayMsg(gen, 4, payloadFor(4), false)
				h.now = h.now.Add(1100 * time.Millisecond)
				h.s.tick(h.now) // silent for 1.1 s: given up, the held 5 continues
			},
			want:       []string{"b1", "b2", "b3", "b4", "reset:unrepaired_gap", "b5"},
			wantStarts: []uint64{2},
		},
		{
			name:   "held overflow drops the newest, and the gap is repaired afterwards",
			replay: true,
			run: func(h *streamHarness) {
				h.live(1, 3, 4, 5, 6, 7) // 3 starts a replay; held: 3, 4, 5, 6 (max 4); 7 dropped
				h.replay(2, 3)
				h.live(8) // shows the gap left by the dropped 7
				h.replay(7)
			},
			want:       []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"},
			wantStarts: []uint64{2, 7},
		},
		{
			name:   "unknown parent resyncs at most once per interval",
			replay: true,
			run: func(h *streamHarness) {
				h.c.resyncAt[2], h.c.resyncAt[3] = true, true
				h.live(1, 2) // resync: reset + replay from 0
				h.replay(1, 2)
				h.live(3) // asks again: rate-limited
				h.now = h.now.Add(31 * time.Second)
				h.live(4)
				h.c.resyncAt[4] = true
				h.live(5)
				h.live(4) // restart; resync allowed again after 30 s
			},
			want: []string{"b1", "b2", "reset:resync", "b1", "b2", "b3", "b4", "b5", "reset:publisher_restart", "b4",
				"reset:resync"},
			wantStarts: []uint64{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newStreamHarness(tt.replay)
			tt.run(h)
			if diff := cmp.Diff(tt.want, h.c.log); diff != "" {
				t.Errorf("consumer calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStarts, h.starts()); diff != "" {
				t.Errorf("replay requests (-want +got):\n%s", diff)
			}
			if got := h.s.status().Skipped; got != tt.wantSkipped {
				t.Errorf("skipped: got %d, want %d", got, tt.wantSkipped)
			}
		})
	}
}

func TestStreamMalformedPayloadAdvancesCursor(t *testing.T) {
	h := newStreamHarness(true)
	h.live(1)
	h.s.live(2, []byte{0xc1})
	h.live(3)
	if diff := cmp.Diff([]string{"b1", "b3"}, h.c.log); diff != "" {
		t.Errorf("consumer calls (-want +got):\n%s", diff)
	}
	if len(h.reqs) != 0 {
		t.Errorf("replay requests: got %v, want none", h.starts())
	}
	st := h.s.status()
	if st.Malformed != 1 || st.Cursor != 3 || st.Applied != 2 {
		t.Errorf("status: got %+v, want malformed 1, cursor 3, applied 2", st)
	}
}

// TestBackoff: the shared reconnect delay doubles from MinBackoff to MaxBackoff, jittered in
// [d/2, d], and starts over after progress.
func TestBackoff(t *testing.T) {
	tests := []struct {
		failures int
		rand     uint64
		want     time.Duration
	}{
		{0, 0, 50 * time.Millisecond},
		{0, ^uint64(0), 50*time.Millisecond + time.Duration(^uint64(0)%uint64(50*time.Millisecond+1))},
		{1, 0, 100 * time.Millisecond},
		{5, 0, 1600 * time.Millisecond},
		{6, 0, 2500 * time.Millisecond}, // capped at 5 s
		{60, 0, 2500 * time.Millisecond},
		{60, uint64(2500 * time.Millisecond), 5 * time.Second},
	}
	for _, tc := range tests {
		b := newBackoff(DefaultMinBackoff, DefaultMaxBackoff, func() uint64 { return tc.rand })
		for range tc.failures {
			b.next()
		}
		if got := b.next(); got != tc.want {
			t.Errorf("delay after %d failures with rand %d: got %v, want %v", tc.failures, tc.rand, got, tc.want)
		}
		b.progressed()
		if got, want := b.next(), (&backoff{min: DefaultMinBackoff, max: DefaultMaxBackoff, cur: DefaultMinBackoff, rnd: b.rnd}).next(); got != want {
			t.Errorf("after progress: got %v, want the first step %v", got, want)
		}
	}
}

// TestSinkConsumerForget: a worker forgotten behind the stream's back asks for a resync with
// every batch of that rank until the stream resets it; other ranks are unaffected.
func TestSinkConsumerForget(t *testing.T) {
	ix, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &SinkConsumer{Sink: ix, IDs: []indexer.WorkerID{0, 1}}
	if c.Batch(0, storedBatch(1, 0)) || c.Batch(1, storedBatch(2, 0)) {
		t.Fatal("a resync asked for before Forget")
	}
	c.Forget()
	if ix.WorkerBlocks(0) != 0 || ix.WorkerBlocks(1) != 0 {
		t.Errorf("after Forget the workers hold %d and %d blocks, want 0", ix.WorkerBlocks(0), ix.WorkerBlocks(1))
	}
	for i := range 2 {
		if !c.Batch(0, storedBatch(uint64(10+i), 0)) {
			t.Errorf("batch %d of rank 0 after Forget: no resync asked for", i)
		}
	}
	c.Reset(0, ResetResync)
	if c.Batch(0, storedBatch(20, 0)) {
		t.Error("rank 0 still asks for a resync after its reset")
	}
	if !c.Batch(1, storedBatch(21, 0)) {
		t.Error("rank 1, not reset yet, stopped asking for a resync")
	}
}

// TestStreamHeldBatchesReleased: once a replay ends and the batches held during it are
// applied, the stream keeps none of them alive (at 512 engines a partition's held batches
// were 85 MiB of live heap after the streams had recovered).
func TestStreamHeldBatchesReleased(t *testing.T) {
	h := newStreamHarness(true)
	h.live(1, 2)
	h.live(5) // starts a replay from 3
	var freed atomic.Bool
	p := payloadFor(6)
	runtime.AddCleanup(&p[0], func(*atomic.Bool) { freed.Store(true) }, &freed)
	h.s.live(6, p) // held
	p = nil
	h.live(7) // held; the batch at the cursor afterwards, which the stream keeps
	h.replay(3, 4, 5)
	if diff := cmp.Diff([]string{"b1", "b2", "b3", "b4", "b5", "b6", "b7"}, h.c.log); diff != "" {
		t.Fatalf("applied (-want +got):\n%s", diff)
	}
	for i := 0; i < 100 && !freed.Load(); i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if !freed.Load() {
		t.Error("a batch held during the replay is still reachable after it was applied")
	}
	runtime.KeepAlive(h) // the stream stays in use: only what it keeps may keep the batch
}
