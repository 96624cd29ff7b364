package policy

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// FuzzPick feeds every policy arbitrary requests and candidates (negative and extreme loads,
// matches beyond the request, any block count): Pick must return an index in range with a
// non-empty reason, and cache_aware's hit reasons must name a worker that matched.
func FuzzPick(f *testing.F) {
	f.Add(int64(10), uint64(1), []byte{0, 5, 0, 1, 3, 2, 9, 0, 1, 1})
	f.Add(int64(0), uint64(0), []byte{255, 255, 255, 255, 0, 0, 0, 0, 0, 0})
	f.Add(int64(-3), uint64(7), []byte{})
	pols := make(map[string]Policy)
	for _, n := range Names() {
		cfg := DefaultConfig()
		cfg.Rand = splitmix(1)
		pols[n] = mustNew(f, n, cfg)
	}
	f.Fuzz(func(t *testing.T, blocks int64, first uint64, data []byte) {
		var cands []Candidate
		for len(data) >= 10 {
			load := int64(binary.LittleEndian.Uint32(data)) - math.MaxInt32/2
			if data[8]&1 == 1 {
				load = int64(binary.LittleEndian.Uint64(data[:8]))
			}
			m := int(int8(data[4]))
			cands = append(cands, Candidate{Key: uint64(data[5]), Load: load, Matched: m, Source: indexer.Source(data[9] % 4)})
			data = data[10:]
		}
		if len(cands) == 0 {
			cands = []Candidate{{Load: int64(first)}}
		}
		req := &Request{Blocks: int(blocks % 100000), FirstBlock: first}
		for name, p := range pols {
			d := p.Pick(req, cands)
			if d.Index < 0 || d.Index >= len(cands) || d.Reason == "" {
				t.Fatalf("%s: got %+v for %d candidates", name, d, len(cands))
			}
			if name == NameCacheAware {
				switch d.Reason {
				case ReasonCacheHit, ReasonTreeHit, ReasonPendingHit:
					if cands[d.Index].Matched <= 0 {
						t.Fatalf("cache_aware: reason %q for a worker with match %d", d.Reason, cands[d.Index].Matched)
					}
				}
			}
		}
	})
}
