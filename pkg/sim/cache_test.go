package sim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// chainOf returns the digests of n blocks whose tokens start at base.
func chainOf(t *testing.T, base uint32, n, bs int) []BlockHash {
	t.Helper()
	toks := make([]uint32, n*bs)
	for i := range toks {
		toks[i] = base + uint32(i)
	}
	var h hasher
	return h.appendChain(nil, rootHash(""), toks, bs, nil)
}

// store acquires fresh blocks for chain, commits them and releases them, as a finished
// request does.
func store(t *testing.T, c *cache, chain []BlockHash) []int32 {
	t.Helper()
	ids, ok := c.Acquire(nil, nil, len(chain))
	if !ok {
		t.Fatalf("acquire %d blocks: got !ok, want ok (free %d)", len(chain), c.NumFree())
	}
	for i, id := range ids {
		if !c.Commit(id, chain[i]) {
			t.Fatalf("commit block %d: got false, want true", i)
		}
	}
	return ids
}

func TestCacheHits(t *testing.T) {
	c, err := newCache(8, 4)
	if err != nil {
		t.Fatal(err)
	}
	a := chainOf(t, 100, 3, 4)
	ids := store(t, c, a)
	c.Release(ids)
	tests := []struct {
		name  string
		query []BlockHash
		want  int
	}{
		{"whole chain", a, 3},
		{"prefix", a[:2], 2},
		{"longer than cached", append(append([]BlockHash{}, a...), chainOf(t, 900, 1, 4)...), 3},
		{"other chain", chainOf(t, 500, 3, 4), 0},
		{"same tokens, different position", chainOf(t, 104, 2, 4), 0},
		{"empty", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Match(tc.query); got != tc.want {
				t.Errorf("Match: got %d, want %d", got, tc.want)
			}
		})
	}
	if got, want := c.NumCached(), 3; got != want {
		t.Errorf("NumCached: got %d, want %d", got, want)
	}
	if got, want := c.NumUsed(), 0; got != want {
		t.Errorf("NumUsed after release: got %d, want %d", got, want)
	}
	// A hit re-references the same physical blocks.
	got, ok := c.Acquire(nil, a[:2], 1)
	if !ok {
		t.Fatal("Acquire with hits: got !ok")
	}
	if diff := cmp.Diff(ids[:2], got[:2]); diff != "" {
		t.Errorf("hit blocks (-want +got):\n%s", diff)
	}
	if c.NumUsed() != 3 {
		t.Errorf("NumUsed: got %d, want 3", c.NumUsed())
	}
}

func TestCacheEvictionOrderTailFirst(t *testing.T) {
	c, err := newCache(6, 4)
	if err != nil {
		t.Fatal(err)
	}
	old := chainOf(t, 100, 3, 4)
	young := chainOf(t, 500, 3, 4)
	c.Release(store(t, c, old))
	c.Release(store(t, c, young))
	// Everything is cached and unreferenced; allocations evict oldest request first, and
	// within a request the tail before the head.
	var evicted []BlockHash
	for range 6 {
		if _, ok := c.Allocate(nil, 1); !ok {
			t.Fatal("Allocate: got !ok")
		}
		evicted = c.TakeEvicted(evicted)
	}
	want := []BlockHash{old[2], old[1], old[0], young[2], young[1], young[0]}
	if diff := cmp.Diff(want, evicted); diff != "" {
		t.Errorf("eviction order (-want +got):\n%s", diff)
	}
	if c.NumCached() != 0 {
		t.Errorf("NumCached: got %d, want 0", c.NumCached())
	}
}

func TestCacheHitRefreshesRecency(t *testing.T) {
	c, err := newCache(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	a := chainOf(t, 100, 2, 4)
	b := chainOf(t, 500, 2, 4)
	c.Release(store(t, c, a))
	c.Release(store(t, c, b))
	// Re-use a: it becomes most recently used.
	ids, ok := c.Acquire(nil, a, 0)
	if !ok {
		t.Fatal("Acquire: !ok")
	}
	c.Release(ids)
	if _, ok := c.Allocate(nil, 2); !ok {
		t.Fatal("Allocate: !ok")
	}
	got := c.TakeEvicted(nil)
	if diff := cmp.Diff([]BlockHash{b[1], b[0]}, got); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
	if got := c.Match(a); got != 2 {
		t.Errorf("Match(a): got %d, want 2", got)
	}
}

func TestCacheRefcounts(t *testing.T) {
	c, err := newCache(5, 4)
	if err != nil {
		t.Fatal(err)
	}
	shared := chainOf(t, 100, 2, 4)
	r1 := store(t, c, shared) // r1 keeps its references
	r2, ok := c.Acquire(nil, shared, 1)
	if !ok {
		t.Fatal("Acquire shared: !ok")
	}
	if got, want := c.NumUsed(), 3; got != want {
		t.Errorf("NumUsed: got %d, want %d", got, want)
	}
	c.Release(r1)
	if got, want := c.NumUsed(), 3; got != want {
		t.Errorf("NumUsed after one release: got %d, want %d (r2 still holds the prefix)", got, want)
	}
	// Only 2 blocks are free: an allocation of 3 must fail without side effects, and referenced
	// blocks are never evicted.
	if _, ok := c.Allocate(nil, 3); ok {
		t.Fatal("Allocate(3) with 2 free: got ok, want !ok")
	}
	if _, ok := c.Allocate(nil, 2); !ok {
		t.Fatal("Allocate(2): got !ok")
	}
	if got := c.TakeEvicted(nil); len(got) != 0 {
		t.Errorf("evicted referenced blocks: %d", len(got))
	}
	if got := c.Match(shared); got != 2 {
		t.Errorf("Match(shared): got %d, want 2", got)
	}
	c.Release(r2)
	if got, want := c.NumUsed(), 2; got != want {
		t.Errorf("NumUsed: got %d, want %d", got, want)
	}
	// Acquire counts unreferenced cached hits against the free budget.
	if _, ok := c.Acquire(nil, shared, 2); ok {
		t.Error("Acquire(2 hits + 2 fresh) with 3 free: got ok, want !ok")
	}
	if got := c.Match(shared); got != 2 {
		t.Errorf("failed Acquire changed the cache: Match got %d, want 2", got)
	}
}

func TestCacheDuplicateCommitAndReset(t *testing.T) {
	c, err := newCache(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	a := chainOf(t, 100, 1, 4)
	x, _ := c.Allocate(nil, 1)
	y, _ := c.Allocate(nil, 1)
	if !c.Commit(x[0], a[0]) {
		t.Fatal("first commit: got false")
	}
	if c.Commit(y[0], a[0]) {
		t.Error("duplicate commit: got true, want false")
	}
	if c.Reset() {
		t.Error("Reset while blocks are used: got true, want false")
	}
	c.Release(x)
	c.Release(y)
	if !c.Reset() {
		t.Fatal("Reset when idle: got false")
	}
	if c.NumCached() != 0 || c.NumFree() != 4 {
		t.Errorf("after reset: cached %d free %d, want 0 and 4", c.NumCached(), c.NumFree())
	}
}

func TestBlockHashFold(t *testing.T) {
	var h BlockHash
	for i := range h {
		h[i] = byte(i)
	}
	if got, want := h.Fold(), uint64(0x18191a1b1c1d1e1f); got != want {
		t.Errorf("Fold: got %#x, want %#x", got, want)
	}
}
