package indexer

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func mustNew(t testing.TB, cfg Config) *Index {
	t.Helper()
	ix, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return ix
}

func TestNewRejectsNegativeMaxBlocks(t *testing.T) {
	if _, err := New(Config{MaxBlocks: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(MaxBlocks -1) error = %v, want ErrInvalidConfig", err)
	}
}

// TestParentCycleFixture replays the events of fixtures/kvevents/sim-array-parent-cycle.jsonl
// (decoded in its README): a prefix block re-stored with its own child as parent.
func TestParentCycleFixture(t *testing.T) {
	const b1, b2, q = 2067698922593990494, 16575152972265372868, 11424531917687781530
	p := seq(100, 32)
	batches := [][]Event{
		{{Kind: EventStored, Hashes: []uint64{b1, b2}, Tokens: p, BlockSize: 16, Medium: "GPU"}},
		{{Kind: EventRemoved, Hashes: []uint64{b1}, Medium: "GPU"},
			{Kind: EventStored, Hashes: []uint64{q}, Tokens: seq(500, 16), BlockSize: 16, Medium: "GPU"}},
		{{Kind: EventRemoved, Hashes: []uint64{q}, Medium: "GPU"},
			{Kind: EventStored, Hashes: []uint64{b1}, Parent: b2, HasParent: true, Tokens: p[:16], BlockSize: 16, Medium: "GPU"}},
	}
	want := []ApplyResult{{Stored: 2}, {Stored: 1, Removed: 1}, {Stored: 1, Removed: 1}}
	ix := mustNew(t, Config{})
	for i, b := range batches {
		if got := ix.Apply(3, b); got != want[i] {
			t.Errorf("batch %d: Apply = %+v, want %+v", i+1, got, want[i])
		}
	}
	keys := AppendBlockKeys(nil, p, 16, "")
	// b1 is missing at position 0, so nothing leads; b1 was placed after b2 (the reported
	// parent), never at a guessed position 0.
	if got := ix.Match(keys, nil); len(got) != 0 {
		t.Errorf("Match(P) = %v, want none", got)
	}
	if got, want := ix.WorkerBlocks(3), 2; got != want {
		t.Errorf("WorkerBlocks = %d, want %d", got, want)
	}
	// Removing b1 then b2 walks no parent links and empties the worker.
	ix.Apply(3, []Event{{Kind: EventRemoved, Hashes: []uint64{b1, b2}}})
	if got := ix.WorkerBlocks(3); got != 0 || ix.Len() != 0 {
		t.Errorf("after removals: WorkerBlocks = %d, Len = %d, want 0, 0", got, ix.Len())
	}
}

func TestApplyAndMatch(t *testing.T) {
	toks := seq(1, 64) // 4 blocks of 16
	keys := AppendBlockKeys(nil, toks, 16, "")
	nsKeys := AppendBlockKeys(nil, toks, 16, "lora:9")
	ix := mustNew(t, Config{})
	ix.Apply(0, []Event{{Kind: EventStored, Hashes: []uint64{10, 11, 12, 13}, Tokens: toks, BlockSize: 16}})
	ix.Apply(1, []Event{
		{Kind: EventStored, Hashes: []uint64{20, 21}, Tokens: toks[:32], BlockSize: 16},
		{Kind: EventStored, Hashes: []uint64{22}, Parent: 21, HasParent: true, Tokens: toks[32:48], BlockSize: 16},
	})
	ix.Apply(70, []Event{{Kind: EventStored, Hashes: []uint64{30, 31, 32, 33}, Tokens: toks, BlockSize: 16}})
	ix.Apply(2, []Event{{Kind: EventStored, Hashes: []uint64{40, 41}, Tokens: toks[:32], BlockSize: 16, LoraID: 9, HasLoraID: true}})
	ix.Apply(70, []Event{{Kind: EventRemoved, Hashes: []uint64{32}}}) // hole at block 2
	tests := []struct {
		name string
		keys []uint64
		want []WorkerMatch
	}{
		{"plain", keys, []WorkerMatch{{0, 4}, {1, 3}, {70, 2}}},
		{"prefix of request", keys[:2], []WorkerMatch{{0, 2}, {1, 2}, {70, 2}}},
		{"namespace", nsKeys, []WorkerMatch{{2, 2}}},
		{"miss", AppendBlockKeys(nil, toks, 16, "lora:8"), nil},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sortMatches(ix.Match(tt.keys, nil))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Match (-want +got):\n%s", diff)
			}
		})
	}
	learned := Lookup{Index: ix, BlockSize: 8} // the default differs from what events carry
	if got := learned.BlockSizeOf(LookupWorker{IDs: []WorkerID{1}}); got != 16 {
		t.Errorf("learned block size of worker 1 = %d, want 16", got)
	}
	if got := ix.WorkerBlocks(70); got != 3 {
		t.Errorf("WorkerBlocks(70) = %d, want 3", got)
	}
	ix.ResetWorker(0)
	ix.RemoveWorker(70)
	if got := sortMatches(ix.Match(keys, nil)); !cmp.Equal(got, []WorkerMatch{{1, 3}}) {
		t.Errorf("after reset/remove: Match = %v, want [{1 3}]", got)
	}
	if got := learned.BlockSizeOf(LookupWorker{IDs: []WorkerID{0}}); got != 16 {
		t.Errorf("ResetWorker forgot the block size: got %d, want 16", got)
	}
	if got := ix.Apply(MaxWorkers, []Event{{Kind: EventCleared}}); got.Skipped != 1 {
		t.Errorf("Apply(MaxWorkers) = %+v, want Skipped 1", got)
	}
}

