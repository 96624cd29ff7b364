package indexer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTableMatchMatchesReference checks table.match against a direct count (for each holder of
// the first key, the keys it holds with no hole) on random fleets shaped like large ones: many
// workers, mostly past 64, hold prefixes of a few shared chains and stop matching at different
// keys, with holes, removals (which turn a key's bitset back into an inline worker) and
// re-adds, so that the still-matching set shrinks in every order.
func TestTableMatchMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	for round := range 120 {
		fleet := []int{1, 3, 64, 65, 70, 130, 300, 700}[round%8]
		chainLen := 1 + rng.IntN(48)
		t.Run(fmt.Sprintf("round=%d/workers=%d", round, fleet), func(t *testing.T) {
			checkTableMatch(t, rng, fleet, chainLen)
		})
	}
}

func checkTableMatch(t *testing.T, rng *rand.Rand, fleet, chainLen int) {
	tb := newTable(0)
	holds := map[uint64]map[WorkerID]bool{}
	add := func(w WorkerID, k uint64) {
		tb.add(w, k)
		if holds[k] == nil {
			holds[k] = map[WorkerID]bool{}
		}
		holds[k][w] = true
	}
	remove := func(w WorkerID, k uint64) {
		if got, want := tb.remove(w, k), holds[k][w]; got != want {
			t.Fatalf("remove(%d, %#x) = %v, want %v", w, k, got, want)
		}
		delete(holds[k], w)
	}
	// Sparse worker IDs: a fleet's IDs need not be dense, and the bitsets then have gaps.
	ids := make([]WorkerID, fleet)
	for i := range ids {
		ids[i] = WorkerID(i)
		if fleet > 64 && rng.IntN(3) == 0 {
			ids[i] = WorkerID(64 + rng.IntN(4*fleet))
		}
	}
	chains := make([][]uint64, 1+rng.IntN(6))
	for c := range chains {
		chains[c] = make([]uint64, chainLen)
		for j := range chains[c] {
			chains[c][j] = rng.Uint64() | 1
		}
	}
	// Each chain's share of holders: a system prompt's is large, a user's chain has a few
	// holders, down to one (a key held by one worker >= 64 keeps it inline).
	share := make([]float64, len(chains))
	for c := range share {
		share[c] = []float64{0.01, 0.05, 0.3, 0.75}[rng.IntN(4)]
	}
	for _, w := range ids {
		for c, ch := range chains {
			if rng.Float64() >= share[c] {
				continue
			}
			n := rng.IntN(len(ch) + 1)
			for j, k := range ch[:n] {
				if j > 0 && rng.IntN(20) == 0 {
					continue // a hole
				}
				add(w, k)
			}
			if rng.IntN(8) == 0 { // a block past a hole
				add(w, ch[rng.IntN(len(ch))])
			}
		}
	}
	check := func(what string) {
		t.Helper()
		dst := make([]WorkerMatch, rng.IntN(4), 8) // stale entries that match must drop
		for c, ch := range chains {
			keys := ch[:1+rng.IntN(len(ch))]
			if rng.IntN(4) == 0 { // a request that diverges from the chain
				keys = append(keys[:len(keys):len(keys)], rng.Uint64()|1)
			}
			var want []WorkerMatch
			for w := range holds[keys[0]] {
				n := 0
				for n < len(keys) && holds[keys[n]][w] {
					n++
				}
				want = append(want, WorkerMatch{w, n})
			}
			dst = tb.match(keys, dst)
			if diff := cmp.Diff(sortMatches(want), sortMatches(append([]WorkerMatch(nil), dst...))); diff != "" {
				t.Fatalf("%s: chain %d, %d keys: match differs (-want +got):\n%s", what, c, len(keys), diff)
			}
		}
	}
	check("filled")
	for step := range 6 {
		// Remove a random share of the memberships, then put some back.
		for _, w := range ids {
			for _, ch := range chains {
				for _, k := range ch {
					if holds[k][w] && rng.IntN(6) == 0 {
						remove(w, k)
					}
				}
			}
		}
		check(fmt.Sprintf("removals %d", step))
		for range fleet {
			ch := chains[rng.IntN(len(chains))]
			add(ids[rng.IntN(len(ids))], ch[rng.IntN(len(ch))])
		}
		check(fmt.Sprintf("re-adds %d", step))
	}
}
