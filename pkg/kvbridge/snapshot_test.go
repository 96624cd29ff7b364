package kvbridge

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

const snapBlockSize = 4

// eventGen produces a random but engine-like event stream for one rank: chains stored at the
// root or under a block it holds, removals anywhere in a chain (so live blocks outlive their
// parents), the occasional clear, orphan chains under removed parents, blocks stored twice, and
// the simulator's anomaly of a hash stored again with other content. It also computes every
// block key an index can hold (keys), following pkg/indexer's hashing, to compare indexes on.
type eventGen struct {
	rnd     *rand.Rand
	nextH   int64
	live    []int64          // hashes the engine holds, in no order
	key     map[int64]uint64 // the index's engine-hash → key view
	lora    map[int64]int64  // LoRA id of a held chain's blocks (0: none)
	tokens  map[int64][]uint32
	parent  map[int64]*int64
	removed []int64
	keys    map[uint64]bool
}

func newEventGen(seed uint64) *eventGen {
	return &eventGen{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), nextH: 1000,
		key: map[int64]uint64{}, lora: map[int64]int64{}, tokens: map[int64][]uint32{}, parent: map[int64]*int64{}, keys: map[uint64]bool{}}
}

func (g *eventGen) dropLive(h int64) {
	for i, x := range g.live {
		if x == h {
			g.live[i] = g.live[len(g.live)-1]
			g.live = g.live[:len(g.live)-1]
			break
		}
	}
	delete(g.key, h)
	g.removed = append(g.removed, h)
}

func (g *eventGen) chainTokens() []uint32 {
	t := make([]uint32, snapBlockSize)
	for i := range t {
		t[i] = uint32(g.rnd.IntN(50)) // a small vocabulary: equal contents happen
	}
	return t
}

// batch returns the next batch's events.
func (g *eventGen) batch() []indexer.Event {
	var evs []indexer.Event
	for range 1 + g.rnd.IntN(3) {
		switch r := g.rnd.IntN(100); {
		case r < 1:
			evs = append(evs, indexer.Event{Kind: indexer.EventCleared})
			g.live, g.removed = nil, nil
			clear(g.key)
		case r < 30 && len(g.live) > 0:
			var hs []uint64
			for range 1 + g.rnd.IntN(3) {
				if len(g.live) == 0 {
					break
				}
				h := g.live[g.rnd.IntN(len(g.live))]
				g.dropLive(h)
				hs = append(hs, uint64(h))
			}
			evs = append(evs, indexer.Event{Kind: indexer.EventRemoved, Hashes: hs})
		default:
			evs = append(evs, g.stored())
		}
	}
	return evs
}

func (g *eventGen) stored() indexer.Event {
	ev := indexer.Event{Kind: indexer.EventStored, BlockSize: snapBlockSize}
	var lora int64
	var pk uint64
	hasKey := false
	switch r := g.rnd.IntN(100); {
	case r < 25 || len(g.live) == 0:
		if g.rnd.IntN(4) == 0 {
			lora = 1 + g.rnd.Int64N(2)
		}
	case r < 30 && len(g.removed) > 0:
		// Under a block the engine no longer holds: a client never places it.
		ev.Parent, ev.HasParent = uint64(g.removed[g.rnd.IntN(len(g.removed))]), true
	default:
		p := g.live[g.rnd.IntN(len(g.live))]
		ev.Parent, ev.HasParent = uint64(p), true
		lora, pk, hasKey = g.lora[p], g.key[p], true
	}
	if ev.HasParent && !hasKey {
		if _, ok := g.key[int64(ev.Parent)]; !ok {
			// Orphan: hashes and tokens only, nothing to track.
			for range 1 + g.rnd.IntN(3) {
				g.nextH++
				ev.Hashes = append(ev.Hashes, uint64(g.nextH))
				ev.Tokens = append(ev.Tokens, g.chainTokens()...)
			}
			return ev
		}
	}
	if lora != 0 {
		ev.LoraID, ev.HasLoraID = lora, true
	}
	ns := indexer.Namespace("", lora, lora != 0, "")
	for i := range 1 + g.rnd.IntN(4) {
		var h int64
		var tok []uint32
		switch r := g.rnd.IntN(100); {
		case r < 4 && len(g.live) > 0:
			// A hash stored again: with other content (it moves), or, under its own parent
			// with its own tokens, unchanged.
			h = g.live[g.rnd.IntN(len(g.live))]
			tok = g.chainTokens()
			if r < 2 && i == 0 && g.tokens[h] != nil {
				tok = g.tokens[h]
			}
		default:
			g.nextH++
			h = g.nextH
			tok = g.chainTokens()
		}
		c := indexer.ContentHash(tok)
		var k uint64
		if !hasKey {
			k = indexer.RootHash(c, ns)
		} else {
			k = indexer.ChainHash(pk, c)
		}
		if _, ok := g.key[h]; !ok {
			g.live = append(g.live, h)
		}
		g.key[h], g.lora[h], g.tokens[h] = k, lora, tok
		g.keys[k] = true
		pk, hasKey = k, true
		ev.Hashes = append(ev.Hashes, uint64(h))
		ev.Tokens = append(ev.Tokens, tok...)
	}
	return ev
}

