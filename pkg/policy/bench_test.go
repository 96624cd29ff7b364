package policy

import (
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// BenchmarkPick measures every policy's Pick on 3 workers (the reference fleet) and 16.
func BenchmarkPick(b *testing.B) {
	for _, name := range Names() {
		for _, n := range []int{3, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, n), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Rand = splitmix(1)
				p := mustNew(b, name, cfg)
				cands := make([]Candidate, n)
				for i := range cands {
					cands[i] = Candidate{Key: uint64(i) * 7919, Load: int64(i % 4), Matched: (i * 13) % 62, Source: indexer.SourceEvents}
				}
				req := &Request{Blocks: 62, FirstBlock: 0xdeadbeef, Tokens: 1000}
				b.ReportAllocs()
				for b.Loop() {
					req.FirstBlock++
					p.Pick(req, cands)
				}
			})
		}
	}
}

// BenchmarkPickParallel shows contention on shared state (round_robin's counter, the cost
// scratch pool, the default random source).
func BenchmarkPickParallel(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			p := mustNew(b, name, DefaultConfig())
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				cands := []Candidate{{Key: 1, Load: 3, Matched: 10}, {Key: 2, Load: 1, Matched: 40, Source: indexer.SourceEvents}, {Key: 3, Load: 2}}
				req := &Request{Blocks: 62, FirstBlock: 1}
				for pb.Next() {
					req.FirstBlock++
					p.Pick(req, cands)
				}
			})
		})
	}
}
