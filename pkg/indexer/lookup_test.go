package indexer

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// storeChain applies one stored chain of tokens at block size bs to worker w, starting at
// block 0, with engine hashes derived from the keys.
func storeChain(t *testing.T, ix *Index, w WorkerID, tokens []uint32, bs int) {
	t.Helper()
	keys := AppendBlockKeys(nil, tokens, bs, "")
	hs := make([]uint64, len(keys))
	for i, k := range keys {
		hs[i] = k ^ uint64(w)<<40
	}
	res := ix.Apply(w, []Event{{Kind: EventStored, Hashes: hs, Tokens: tokens[:len(keys)*bs], BlockSize: bs, Medium: "GPU"}})
	if res.Stored != len(keys) {
		t.Fatalf("stored %d of %d blocks", res.Stored, len(keys))
	}
}

type lookupEnv struct {
	l    Lookup
	toks []uint32 // a 160-token request: 10 blocks of 16
}

func newLookupEnv(t *testing.T) *lookupEnv {
	t.Helper()
	ix, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	tree, err := NewTree(TreeConfig{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	pend, err := NewPending(PendingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &lookupEnv{l: Lookup{Index: ix, Tree: tree, Pending: pend, BlockSize: 16}, toks: seq(1000, 160)}
}

func TestLookupScore(t *testing.T) {
	e := newLookupEnv(t)
	ix, toks := e.l.Index, e.toks
	storeChain(t, ix, 0, toks[:64], 16)  // worker A: 4 blocks from events
	storeChain(t, ix, 2, toks[:96], 16)  // worker B rank 1: 6 blocks (rank 0 holds 2)
	storeChain(t, ix, 1, toks[:32], 16)  // worker B rank 0
	storeChain(t, ix, 3, toks[:128], 32) // worker C: 4 blocks of 32 = 8 default blocks
	e.l.Pending.Add(4, AppendBlockKeys(nil, toks, 16, "")[:5])
	storeChain(t, ix, 4, toks[:48], 16) // worker D: 3 from events, 5 pending
	e.l.Tree.Insert(5, toks[:112])      // worker E (no events): 7 from the tree
	e.l.Tree.Insert(0, toks)            // the tree also saw A, which is event-fed: ignored
	ws := []LookupWorker{
		{IDs: []WorkerID{0}, EventFed: true},
		{IDs: []WorkerID{1, 2}, EventFed: true},
		{IDs: []WorkerID{3}, EventFed: true, BlockSize: 64}, // events say 32: that wins
		{IDs: []WorkerID{4}, EventFed: true},
		{IDs: []WorkerID{5}},
		{IDs: []WorkerID{6}, EventFed: true}, // holds nothing
	}
	var s LookupScratch
	got := e.l.Score(&s, toks, "", ws, nil, false)
	want := []Score{
		{Events: 4, Tree: 10, BlockSize: 16, Matched: 4, Source: SourceEvents}, // raw tree answer shown, not used
		{Events: 6, BlockSize: 16, Matched: 6, Source: SourceEvents},
		{Events: 4, BlockSize: 32, Matched: 8, Source: SourceEvents},
		{Events: 3, Pending: 5, BlockSize: 16, Matched: 5, Source: SourcePending},
		{Tree: 7, BlockSize: 16, Matched: 7, Source: SourceTree},
		{BlockSize: 16},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Score (-want +got):\n%s", d)
	}
	if k := s.Keys(32); len(k) != 5 {
		t.Errorf("keys at 32: got %d, want 5", len(k))
	}

	// Explaining also asks the tree when every worker is event-fed, without changing scores.
	if got := e.l.Score(&s, toks, "", ws[:1], nil, false); got[0].Tree != 0 {
		t.Errorf("tree asked with only event-fed workers: %+v", got[0])
	}
	got = e.l.Score(&s, toks, "", ws[:1], got, true)
	if want := (Score{Events: 4, Tree: 10, BlockSize: 16, Matched: 4, Source: SourceEvents}); got[0] != want {
		t.Errorf("explained A: got %+v, want %+v", got[0], want)
	}

	// With events off every worker is scored from the tree; a namespaced request never is.
	off := e.l
	off.EventsOff = true
	if got := off.Score(&s, toks, "", ws[:1], nil, false); got[0].Source != SourceTree || got[0].Matched != 10 {
		t.Errorf("events off: got %+v, want 10 from the tree", got[0])
	}
	if got := e.l.Score(&s, toks, "lora-a", ws[4:5], nil, false); got[0].Matched != 0 {
		t.Errorf("namespaced request scored from the tree: %+v", got[0])
	}
}

func TestLookupBlockSizeOf(t *testing.T) {
	e := newLookupEnv(t)
	if got := e.l.BlockSizeOf(LookupWorker{IDs: []WorkerID{9}}); got != 16 {
		t.Errorf("default: got %d, want 16", got)
	}
	if got := e.l.BlockSizeOf(LookupWorker{IDs: []WorkerID{9}, BlockSize: 64}); got != 64 {
		t.Errorf("spec: got %d, want 64", got)
	}
	storeChain(t, e.l.Index, 10, e.toks[:64], 32)
	if got := e.l.BlockSizeOf(LookupWorker{IDs: []WorkerID{9, 10}, BlockSize: 64}); got != 32 {
		t.Errorf("learned from rank 1's events: got %d, want 32", got)
	}
}

func TestLookupScoreAllocs(t *testing.T) {
	e := newLookupEnv(t)
	storeChain(t, e.l.Index, 0, e.toks, 16)
	ws := []LookupWorker{{IDs: []WorkerID{0}, EventFed: true}, {IDs: []WorkerID{1}}, {IDs: []WorkerID{2, 3}, EventFed: true, BlockSize: 32}}
	var s LookupScratch
	out := e.l.Score(&s, e.toks, "", ws, nil, false)
	if n := testing.AllocsPerRun(100, func() { out = e.l.Score(&s, e.toks, "", ws, out, false) }); n != 0 {
		t.Errorf("Score: %v allocations per request, want 0", n)
	}
}

// TestLookupScoreScratchReuse: the matches of one request, scattered by worker in the scratch,
// leave nothing behind for the next request scored with it.
func TestLookupScoreScratchReuse(t *testing.T) {
	e := newLookupEnv(t)
	storeChain(t, e.l.Index, 70, e.toks, 16)
	e.l.Pending.Add(3, AppendBlockKeys(nil, e.toks, 16, "")[:2])
	e.l.Tree.Insert(5, e.toks)
	ws := []LookupWorker{{IDs: []WorkerID{70}, EventFed: true}, {IDs: []WorkerID{3}, EventFed: true}, {IDs: []WorkerID{5}}}
	var s LookupScratch
	got := e.l.Score(&s, e.toks, "", ws, nil, false)
	want := []Score{
		{Events: 10, BlockSize: 16, Matched: 10, Source: SourceEvents},
		{Pending: 2, BlockSize: 16, Matched: 2, Source: SourcePending},
		{Tree: 10, BlockSize: 16, Matched: 10, Source: SourceTree},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("first request (-want +got):\n%s", d)
	}
	got = e.l.Score(&s, seq(5000, 160), "", ws, got, true)
	want = []Score{{BlockSize: 16}, {BlockSize: 16}, {BlockSize: 16}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("unrelated request with the same scratch (-want +got):\n%s", d)
	}
}

// TestLookupRecordForgetRemove: Record puts an event-fed worker's keys in the pending overlay
// and another worker's tokens in the tree (never an adapter request's); Forget and Remove take
// a worker out of all three structures over its DP ranks, Forget keeping its learned block
// size.
func TestLookupRecordForgetRemove(t *testing.T) {
	e := newLookupEnv(t)
	toks, keys := e.toks, AppendBlockKeys(nil, e.toks, 16, "")
	fed := LookupWorker{IDs: []WorkerID{0, 1}, EventFed: true}
	tree := LookupWorker{IDs: []WorkerID{2}}
	adapter := LookupWorker{IDs: []WorkerID{3}}
	e.l.Record(fed, keys, toks, "")
	e.l.Record(tree, keys, toks, "")
	e.l.Record(adapter, keys, toks, "lora-a")
	e.l.Record(tree, keys, nil, "") // no tokens: nothing
	if got := e.l.Pending.Match(keys, nil); len(got) != 1 || got[0].Worker != 0 || got[0].Blocks != 10 {
		t.Errorf("pending after Record: got %+v, want worker 0 with 10 blocks", got)
	}
	if got := e.l.Tree.Match(toks, nil); len(got) != 1 || got[0].Worker != 2 || got[0].Blocks != 10 {
		t.Errorf("tree after Record: got %+v, want worker 2 with 10 blocks (not the event-fed or the adapter worker)", got)
	}
	events := Lookup{Index: e.l.Index, Tree: e.l.Tree, Pending: e.l.Pending, BlockSize: 16, EventsOff: true}
	events.Record(fed, keys, toks, "") // --kv-index off: every worker is tree-scored
	if got := e.l.Tree.Match(toks, nil); len(got) != 2 {
		t.Errorf("tree after Record with events off: got %+v, want workers 0 and 2", got)
	}

	storeChain(t, e.l.Index, 1, toks[:64], 32) // rank 1 of the fed worker learns block size 32
	e.l.Forget(fed)
	if n := e.l.Index.WorkerBlocks(1); n != 0 {
		t.Errorf("index blocks after Forget: got %d, want 0", n)
	}
	if got := e.l.Pending.Match(keys, nil); len(got) != 0 {
		t.Errorf("pending after Forget: got %+v, want none", got)
	}
	if got := e.l.BlockSizeOf(fed); got != 32 {
		t.Errorf("block size after Forget: got %d, want 32 (the worker stays known)", got)
	}
	storeChain(t, e.l.Index, 2, toks[:32], 16)
	e.l.Remove(tree)
	if n := e.l.Index.WorkerBlocks(2); n != 0 {
		t.Errorf("index blocks after Remove: got %d, want 0", n)
	}
	for _, m := range e.l.Tree.Match(toks, nil) {
		if m.Worker == 2 {
			t.Errorf("tree after Remove: worker 2 still matches %d blocks", m.Blocks)
		}
	}
}

// TestLookupHolders: scored beside one candidate, the Probes of a fleet make Holders list every
// worker that holds any of the request, whatever its block size or structure; without a probe
// for a block size or for the tree, the workers only it finds are missed.
func TestLookupHolders(t *testing.T) {
	e := newLookupEnv(t)
	ix, toks := e.l.Index, e.toks
	storeChain(t, ix, 0, toks[:64], 16)
	storeChain(t, ix, 2, toks[:96], 16) // worker B, rank 1
	storeChain(t, ix, 3, toks[:128], 32)
	e.l.Pending.Add(4, AppendBlockKeys(nil, toks, 16, "")[:5]) // worker D: pending only
	e.l.Tree.Insert(5, toks[:112])
	e.l.Tree.Insert(0, toks) // A again, in the tree
	fleet := []LookupWorker{
		{IDs: []WorkerID{0}, EventFed: true},
		{IDs: []WorkerID{1, 2}, EventFed: true},
		{IDs: []WorkerID{3}, EventFed: true, BlockSize: 64}, // events say 32
		{IDs: []WorkerID{4}, EventFed: true},
		{IDs: []WorkerID{5}},
		{IDs: []WorkerID{6}, EventFed: true}, // holds nothing
		{IDs: []WorkerID{7}, EventFed: true, BlockSize: 32},
	}
	probes := e.l.Probes(fleet, nil)
	if want := []LookupWorker{{BlockSize: 16, EventFed: true}, {BlockSize: 32, EventFed: true}, {}}; !slices.EqualFunc(probes, want, func(a, b LookupWorker) bool {
		return a.BlockSize == b.BlockSize && a.EventFed == b.EventFed && len(a.IDs) == 0
	}) {
		t.Fatalf("probes: got %+v, want %+v", probes, want)
	}
	var s LookupScratch
	holders := func(ws ...LookupWorker) []WorkerID {
		got := e.l.Score(&s, toks, "", ws, nil, false)
		for i, w := range ws[1:] {
			if len(w.IDs) == 0 && got[i+1].Matched != 0 {
				t.Errorf("probe %+v scored %+v", w, got[i+1])
			}
		}
		return s.Holders(nil)
	}
	worker6 := fleet[5]
	tests := []struct {
		name string
		ws   []LookupWorker
		want []WorkerID
	}{
		{"all probes", append([]LookupWorker{worker6}, probes...), []WorkerID{0, 2, 3, 4, 5}},
		{"no probes: 16 from events and pending", []LookupWorker{worker6}, []WorkerID{0, 2, 4}},
		{"no tree probe", append([]LookupWorker{worker6}, probes[:2]...), []WorkerID{0, 2, 3, 4}},
		{"no 32 probe", append([]LookupWorker{worker6}, probes[0], probes[2]), []WorkerID{0, 2, 4, 5}},
	}
	for _, tt := range tests {
		if got := holders(tt.ws...); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
	if got := s.Holders([]WorkerID{99}); !slices.Equal(got, []WorkerID{99, 0, 2, 4, 5}) {
		t.Errorf("appended: got %v", got)
	}
	if got := e.l.Score(&s, seq(5000, 64), "", []LookupWorker{worker6}, nil, false); got[0].Matched != 0 || len(s.Holders(nil)) != 0 {
		t.Errorf("a prompt nobody holds: holders %v", s.Holders(nil))
	}
}