// indexView is an index's membership of every key in keys, and its size.
type indexView struct {
	Held    map[uint64]bool
	Members int
}

func viewOf(ix *indexer.Index, keys map[uint64]bool) indexView {
	v := indexView{Held: map[uint64]bool{}, Members: ix.Memberships()}
	var dst []indexer.WorkerMatch
	for k := range keys {
		if dst = ix.Match([]uint64{k}, dst[:0]); len(dst) > 0 {
			v.Held[k] = true
		}
	}
	return v
}

func newTestIndex(t *testing.T) *indexer.Index {
	t.Helper()
	ix, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// applyProto decodes b as a client does and applies it as worker rank.
func applyProto(ix *indexer.Index, dec *ProtoDecoder, b *common.KvEventBatch) indexer.ApplyResult {
	var ib indexer.Batch
	dec.Decode(&ib, b)
	return ix.Apply(indexer.WorkerID(b.GetDpRank()), ib.Events)
}

// TestBlockSetSnapshotEqualsLiveIndex: for random event streams (removals inside chains,
// clears, orphans, re-stored hashes, LoRA chains) on two ranks, the snapshot of the block sets
// applied to an empty index gives exactly the index that applied every event live, at many
// points of the stream; and it never stores a chain under a parent it did not store first.
func TestBlockSetSnapshotEqualsLiveIndex(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			gens := []*eventGen{newEventGen(seed), newEventGen(seed + 100)}
			sets := []*blockSet{newBlockSet(1 << 20), newBlockSet(1 << 20)}
			live := newTestIndex(t)
			keys := map[uint64]bool{}
			seq := uint64(0)
			for step := range 1500 {
				rank := step % 2
				evs := gens[rank].batch()
				seq++
				pb := batchToProto(rank, seq, 0, &indexer.Batch{Events: evs})
				applySet(sets[rank], pb)
				var dec ProtoDecoder
				applyProto(live, &dec, pb)
				if step%250 != 249 {
					continue
				}
				for _, g := range gens {
					for k := range g.keys {
						keys[k] = true
					}
				}
				frozen := []rankSet{{0, sets[0].freeze()}, {1, sets[1].freeze()}}
				batches := buildSnapshot(frozen, seq, 0)
				fresh := newTestIndex(t)
				for i, b := range batches {
					if want := seq - uint64(len(batches)-1-i); b.GetSequenceNumber() != want {
						t.Fatalf("step %d: snapshot batch %d has seq %d, want %d", step, i, b.GetSequenceNumber(), want)
					}
					if res := applyProto(fresh, &dec, b); res.UnknownParents > 0 || res.Skipped > 0 {
						t.Fatalf("step %d: snapshot batch %d: %+v, want no unknown parents or skipped events", step, i, res)
					}
				}
				if diff := cmp.Diff(viewOf(live, keys), viewOf(fresh, keys)); diff != "" {
					t.Fatalf("step %d: snapshot index differs from the live one (-live +snapshot):\n%s", step, diff)
				}
				if got, want := sets[0].liveLen()+sets[1].liveLen(), live.WorkerBlocks(0)+live.WorkerBlocks(1); got != want {
					t.Errorf("step %d: block sets hold %d blocks, the index %d", step, got, want)
				}
			}
		})
	}
}

// applySet applies b to set the way BridgeServer.publish does.
func applySet(set *blockSet, b *common.KvEventBatch) {
	s := &BridgeServer{sets: map[int]*blockSet{int(b.GetDpRank()): set}}
	s.applySetLocked(b)
}

