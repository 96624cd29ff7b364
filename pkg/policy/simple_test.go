package policy

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

func TestRoundRobinPick(t *testing.T) {
	cfg := Config{Rand: seqRand(5)} // start offset 5
	p := mustNew(t, NameRoundRobin, cfg)
	cands := make([]Candidate, 3)
	var got []int
	for range 7 {
		d := p.Pick(&Request{}, cands)
		if d.Reason != ReasonRoundRobin {
			t.Fatalf("got reason %q, want %q", d.Reason, ReasonRoundRobin)
		}
		got = append(got, d.Index)
	}
	want := []int{2, 0, 1, 2, 0, 1, 2} // 5%3, 6%3, ...
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("indices mismatch (-want +got):\n%s", diff)
	}
}

// TestRoundRobinConcurrent checks that concurrent pickers share one cycle: n×k picks over k
// candidates land exactly n times on each.
func TestRoundRobinConcurrent(t *testing.T) {
	p := mustNew(t, NameRoundRobin, Config{})
	cands := make([]Candidate, 4)
	const goroutines, per = 8, 1000
	counts := make([][]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		counts[g] = make([]int, len(cands))
		wg.Go(func() {
			for range per {
				counts[g][p.Pick(&Request{}, cands).Index]++
			}
		})
	}
	wg.Wait()
	total := make([]int, len(cands))
	for _, c := range counts {
		for i, v := range c {
			total[i] += v
		}
	}
	want := []int{2000, 2000, 2000, 2000}
	if diff := cmp.Diff(want, total); diff != "" {
		t.Errorf("per-candidate counts mismatch (-want +got):\n%s", diff)
	}
}

