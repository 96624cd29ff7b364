package indexer

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time this process has used. The benchmarks report blocks per
// CPU-second next to blocks per wall-second because the machine they run on is shared: wall
// time then includes time the benchmark was not running.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportRate(b *testing.B, blocks int, cpu0 time.Duration) {
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(blocks)/cpu.Seconds(), "blocks/cpu-s")
	}
}

// fleet describes a synthetic fleet for the benchmarks: chains of chainBlocks blocks of 16
// tokens, grouped into families sharing their first prefixBlocks blocks (a system prompt),
// each chain cached on 1 to 3 of the workers.
type fleet struct {
	families, chains, prefixBlocks, chainBlocks, workers int
}

const benchBlock = 16

// chainTokens writes chain c's tokens into buf.
func (f fleet) chainTokens(c int, buf []uint32) []uint32 {
	buf = buf[:0]
	fr := rand.New(rand.NewPCG(uint64(c%f.families), 1))
	for range f.prefixBlocks * benchBlock {
		buf = append(buf, uint32(fr.IntN(150000)))
	}
	cr := rand.New(rand.NewPCG(uint64(c), 2))
	for range (f.chainBlocks - f.prefixBlocks) * benchBlock {
		buf = append(buf, uint32(cr.IntN(150000)))
	}
	return buf
}

// build stores every chain on its workers, one 256-block event each (engine hashes derived
// from the keys, as a consistent engine would), and returns the chains' keys when keep is set.
func (f fleet) build(ix *Index, keep bool) [][]uint64 {
	var all [][]uint64
	toks := make([]uint32, 0, f.chainBlocks*benchBlock)
	keys := make([]uint64, 0, f.chainBlocks)
	hs := make([]uint64, f.chainBlocks)
	ev := []Event{{Kind: EventStored, BlockSize: benchBlock, Medium: "GPU"}}
	for c := range f.chains {
		toks = f.chainTokens(c, toks)
		keys = AppendBlockKeys(keys[:0], toks, benchBlock, "")
		for i, k := range keys {
			hs[i] = k ^ 0xabcdef
		}
		ev[0].Hashes, ev[0].Tokens = hs, toks
		for r := range 1 + c%3 {
			ix.Apply(WorkerID((c*7+r*13)%f.workers), ev)
		}
		if keep {
			all = append(all, append([]uint64(nil), keys...))
		}
	}
	return all
}

var matchFixture struct {
	once sync.Once
	ix   *Index
	reqs [][]uint64
}

// benchFleet holds ≥1M distinct blocks (1.03M tails plus family prefixes) across 64 workers,
// about 2.1M (worker, block) memberships.
var benchFleet = fleet{families: 512, chains: 4600, prefixBlocks: 32, chainBlocks: 256, workers: 64}

func matchSetup(b *testing.B) (*Index, [][]uint64) {
	matchFixture.once.Do(func() {
		ix, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		chains := benchFleet.build(ix, true)
		// Zipf-like draws over the chains; a quarter of the requests leave their chain at a
		// random block (a new user turn), so the match ends early for those.
		rng := rand.New(rand.NewPCG(42, 42))
		z := rand.NewZipf(rng, 1.1, 1, uint64(len(chains)-1))
		reqs := make([][]uint64, 8192)
		for i := range reqs {
			c := chains[z.Uint64()]
			r := append([]uint64(nil), c...)
			if rng.IntN(4) == 0 {
				for j := 1 + rng.IntN(len(r)-1); j < len(r); j++ {
					r[j] = rng.Uint64()
				}
			}
			reqs[i] = r
		}
		matchFixture.ix, matchFixture.reqs = ix, reqs
	})
	return matchFixture.ix, matchFixture.reqs
}

// BenchmarkMatch: lookups of 4096-token (256-block) requests drawn Zipf-like from an index of
// ≥1M blocks across 64 workers. blocks/s counts request blocks examined (looked up).
func BenchmarkMatch(b *testing.B) {
	ix, reqs := matchSetup(b)
	dst := make([]WorkerMatch, 0, 64)
	examined := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		keys := reqs[i%len(reqs)]
		dst = ix.Match(keys, dst)
		best := 0
		for _, m := range dst {
			best = max(best, m.Blocks)
		}
		examined += min(best+1, len(keys))
	}
	reportRate(b, examined, cpu0)
}

var applyFixture struct {
	once   sync.Once
	ix     *Index
	firsts [][]uint32 // the first block of each chain, from a ring longer than applySlots
	toks   []uint32   // a chain's tokens: its first block, then a tail every chain shares
	next   int
	stored []uint64 // per slot: engine hash base of the chain stored there, 0 when empty
}