func protoChain(parent *int64, hashes ...int64) *common.KvEventBatch {
	st := &common.KvBlocksStored{ParentBlockHash: parent}
	for _, h := range hashes {
		st.Blocks = append(st.Blocks, &common.KvBlock{BlockHash: h, BlockSize: 2, TokenIds: []uint32{uint32(h), uint32(h)}})
	}
	return &common.KvEventBatch{Events: []*common.KvCacheEvent{{Data: &common.KvCacheEvent_Stored{Stored: st}}}}
}

func protoRemoved(hashes ...int64) *common.KvEventBatch {
	return &common.KvEventBatch{Events: []*common.KvCacheEvent{{Data: &common.KvCacheEvent_Removed{Removed: &common.KvBlocksRemoved{BlockHashes: hashes}}}}}
}

// setSummary lists a set's nodes in creation order as "hash" (live) or "(hash)" (ghost).
func setSummary(s *blockSet) []string {
	var out []string
	for i := s.head; i != noNode; i = s.nodes[i].next {
		n := s.nodes[i]
		h := strconv.FormatInt(n.blk.GetBlockHash(), 10)
		if !n.live {
			h = "(" + h + ")"
		}
		out = append(out, h)
	}
	return out
}

func TestBlockSet(t *testing.T) {
	p := func(h int64) *int64 { return &h }
	tests := []struct {
		name    string
		max     int
		batches []*common.KvEventBatch
		want    []string
		evicted uint64
		orphans uint64
	}{
		{name: "store", batches: []*common.KvEventBatch{protoChain(nil, 1, 2, 3), protoChain(p(2), 4)},
			want: []string{"1", "2", "3", "4"}},
		{name: "stored twice is kept once", batches: []*common.KvEventBatch{protoChain(nil, 1, 2), protoChain(nil, 1, 2)},
			want: []string{"1", "2"}},
		{name: "remove a leaf", batches: []*common.KvEventBatch{protoChain(nil, 1, 2, 3), protoRemoved(3)},
			want: []string{"1", "2"}},
		{name: "a removed parent stays as a ghost while a child lives", batches: []*common.KvEventBatch{protoChain(nil, 1, 2, 3), protoRemoved(2)},
			want: []string{"1", "(2)", "3"}},
		{name: "ghosts go with their last child", batches: []*common.KvEventBatch{protoChain(nil, 1, 2, 3), protoRemoved(1, 2), protoRemoved(3)},
			want: nil},
		{name: "unknown and removed hashes are ignored", batches: []*common.KvEventBatch{protoChain(nil, 1), protoRemoved(9, 1, 1)},
			want: nil},
		{name: "a chain under a block not held is dropped", batches: []*common.KvEventBatch{protoChain(nil, 1), protoRemoved(1), protoChain(p(1), 2), protoChain(p(7), 3)},
			want: nil, orphans: 2},
		{name: "cleared", batches: []*common.KvEventBatch{protoChain(nil, 1, 2), {Events: []*common.KvCacheEvent{{Data: &common.KvCacheEvent_Cleared{Cleared: &common.KvCacheCleared{}}}}}, protoChain(nil, 5)},
			want: []string{"5"}},
		{name: "bound drops the oldest", max: 3, batches: []*common.KvEventBatch{protoChain(nil, 1), protoChain(nil, 2), protoChain(nil, 3), protoChain(nil, 4), protoChain(nil, 5)},
			want: []string{"3", "4", "5"}, evicted: 2},
		{name: "bound counts ghosts", max: 3, batches: []*common.KvEventBatch{protoChain(nil, 1, 2, 3), protoChain(nil, 4)},
			// 1 goes (a ghost: 2 and 3 need it), then 2 (a ghost too), then 3 frees all three.
			want: []string{"4"}, evicted: 3},
		{name: "a hash stored again with other content moves", batches: []*common.KvEventBatch{protoChain(nil, 1, 2, 3), protoChain(nil, 2)},
			want: []string{"1", "(2)", "3", "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			max := tc.max
			if max == 0 {
				max = 100
			}
			s := newBlockSet(max)
			for _, b := range tc.batches {
				applySet(s, b)
			}
			if diff := cmp.Diff(tc.want, setSummary(s)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			if s.evicted != tc.evicted || s.orphaned != tc.orphans {
				t.Errorf("evicted %d orphaned %d, want %d and %d", s.evicted, s.orphaned, tc.evicted, tc.orphans)
			}
			if s.used != len(tc.want) {
				t.Errorf("used %d, want %d", s.used, len(tc.want))
			}
		})
	}
}

// TestSnapshotBatchesBounded: a large set is split into bounded batches numbered to end at the
// newest sequence number; with fewer sequence numbers than that needs, each rank's set is one
// batch.
func TestSnapshotBatchesBounded(t *testing.T) {
	s := newBlockSet(1 << 20)
	var hs []int64
	for h := int64(1); h <= 10000; h++ {
		hs = append(hs, h)
	}
	applySet(s, protoChain(nil, hs...))
	frozen := []rankSet{{0, s.freeze()}}
	batches := buildSnapshot(frozen, 100, 0)
	if len(batches) != 3 {
		t.Fatalf("got %d batches, want 3 (10000 blocks by %d)", len(batches), snapshotBatchBlocks)
	}
	blocks := 0
	for i, b := range batches {
		if got, want := b.GetSequenceNumber(), uint64(98+i); got != want {
			t.Errorf("batch %d seq %d, want %d", i, got, want)
		}
		n := 0
		for _, ev := range b.Events {
			n += len(ev.GetStored().GetBlocks())
		}
		if n > snapshotBatchBlocks {
			t.Errorf("batch %d holds %d blocks, more than %d", i, n, snapshotBatchBlocks)
		}
		blocks += n
	}
	if blocks != 10000 {
		t.Errorf("snapshot holds %d blocks, want 10000", blocks)
	}
	if got := buildSnapshot(frozen, 1, 0); len(got) != 1 || got[0].GetSequenceNumber() != 1 {
		t.Errorf("with one sequence number: got %d batches, want 1 numbered 1", len(got))
	}
}

// publishRandom feeds n random batches of two ranks into bridge and into the reference index,
// from the calling goroutine.
func publishRandom(bridge *BridgeServer, ref *indexer.Index, gens []*eventGen, n int) {
	var dec ProtoDecoder
	for i := range n {
		rank := i % len(gens)
		b := &indexer.Batch{Events: gens[rank].batch()}
		bridge.Batch(rank, b)
		applyProto(ref, &dec, batchToProto(rank, 0, 0, b))
	}
}

// followBridge subscribes from 0 and applies the stream to a fresh index until it has applied
// seq last, checking that it opens with the announced snapshot and continues it with no gap
// and no duplicate. It starts over on DATA_LOSS (it fell behind the history).
func followBridge(ctx context.Context, conn grpc.ClientConnInterface, last uint64) (*indexer.Index, bool, error) {
	for {
		ix, err := indexer.New(indexer.Config{})
		if err != nil {
			return nil, false, err
		}
		st, err := vllm.NewVllmEngineClient(conn).SubscribeKvEvents(ctx, &common.SubscribeKvEventsRequest{})
		if err != nil {
			return nil, false, err
		}
		md, err := st.Header()
		if err != nil {
			return nil, false, err
		}
		first, snapLast, snap := snapshotHeader(md)
		var dec ProtoDecoder
		var prev uint64
		for prev < last {
			b, err := st.Recv()
			if status.Code(err) == codes.DataLoss {
				break
			}
			if err != nil {
				return nil, false, err
			}
			seq := b.GetSequenceNumber()
			switch {
			case prev == 0 && snap && seq != first:
				return nil, false, fmt.Errorf("first batch %d, the header said %d", seq, first)
			case prev != 0 && seq != prev+1:
				return nil, false, fmt.Errorf("batch %d after %d (snapshot %d..%d)", seq, prev, first, snapLast)
			}
			if res := applyProto(ix, &dec, b); res.UnknownParents > 0 && prev < snapLast {
				return nil, false, fmt.Errorf("snapshot batch %d: %d unknown parents", seq, res.UnknownParents)
			}
			prev = seq
		}
		if prev >= last {
			return ix, snap, nil
		}
	}
}

// TestBridgeSnapshotContinuity: subscribers join from 0 while batches are published
// concurrently, after the history rolled over. Each gets a snapshot and then the live stream
// with no gap and no duplicate, and its index ends exactly equal to one fed every event.
func TestBridgeSnapshotContinuity(t *testing.T) {
	bridge, err := NewBridgeServer(BridgeConfig{Runtime: worker.RuntimeVLLM, History: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := startGRPCServer(t, bridge.Register)
	ref := newTestIndex(t)
	gens := []*eventGen{newEventGen(7), newEventGen(8)}
	publishRandom(bridge, ref, gens, 500) // the history (64) rolled over long ago

	const subscribers, during = 6, 1500
	ctx, cancel := context.WithTimeout(context.Background(), grpcTestTimeout)
	defer cancel()
	last := uint64(500 + during)
	type result struct {
		ix   *indexer.Index
		snap bool
		err  error
	}
	results := make(chan result, subscribers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range subscribers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Join at different points of the live stream.
			if err := waitSeq(ctx, bridge, 500+uint64(i*during/subscribers)); err != nil {
				results <- result{err: err}
				return
			}
			ix, snap, err := followBridge(ctx, conn, last)
			results <- result{ix, snap, err}
		}()
	}
	close(start)
	publishRandom(bridge, ref, gens, during)
	wg.Wait()
	close(results)
	keys := map[uint64]bool{}
	for _, g := range gens {
		for k := range g.keys {
			keys[k] = true
		}
	}
	want := viewOf(ref, keys)
	for r := range results {
		if r.err != nil {
			t.Errorf("subscriber: %v", r.err)
			continue
		}
		if !r.snap {
			t.Errorf("subscriber: no snapshot header, want one (the history rolled over)")
		}
		if diff := cmp.Diff(want, viewOf(r.ix, keys)); diff != "" {
			t.Errorf("subscriber index differs from the reference (-want +got):\n%s", diff)
		}
	}
	if st := bridge.SnapshotStats(); st.Served < subscribers || st.Evicted != 0 {
		t.Errorf("stats %+v: want at least %d served, none evicted", st, subscribers)
	}
}

// TestGRPCSourceSnapshot: the client applies a snapshot opening a subscription without
// counting a gap, a duplicate or skipped batches; with a cursor outside the history it resets
// first; a stream cut inside its snapshot starts over from 0.
func TestGRPCSourceSnapshot(t *testing.T) {
	snapMD := func(first, last uint64) metadata.MD {
		return metadata.Pairs(MDSnapshotFirst, strconv.FormatUint(first, 10), MDSnapshotLast, strconv.FormatUint(last, 10))
	}
	counts := func(t *testing.T, src *GRPCSource) map[string]float64 {
		m := src.metrics
		return map[string]float64{
			"snapshots":  promtestutil.ToFloat64(m.snapshots.WithLabelValues("w0")),
			"gaps":       promtestutil.ToFloat64(m.gaps.WithLabelValues("w0")),
			"duplicates": promtestutil.ToFloat64(m.batches.WithLabelValues("w0", OutcomeDuplicate)),
			"skipped":    promtestutil.ToFloat64(m.skipped.WithLabelValues("w0")),
			"applied":    promtestutil.ToFloat64(m.batches.WithLabelValues("w0", OutcomeApplied)),
		}
	}
	t.Run("cursor outside the history", func(t *testing.T) {
		script, conn := newScript(t)
		rec := newGRPCRecorder()
		src, _ := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
		src.rules.setCursor(3)
		src.rules.lastApplied, src.rules.hasLastApplied = 3, true
		stop, _ := runSource(t, src)
		defer stop()
		c := script.next(t)
		if c.Cursor != 3 {
			t.Fatalf("cursor: got %d, want 3", c.Cursor)
		}
		if err := c.Stream.SendHeader(snapMD(40, 41)); err != nil {
			t.Fatal(err)
		}
		c.send(t, nil, 40, 41, 42)
		rec.expect(t, append([]grpcRec{{Reset: true, Rank: 0, Reason: ResetSnapshot}}, grpcSeqs(0, 40, 41, 42)...)...)
		want := map[string]float64{"snapshots": 1, "gaps": 0, "duplicates": 0, "skipped": 0, "applied": 3}
		if diff := cmp.Diff(want, counts(t, src)); diff != "" {
			t.Errorf("metrics (-want +got):\n%s", diff)
		}
	})
	t.Run("cut inside the snapshot", func(t *testing.T) {
		script, conn := newScript(t)
		rec := newGRPCRecorder()
		src, _ := newTestSource(t, conn, worker.RuntimeVLLM, rec, nil)
		stop, _ := runSource(t, src)
		defer stop()
		c := script.next(t)
		if err := c.Stream.SendHeader(snapMD(40, 42)); err != nil {
			t.Fatal(err)
		}
		c.send(t, nil, 40, 41)
		rec.expect(t, grpcSeqs(0, 40, 41)...)
		c.End <- status.Error(codes.Unavailable, "going away")
		rec.expect(t, grpcRec{Reset: true, Rank: 0, Reason: ResetSnapshotCut})
		c = script.next(t)
		if c.Cursor != 0 {
			t.Fatalf("after a cut snapshot: cursor %d, want 0 (41 is inside the snapshot, not the history)", c.Cursor)
		}
		if err := c.Stream.SendHeader(snapMD(50, 52)); err != nil {
			t.Fatal(err)
		}
		c.send(t, nil, 50, 51, 52, 53)
		rec.expect(t, grpcSeqs(0, 50, 51, 52, 53)...)
		c.End <- status.Error(codes.Unavailable, "going away")
		c = script.next(t)
		if c.Cursor != 53 {
			t.Fatalf("after a whole snapshot: cursor %d, want 53", c.Cursor)
		}
		want := map[string]float64{"snapshots": 2, "gaps": 0, "duplicates": 0, "skipped": 0, "applied": 6}
		if diff := cmp.Diff(want, counts(t, src)); diff != "" {
			t.Errorf("metrics (-want +got):\n%s", diff)
		}
	})
}

// TestGRPCSourceSnapshotForOldCursor: against a real bridge whose history rolled over, a client
// holding an old cursor gets the snapshot at once (it announces MDAcceptSnapshot) instead of
// OUT_OF_RANGE, and its consumer ends with exactly the bridge's state.
func TestGRPCSourceSnapshotForOldCursor(t *testing.T) {
	bridge, err := NewBridgeServer(BridgeConfig{Runtime: worker.RuntimeVLLM, History: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := startGRPCServer(t, bridge.Register)
	ref := newTestIndex(t)
	gens := []*eventGen{newEventGen(3)}
	publishRandom(bridge, ref, gens, 200)

	ix := newTestIndex(t)
	sink := &countingSink{Index: ix, applied: make(chan uint64, 1024)}
	src, _ := newTestSource(t, conn, worker.RuntimeVLLM, &sinkRecorder{SinkConsumer{Sink: sink, IDs: []indexer.WorkerID{0}}, sink}, nil)
	src.rules.setCursor(5) // from an earlier life, far older than the history (193..200)
	stop, _ := runSource(t, src)
	defer stop()
	timeout := time.After(grpcTestTimeout)
	for seq := uint64(0); seq < 200; {
		select {
		case seq = <-sink.applied:
		case <-timeout:
			t.Fatalf("timed out at seq %d, want 200", seq)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(viewOf(ref, gens[0].keys), viewOf(ix, gens[0].keys)); diff != "" {
		t.Errorf("client index differs from the reference (-want +got):\n%s", diff)
	}
	if got := promtestutil.ToFloat64(src.metrics.resets.WithLabelValues("w0", ResetOutOfRange)); got != 0 {
		t.Errorf("out_of_range resets: got %v, want 0 (a snapshot instead)", got)
	}
	if got := promtestutil.ToFloat64(src.metrics.snapshots.WithLabelValues("w0")); got != 1 {
		t.Errorf("snapshots: got %v, want 1", got)
	}
}

// countingSink is an indexer.Sink that reports each applied batch's seq.
type countingSink struct {
	*indexer.Index
	applied chan uint64
}

// sinkRecorder reports the seq of each batch the SinkConsumer applied.
type sinkRecorder struct {
	SinkConsumer
	s *countingSink
}

func (r *sinkRecorder) Batch(rank int, b *indexer.Batch) bool {
	resync := r.SinkConsumer.Batch(rank, b)
	r.s.applied <- b.Seq
	return resync
}

// waitSeq waits until s has published seq, or ctx ends.
func waitSeq(ctx context.Context, s *BridgeServer, seq uint64) error {
	for {
		s.mu.Lock()
		last, wake := s.nextSeq-1, s.wake
		s.mu.Unlock()
		if last >= seq {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