// checkTable verifies the table's counters against a walk of its slots.
func checkTable(t *testing.T, ix *Index) {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	tb := &ix.c.t
	counts := map[int]int{}
	keys, members := 0, 0
	visit := func(s *slot) {
		keys++
		for w := range 64 {
			if s.lo&(1<<w) != 0 {
				counts[w]++
				members++
			}
		}
		switch {
		case s.ext&extInline != 0:
			counts[int(s.ext&^extInline)]++
			members++
		case s.ext != 0:
			for i, word := range tb.ext[s.ext] {
				for b := range 64 {
					if word&(1<<b) != 0 {
						counts[64+64*i+b]++
						members++
					}
				}
			}
		}
	}
	for i := range tb.slots {
		if tb.slots[i].key != 0 {
			visit(&tb.slots[i])
			if tb.find(tb.slots[i].key) != &tb.slots[i] {
				t.Fatalf("slot %d unreachable by find", i)
			}
		}
	}
	if tb.hasZero {
		visit(&tb.zero)
	}
	if keys != tb.len() || members != tb.members {
		t.Fatalf("table walk: %d keys %d members, counters say %d, %d", keys, members, tb.len(), tb.members)
	}
	for w, n := range tb.counts {
		if counts[w] != n {
			t.Fatalf("counts[%d] = %d, walk says %d", w, n, counts[w])
		}
	}
}

