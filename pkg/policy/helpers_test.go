package policy

import (
	"math"
	"sync/atomic"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// seqRand returns the given values in order, then repeats the last one. It is not safe for
// concurrent use; tests that pick concurrently use splitmix.
func seqRand(vals ...uint64) func() uint64 {
	i := 0
	return func() uint64 {
		v := vals[min(i, len(vals)-1)]
		i++
		return v
	}
}

// nth is the rand value that randIntn maps to k out of n.
func nth(k, n int) uint64 {
	if n <= 1 {
		return 0
	}
	step := math.MaxUint64 / uint64(n)
	return uint64(k)*step + step/2
}

// splitmix is a deterministic, concurrency-safe source for tests.
func splitmix(seed uint64) func() uint64 {
	var s atomic.Uint64
	s.Store(seed)
	return func() uint64 { return mix64(s.Add(0x9e3779b97f4a7c15)) }
}

// cand builds a candidate tersely: load, matched, source.
func cand(load int64, matched int, src indexer.Source) Candidate {
	return Candidate{Key: uint64(load)<<32 | uint64(matched), Load: load, Matched: matched, Source: src}
}

func mustNew(t interface {
	Helper()
	Fatalf(string, ...any)
}, name string, cfg Config) Policy {
	t.Helper()
	p, err := New(name, cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return p
}