func TestSimplePolicies(t *testing.T) {
	three := []Candidate{cand(5, 9, indexer.SourceEvents), cand(2, 0, indexer.SourceNone), cand(2, 0, indexer.SourceNone)}
	tests := []struct {
		name   string
		policy string
		req    Request
		cands  []Candidate
		rand   []uint64
		want   Decision
	}{
		{name: "random first", policy: NameRandom, cands: three, rand: []uint64{nth(0, 3)}, want: Decision{0, ReasonRandom}},
		{name: "random last", policy: NameRandom, cands: three, rand: []uint64{nth(2, 3)}, want: Decision{2, ReasonRandom}},
		{name: "random max rand", policy: NameRandom, cands: three, rand: []uint64{^uint64(0)}, want: Decision{2, ReasonRandom}},
		{name: "least_load unique", policy: NameLeastLoad, cands: []Candidate{cand(5, 0, 0), cand(1, 0, 0), cand(3, 0, 0)}, want: Decision{1, ReasonLeastLoad}},
		{name: "least_load tie first", policy: NameLeastLoad, cands: three, rand: []uint64{nth(0, 2)}, want: Decision{1, ReasonLeastLoad}},
		{name: "least_load tie second", policy: NameLeastLoad, cands: three, rand: []uint64{nth(1, 2)}, want: Decision{2, ReasonLeastLoad}},
		{name: "least_load ignores cache", policy: NameLeastLoad, req: Request{Blocks: 9}, cands: []Candidate{cand(2, 9, indexer.SourceEvents), cand(1, 0, 0)}, want: Decision{1, ReasonLeastLoad}},
		// power_of_two: first draw i among 3, second j among the other 2.
		{name: "p2c keeps lower second", policy: NamePowerOfTwo, cands: three, rand: []uint64{nth(0, 3), nth(0, 2)}, want: Decision{1, ReasonPowerOfTwo}},
		{name: "p2c keeps lower first", policy: NamePowerOfTwo, cands: three, rand: []uint64{nth(2, 3), nth(0, 2)}, want: Decision{2, ReasonPowerOfTwo}},
		{name: "p2c tie keeps first", policy: NamePowerOfTwo, cands: three, rand: []uint64{nth(2, 3), nth(1, 2)}, want: Decision{2, ReasonPowerOfTwo}},
		{name: "p2c skips self", policy: NamePowerOfTwo, cands: three, rand: []uint64{nth(1, 3), nth(1, 2)}, want: Decision{1, ReasonPowerOfTwo}},
		{name: "p2c one candidate", policy: NamePowerOfTwo, cands: three[:1], want: Decision{0, ReasonPowerOfTwo}},
		{name: "prefix_hash no blocks is least load", policy: NamePrefixHash, cands: []Candidate{cand(5, 0, 0), cand(1, 0, 0)}, want: Decision{1, ReasonLeastLoad}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rand
			if r == nil {
				r = []uint64{0}
			}
			p := mustNew(t, tc.policy, Config{Rand: seqRand(r...)})
			got := p.Pick(&tc.req, tc.cands)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Pick() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPowerOfTwoProperties: the winner is never the most loaded of ≥2 distinct loads unless
// both draws were equally loaded, and over many picks every candidate except the unique
// maximum gets chosen.
func TestPowerOfTwoProperties(t *testing.T) {
	p := mustNew(t, NamePowerOfTwo, Config{Rand: splitmix(7)})
	cands := []Candidate{cand(9, 0, 0), cand(1, 0, 0), cand(4, 0, 0), cand(6, 0, 0)}
	counts := make([]int, len(cands))
	for range 6000 {
		counts[p.Pick(&Request{}, cands).Index]++
	}
	// P(pick) for load rank r (0 = lowest) among 4 is (3−r)/6: 1/2, 1/3, 1/6, 0.
	if counts[0] != 0 {
		t.Errorf("most loaded chosen %d times, want 0", counts[0])
	}
	want := map[int]int{1: 3000, 2: 2000, 3: 1000}
	for i, w := range want {
		if counts[i] < w*85/100 || counts[i] > w*115/100 {
			t.Errorf("candidate %d chosen %d times, want about %d (counts %v)", i, counts[i], w, counts)
		}
	}
}

func TestPrefixHash(t *testing.T) {
	p := mustNew(t, NamePrefixHash, Config{})
	cands := make([]Candidate, 5)
	for i := range cands {
		cands[i] = Candidate{Key: uint64(i + 1), Load: int64(i)}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	counts := make(map[uint64]int)
	const n = 20000
	for range n {
		first := rng.Uint64()
		d := p.Pick(&Request{Blocks: 3, FirstBlock: first}, cands)
		if d.Reason != ReasonPrefixHash {
			t.Fatalf("got reason %q, want %q", d.Reason, ReasonPrefixHash)
		}
		key := cands[d.Index].Key
		counts[key]++

		// Same prefix, same worker, whatever the candidate order.
		rev := []Candidate{cands[4], cands[3], cands[2], cands[1], cands[0]}
		if got := rev[p.Pick(&Request{Blocks: 3, FirstBlock: first}, rev).Index].Key; got != key {
			t.Fatalf("prefix %#x: reversed order picked key %d, want %d", first, got, key)
		}
		// Removing a different worker does not move the prefix; removing its worker moves it
		// to the one with the next highest weight only.
		var fewer []Candidate
		for _, c := range cands {
			if c.Key != key {
				fewer = append(fewer, c)
			}
		}
		other := fewer[0].Key
		var without []Candidate
		for _, c := range cands {
			if c.Key != other {
				without = append(without, c)
			}
		}
		if got := without[p.Pick(&Request{Blocks: 3, FirstBlock: first}, without).Index].Key; got != key {
			t.Fatalf("prefix %#x: removing worker %d moved it from %d to %d", first, other, key, got)
		}
	}
	for k := uint64(1); k <= 5; k++ {
		if c := counts[k]; c < n/5*85/100 || c > n/5*115/100 {
			t.Errorf("worker %d got %d prefixes, want about %d (counts %v)", k, c, n/5, counts)
		}
	}
}

// TestConcurrentPicks exercises every policy with the default random source from many
// goroutines, for the race detector.
func TestConcurrentPicks(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p := mustNew(t, name, DefaultConfig())
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					cands := []Candidate{cand(int64(g), 3, indexer.SourceEvents), cand(2, 1, indexer.SourceTree), cand(1, 0, indexer.SourceNone)}
					for i := range 500 {
						d := p.Pick(&Request{Blocks: 4, FirstBlock: uint64(i)}, cands)
						if d.Index < 0 || d.Index >= len(cands) {
							t.Errorf("got index %d, want in [0,3)", d.Index)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