func TestEvictionKeepsRecentlyTouched(t *testing.T) {
	const maxBlocks = 256
	ix := mustNew(t, Config{MaxBlocks: maxBlocks})
	hot := seq(1_000_000, 64)
	hotKeys := AppendBlockKeys(nil, hot, 16, "")
	ix.Apply(1, []Event{{Kind: EventStored, Hashes: []uint64{1, 2, 3, 4}, Tokens: hot, BlockSize: 16}})
	var firstKeys []uint64
	for i := range 2000 {
		w := WorkerID(i % 70) // includes workers >= 64
		toks := seq(i*64, 64)
		if i == 0 {
			firstKeys = AppendBlockKeys(nil, toks, 16, "")
		}
		base := uint64(100 + 4*i)
		ix.Apply(w, []Event{{Kind: EventStored, Hashes: []uint64{base, base + 1, base + 2, base + 3}, Tokens: toks, BlockSize: 16}})
		if i%3 == 0 {
			// Evicted engine hashes may be removed later: must be harmless.
			ix.Apply(w, []Event{{Kind: EventRemoved, Hashes: []uint64{base - 40, base - 39}}})
		}
		if got := ix.Len(); got > maxBlocks {
			t.Fatalf("after store %d: Len = %d > MaxBlocks %d", i, got, maxBlocks)
		}
		if got := ix.Match(hotKeys, nil); !cmp.Equal(got, []WorkerMatch{{1, 4}}) {
			t.Fatalf("after store %d: hot chain Match = %v, want [{1 4}] (a touched chain was evicted)", i, got)
		}
	}
	if got := ix.Match(firstKeys, nil); len(got) != 0 {
		t.Errorf("oldest untouched chain still matched: %v", got)
	}
	checkTable(t, ix)
	// The engine maps were swept of evicted hashes, so they stay bounded.
	ix.mu.RLock()
	for w, ws := range ix.c.workers {
		if ws != nil && ws.engine.len() > ix.c.t.counts[w]+1024+8 {
			t.Errorf("worker %d: %d engine hashes for %d blocks", w, ws.engine.len(), ix.c.t.counts[w])
		}
	}
	ix.mu.RUnlock()
}

// TestEvictionAfterShrink: eviction's sweep hand survives the table shrinking under it. The
// event flood found it: worker resets emptied the table, its size after regrowing (by quarters
// from wherever the shrink stopped) was below the hand, and the sweep indexed out of range.
func TestEvictionAfterShrink(t *testing.T) {
	tb := newTable(0)
	for k := range uint64(4000) {
		tb.add(0, k+1)
	}
	tb.hand = tb.n - 1 // where a sweep of the large table left it
	for k := range uint64(3900) {
		tb.remove(0, k+1)
	}
	if tb.n > 1000 {
		t.Fatalf("table of %d slots after removing 3900 of 4000 keys, want it shrunk", tb.n)
	}
	tb.maxBlocks = 50
	for k := range uint64(100) {
		tb.add(0, 10_000+k)
		tb.evict()
	}
	if got := tb.len(); got > 50 {
		t.Errorf("Len %d > MaxBlocks 50", got)
	}
}

func TestTableDeleteKeepsProbeChains(t *testing.T) {
	ix := mustNew(t, Config{})
	rng := rand.New(rand.NewPCG(3, 4))
	live := map[uint64]bool{}
	var order []uint64
	for i := range 20000 {
		k := rng.Uint64() % 5000 // small keys collide in home slots; key 0 included
		ix.mu.Lock()
		if live[k] && i%2 == 0 {
			ix.c.t.remove(WorkerID(k%3), k)
			if !ix.c.t.contains(0, k) && !ix.c.t.contains(1, k) && !ix.c.t.contains(2, k) {
				delete(live, k)
			}
		} else {
			ix.c.t.add(WorkerID(k%3), k)
			live[k] = true
			order = append(order, k)
		}
		ix.mu.Unlock()
	}
	checkTable(t, ix)
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, k := range order {
		if got := ix.c.t.find(k) != nil; got != live[k] {
			t.Fatalf("find(%d) present = %v, want %v", k, got, live[k])
		}
	}
}