const (
	applyChainBlocks = 16
	applySlots       = 32768 // chains outstanding: the index holds 512K distinct keys
	applyFirstBlocks = 2 * applySlots
)

// BenchmarkApply: one Stored event of a 16-block chain and one Removed event of an older
// 16-block chain per iteration, spread over 64 workers, on an index of 32768 chains = 512K
// blocks, every one a distinct key (a chain's first block is unique among the live chains, so
// its whole key chain is). blocks/s counts stored plus removed blocks.
func BenchmarkApply(b *testing.B) {
	f := &applyFixture
	f.once.Do(func() {
		ix, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		f.ix = ix
		f.stored = make([]uint64, applySlots)
		r := rand.New(rand.NewPCG(3, 3))
		for range applyFirstBlocks {
			t := make([]uint32, benchBlock)
			for i := range t {
				t[i] = uint32(r.IntN(150000))
			}
			f.firsts = append(f.firsts, t)
		}
		f.toks = make([]uint32, applyChainBlocks*benchBlock)
		for i := range f.toks {
			f.toks[i] = uint32(r.IntN(150000))
		}
	})
	hs := make([]uint64, applyChainBlocks)
	rm := make([]uint64, applyChainBlocks)
	stored := []Event{{Kind: EventStored, BlockSize: benchBlock, Medium: "GPU", Hashes: hs, Tokens: f.toks}}
	removed := []Event{{Kind: EventRemoved, Medium: "GPU", Hashes: rm}}
	step := func() int {
		n := f.next
		f.next++
		slot := n % applySlots
		w := WorkerID(slot % 64)
		blocks := 0
		if base := f.stored[slot]; base != 0 {
			for i := range rm {
				rm[i] = base + uint64(i)
			}
			blocks += f.ix.Apply(w, removed).Removed
		}
		base := uint64(n+1) << 8
		for i := range hs {
			hs[i] = base + uint64(i)
		}
		copy(f.toks, f.firsts[n%applyFirstBlocks])
		f.stored[slot] = base
		return blocks + f.ix.Apply(w, stored).Stored
	}
	for f.next < applySlots { // fill once: later runs continue in the steady state
		step()
	}
	if got := f.ix.Len(); got != applySlots*applyChainBlocks {
		b.Fatalf("index holds %d keys, want %d distinct", got, applySlots*applyChainBlocks)
	}
	blocks := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		blocks += step()
	}
	reportRate(b, blocks, cpu0)
}

// BenchmarkMemory builds an index of 1M (worker, block) memberships in chains of 64 blocks
// over 64 workers and reports the live heap growth per membership (bytes/block), engine-hash
// maps included, which is what docs/operations.md quotes: distinct, every chain on one worker
// (1M distinct keys, the worst case); shared, every chain on 4 workers (256K keys).
// keys/block is the distinct keys per membership.
func BenchmarkMemory(b *testing.B) {
	for _, c := range []struct {
		name    string
		holders int
	}{{"distinct", 1}, {"shared", 4}} {
		b.Run(c.name, func(b *testing.B) {
			const members, chainBlocks, workers = 1 << 20, 64, 64
			chains := members / chainBlocks / c.holders
			var perBlock, keysPer float64
			toks := make([]uint32, chainBlocks*benchBlock)
			hs := make([]uint64, chainBlocks)
			var keys []uint64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				ix, err := New(Config{})
				if err != nil {
					b.Fatal(err)
				}
				for ch := range chains {
					r := rand.New(rand.NewPCG(uint64(ch), 5))
					for j := range toks {
						toks[j] = uint32(r.IntN(150000))
					}
					keys = AppendBlockKeys(keys[:0], toks, benchBlock, "")
					for j, k := range keys {
						hs[j] = k ^ 0xabcdef
					}
					ev := []Event{{Kind: EventStored, BlockSize: benchBlock, Medium: "GPU", Hashes: hs, Tokens: toks}}
					for h := range c.holders {
						ix.Apply(WorkerID((ch+h*17)%workers), ev)
					}
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				m := ix.Memberships()
				perBlock = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(m)
				keysPer = float64(ix.Len()) / float64(m)
				runtime.KeepAlive(ix)
				b.StartTimer()
			}
			b.ReportMetric(perBlock, "bytes/block")
			b.ReportMetric(keysPer, "keys/block")
		})
	}
}
