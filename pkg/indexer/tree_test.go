package indexer

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is an injected clock that tests advance by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// refTree is the reference model of Tree: per worker, the last insert time of every
// block-aligned token prefix.
type refTree struct {
	bs   int
	ttl  int64
	last map[WorkerID]map[string]int64
}

func prefixKey(tokens []uint32) string {
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return string(b)
}

func (r *refTree) insert(w WorkerID, tokens []uint32, now int64) {
	if r.last[w] == nil {
		r.last[w] = map[string]int64{}
	}
	for k := 1; k*r.bs <= len(tokens); k++ {
		key := prefixKey(tokens[:k*r.bs])
		r.last[w][key] = max(r.last[w][key], now)
	}
}

func (r *refTree) match(tokens []uint32, now int64) []WorkerMatch {
	var out []WorkerMatch
	for w, m := range r.last {
		k := 0
		for (k+1)*r.bs <= len(tokens) {
			t, ok := m[prefixKey(tokens[:(k+1)*r.bs])]
			if !ok || t < now-r.ttl {
				break
			}
			k++
		}
		if k > 0 {
			out = append(out, WorkerMatch{w, k})
		}
	}
	return sortMatches(out)
}

func TestNewTreeValidates(t *testing.T) {
	if _, err := NewTree(TreeConfig{BlockSize: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewTree(BlockSize -1) error = %v, want ErrInvalidConfig", err)
	}
	tr, err := NewTree(TreeConfig{})
	if err != nil || tr.BlockSize() != 16 {
		t.Errorf("NewTree(zero config) = block size %v, %v; want 16, nil", tr.BlockSize(), err)
	}
}

func TestTreeMatchesReference(t *testing.T) {
	for _, bs := range []int{1, 2, 4} {
		t.Run("", func(t *testing.T) {
			const ttl = 100 * time.Second
			clk := &fakeClock{}
			clk.ns.Store(1e12)
			tr, err := NewTree(TreeConfig{BlockSize: bs, MaxBlocksPerWorker: 1 << 30, TTL: ttl, Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			ref := &refTree{bs: bs, ttl: int64(ttl), last: map[WorkerID]map[string]int64{}}
			sc := newScenario()
			rng := rand.New(rand.NewPCG(uint64(bs), 11))
			draw := func() []uint32 {
				d := slices.Clone(sc.docs[rng.IntN(len(sc.docs))])
				n := rng.IntN(len(d) + 1)
				if n > 0 && rng.IntN(3) == 0 {
					d[rng.IntN(n)] ^= 1
				}
				return d[:n]
			}
			var dst []WorkerMatch
			for step := range 4000 {
				w := sc.workers[rng.IntN(len(sc.workers))]
				switch op := rng.IntN(50); {
				case op == 0:
					tr.RemoveWorker(w)
					delete(ref.last, w)
				case op == 1:
					tr.Prune()
				case op < 10:
					clk.advance(time.Duration(rng.IntN(int(ttl / 4))))
				default:
					toks := draw()
					tr.Insert(w, toks)
					ref.insert(w, toks, clk.ns.Load())
				}
				for range 3 {
					toks := draw()
					dst = tr.Match(toks, dst)
					if diff := cmp.Diff(ref.match(toks, clk.ns.Load()), sortMatches(slices.Clone(dst))); diff != "" {
						t.Fatalf("step %d: Match(%d tokens) (-want +got):\n%s", step, len(toks), diff)
					}
				}
			}
			for _, w := range sc.workers {
				tr.RemoveWorker(w)
			}
			if n := len(tr.root.children); n != 0 {
				t.Errorf("after removing every worker the root still has %d children", n)
			}
		})
	}
}

func TestTreeBudgetEvictsLeastRecentlyInserted(t *testing.T) {
	clk := &fakeClock{}
	tr, err := NewTree(TreeConfig{BlockSize: 4, MaxBlocksPerWorker: 32, TTL: time.Hour, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	shared := seq(1, 8)                                                                         // 2 shared blocks
	doc := func(i int) []uint32 { return append(slices.Clone(shared), seq(1000*(i+1), 16)...) } // 6 blocks
	for i := range 40 {
		clk.advance(time.Second)
		tr.Insert(7, doc(i))
		tr.Insert(8, doc(i%2)) // worker 8 stays small: never evicted
		if got := tr.WorkerBlocks(7); got > 32 {
			t.Fatalf("insert %d: WorkerBlocks = %d > budget 32", i, got)
		}
		if got := tr.Match(doc(i), nil); !slices.Contains(got, WorkerMatch{7, 6}) {
			t.Fatalf("insert %d: newest doc Match = %v, want worker 7 with 6 blocks", i, got)
		}
	}
	// Only the shared prefix of an old doc is still held: it was touched by every insert.
	if got := sortMatches(tr.Match(doc(3), nil)); !cmp.Equal(got, []WorkerMatch{{7, 2}, {8, 2}}) {
		t.Errorf("old doc Match = %v, want [{7 2} {8 2}]", got)
	}
	if got := tr.WorkerBlocks(8); got != 10 {
		t.Errorf("WorkerBlocks(8) = %d, want 10", got)
	}
}

func TestTreeTTLAndPrune(t *testing.T) {
	clk := &fakeClock{}
	tr, err := NewTree(TreeConfig{BlockSize: 2, TTL: time.Minute, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	tr.Insert(1, seq(0, 9)) // 4 blocks, the 9th token is a partial block
	tr.Insert(2, seq(0, 4))
	clk.advance(30 * time.Second)
	tr.Insert(2, seq(0, 2)) // refresh worker 2's first block only
	if got := sortMatches(tr.Match(seq(0, 9), nil)); !cmp.Equal(got, []WorkerMatch{{1, 4}, {2, 2}}) {
		t.Errorf("before TTL: Match = %v, want [{1 4} {2 2}]", got)
	}
	clk.advance(45 * time.Second) // worker 1's and worker 2's second block expire
	if got := tr.Match(seq(0, 9), nil); !cmp.Equal(got, []WorkerMatch{{2, 1}}) {
		t.Errorf("after TTL: Match = %v, want [{2 1}]", got)
	}
	tr.Prune()
	if got := tr.WorkerBlocks(1) + tr.WorkerBlocks(2); got != 1 {
		t.Errorf("after Prune: %d blocks held, want 1", got)
	}
	clk.advance(time.Hour)
	tr.Prune()
	if n := len(tr.root.children); n != 0 {
		t.Errorf("after everything expired: root has %d children", n)
	}
}

func TestTreeConcurrent(t *testing.T) {
	tr, err := NewTree(TreeConfig{BlockSize: 4, MaxBlocksPerWorker: 64})
	if err != nil {
		t.Fatal(err)
	}
	sc := newScenario()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			var dst []WorkerMatch
			for range 2000 {
				d := sc.docs[rng.IntN(len(sc.docs))]
				d = d[:rng.IntN(len(d)+1)]
				switch rng.IntN(10) {
				case 0:
					tr.RemoveWorker(WorkerID(rng.IntN(4)))
				case 1, 2, 3:
					tr.Insert(WorkerID(rng.IntN(4)), d)
				default:
					dst = tr.Match(d, dst)
					for _, m := range dst {
						if m.Blocks < 1 || m.Blocks > len(d)/4 {
							t.Errorf("Match returned %+v for %d tokens", m, len(d))
						}
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestTreeMatchAllocs(t *testing.T) {
	tr, err := NewTree(TreeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	toks := seq(0, 4096)
	for w := range WorkerID(8) {
		tr.Insert(w, toks[:512*(w+1)])
	}
	dst := make([]WorkerMatch, 0, 64)
	if a := testing.AllocsPerRun(50, func() { dst = tr.Match(toks, dst) }); a != 0 {
		t.Errorf("Tree.Match: %v allocs per call, want 0", a)
	}
}
