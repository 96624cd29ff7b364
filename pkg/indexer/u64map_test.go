package indexer

import (
	"math/rand/v2"
	"testing"
)

// TestU64MapMatchesGoMap drives u64map and a Go map through random puts and deletes over a
// key range that makes the table grow and shrink, with key 0 and colliding homes included.
func TestU64MapMatchesGoMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	m := newU64map()
	ref := map[uint64]uint64{}
	for step := range 400000 {
		// Phases: grow to ~20000 keys, then delete nearly all (shrinking), then grow again.
		growing := step/100000%2 == 0
		k := rng.Uint64N(30000)
		if step%7 == 0 {
			k <<= 40 // sparse high keys
		}
		switch {
		case growing && rng.IntN(10) < 7:
			v := rng.Uint64()
			old, had := m.put(k, v)
			if rold, rhad := ref[k]; had != rhad || old != rold {
				t.Fatalf("step %d: put(%d) = %d, %v; want %d, %v", step, k, old, had, rold, rhad)
			}
			ref[k] = v
		default:
			old, had := m.del(k)
			if rold, rhad := ref[k]; had != rhad || old != rold {
				t.Fatalf("step %d: del(%d) = %d, %v; want %d, %v", step, k, old, had, rold, rhad)
			}
			delete(ref, k)
		}
		if step%100000 == 99999 {
			t.Logf("step %d: %d keys in %d slots", step, m.len(), len(m.slots))
		}
		if m.len() != len(ref) {
			t.Fatalf("step %d: len = %d, want %d", step, m.len(), len(ref))
		}
	}
	n := 0
	m.each(func(k, v uint64) {
		n++
		if ref[k] != v {
			t.Errorf("each: %d → %d, want %d", k, v, ref[k])
		}
	})
	if n != len(ref) {
		t.Errorf("each visited %d keys, want %d", n, len(ref))
	}
	for k, v := range ref {
		if got, ok := m.get(k); !ok || got != v {
			t.Errorf("get(%d) = %d, %v; want %d, true", k, got, ok, v)
		}
	}
	m.deleteIf(func(k, _ uint64) bool { return k%2 == 0 })
	for k := range ref {
		if _, ok := m.get(k); ok != (k%2 == 1) {
			t.Errorf("after deleteIf(even): get(%d) present = %v", k, ok)
		}
	}
	m.reset()
	if m.len() != 0 {
		t.Errorf("after reset: len = %d, want 0", m.len())
	}
}