// TestConcurrentApplyAndMatch runs one writer per worker and several readers; run with -race.
// The final state must equal the sequential reference, since workers' streams are independent.
func TestConcurrentApplyAndMatch(t *testing.T) {
	sc := newScenario()
	ix := mustNew(t, Config{})
	const perWorker = 300
	streams := make([][][]Event, len(sc.workers))
	ref := newRef()
	for i, w := range sc.workers {
		src := randSource{rand.New(rand.NewPCG(uint64(i), 5))}
		for range perWorker {
			var known []uint64
			for e := range ref.engine[w] {
				known = append(known, e)
			}
			slices.Sort(known)
			evs := sc.genEvents(src, known)
			ref.apply(w, evs)
			streams[i] = append(streams[i], evs)
		}
	}
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for r := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			src := randSource{rand.New(rand.NewPCG(uint64(r), 6))}
			var dst []WorkerMatch
			for {
				select {
				case <-stop:
					return
				default:
				}
				keys := sc.genRequest(src)
				dst = ix.Match(keys, dst)
				for _, m := range dst {
					if m.Blocks < 1 || m.Blocks > len(keys) {
						t.Errorf("Match returned %+v for %d keys", m, len(keys))
					}
				}
				_ = ix.WorkerBlocks(sc.workers[src.intn(len(sc.workers))])
				_ = ix.Len()
			}
		}()
	}
	for i, w := range sc.workers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for _, evs := range streams[i] {
				ix.Apply(w, evs)
			}
		}()
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	src := randSource{rand.New(rand.NewPCG(9, 9))}
	for range 500 {
		keys := sc.genRequest(src)
		if diff := cmp.Diff(ref.match(keys), sortMatches(ix.Match(keys, nil))); diff != "" {
			t.Fatalf("final Match (-want +got):\n%s", diff)
		}
	}
	checkTable(t, ix)
}

func TestMatchAllocs(t *testing.T) {
	ix := mustNew(t, Config{})
	toks := seq(0, 4096)
	hs := make([]uint64, 256)
	for w := range WorkerID(64) {
		for i := range hs {
			hs[i] = uint64(w)<<32 | uint64(i)
		}
		ix.Apply(w, []Event{{Kind: EventStored, Hashes: hs[:1+int(w)*3], Tokens: toks[:16*(1+int(w)*3)], BlockSize: 16}})
	}
	keys := AppendBlockKeys(nil, toks, 16, "")
	dst := make([]WorkerMatch, 0, 64)
	if n := len(ix.Match(keys, dst)); n != 64 {
		t.Fatalf("Match found %d workers, want 64", n)
	}
	if a := testing.AllocsPerRun(100, func() { dst = ix.Match(keys, dst) }); a != 0 {
		t.Errorf("Match: %v allocs per call, want 0", a)
	}
}

// TestLongChainChunked checks that a chain longer than lockChunk, applied in chunks, gets the
// same keys as when it is placed in one piece.
func TestLongChainChunked(t *testing.T) {
	const n = 3*lockChunk + 7
	toks := seq(5, n*4)
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(1000 + i)
	}
	ix := mustNew(t, Config{})
	res := ix.Apply(9, []Event{{Kind: EventStored, Hashes: hs, Tokens: toks, BlockSize: 4, LoraName: "a"}})
	if res != (ApplyResult{Stored: n}) {
		t.Errorf("Apply = %+v, want Stored %d", res, n)
	}
	keys := AppendBlockKeys(nil, toks, 4, "a")
	if got := ix.Match(keys, nil); !cmp.Equal(got, []WorkerMatch{{9, n}}) {
		t.Errorf("Match = %v, want [{9 %d}]", got, n)
	}
	// A long chain after an unknown parent is not placed at all.
	res = ix.Apply(10, []Event{{Kind: EventStored, Hashes: hs, Parent: 1, HasParent: true, Tokens: toks, BlockSize: 4}})
	if res != (ApplyResult{UnknownParents: 1}) || ix.WorkerBlocks(10) != 0 {
		t.Errorf("unknown parent: Apply = %+v, WorkerBlocks = %d; want UnknownParents 1, 0 blocks", res, ix.WorkerBlocks(10))
	}
	// Removing a block in the middle leaves the leading part.
	ix.Apply(9, []Event{{Kind: EventRemoved, Hashes: hs[500:501]}})
	if got := ix.Match(keys, nil); !cmp.Equal(got, []WorkerMatch{{9, 500}}) {
		t.Errorf("after removal: Match = %v, want [{9 500}]", got)
	}
}
