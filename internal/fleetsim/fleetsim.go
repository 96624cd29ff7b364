// Package fleetsim generates the KV-cache event streams of a synthetic fleet of engines, for
// the scale measurements of docs/scaling.md: the in-process benchmarks of pkg/indexer and
// tools/fleetpub, which publishes the same streams over ZMQ to a gateway process.
//
// The model is an H100-class engine in steady state: its cache is full (BlocksPerWorker
// blocks), and each batch stores one new chain of MinBatch..MaxBatch blocks and removes the
// oldest chains that no longer fit, so stored and removed blocks balance (about 750 of each
// per second per worker at the default rate). Every chain continues one of the worker's
// system-prompt prefixes (FamiliesPerWorker of Families shared fleet-wide, FamilyBlocks each,
// stored once and never removed) and is otherwise unique, so almost every (worker, block) is a
// distinct key, the index's worst case for memory.
//
// A Fleet is not safe for concurrent use; Next(w) for different w touches different state,
// but the shared token buffers are reused, so callers serialise all calls.
package fleetsim

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Config describes the fleet. Zero fields take the defaults of DefaultConfig.
type Config struct {
	Workers int
	// BlocksPerWorker is each engine's cache capacity in blocks (default 12500: 200k tokens
	// of 16, the simulator's H100 default).
	BlocksPerWorker int
	BlockSize       int // default 16
	// Families system prompts of FamilyBlocks blocks exist fleet-wide; each worker holds
	// FamiliesPerWorker of them (defaults 64, 16, 4).
	Families, FamilyBlocks, FamiliesPerWorker int
	// MinBatch and MaxBatch bound the blocks of one stored chain (defaults 16 and 64).
	MinBatch, MaxBatch int
	Seed               uint64
}

// DefaultConfig returns the defaults for n workers.
func DefaultConfig(n int) Config {
	return Config{Workers: n, BlocksPerWorker: 12500, BlockSize: 16, Families: 64, FamilyBlocks: 16, FamiliesPerWorker: 4,
		MinBatch: 16, MaxBatch: 64, Seed: 1}
}

// chain is one stored chain of a worker: engine hashes base..base+n-1.
type chain struct {
	base   uint64
	n      int
	family int
	seed   uint64 // content of its first block; the rest comes from the pool
}

type workerState struct {
	families []int
	chains   []chain // FIFO, oldest first
	head     int
	blocks   int // blocks held in chains (family prefixes not counted)
	next     uint64
}

// Fleet is the state of every worker's stream.
type Fleet struct {
	cfg     Config
	workers []workerState
	rng     *rand.Rand
	// famTokens[f] are family f's prefix tokens; pool is the content of every chain block
	// after the first (chain keys are distinct through their first block).
	famTokens [][]uint32
	pool      []uint32
	// Reused per call.
	hashes, removed []uint64
	tokens          []uint32
	events          [2]indexer.Event
	batch           indexer.Batch
}

// New returns a fleet for cfg.
func New(cfg Config) (*Fleet, error) {
	d := DefaultConfig(cfg.Workers)
	for _, f := range []struct {
		v   *int
		def int
	}{
		{&cfg.BlocksPerWorker, d.BlocksPerWorker}, {&cfg.BlockSize, d.BlockSize}, {&cfg.Families, d.Families},
		{&cfg.FamilyBlocks, d.FamilyBlocks}, {&cfg.FamiliesPerWorker, d.FamiliesPerWorker},
		{&cfg.MinBatch, d.MinBatch}, {&cfg.MaxBatch, d.MaxBatch},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if cfg.Workers < 1 || cfg.MinBatch < 1 || cfg.MaxBatch < cfg.MinBatch || cfg.BlocksPerWorker < cfg.MaxBatch || cfg.FamiliesPerWorker > cfg.Families {
		return nil, fmt.Errorf("fleetsim: bad config %+v", cfg)
	}
	f := &Fleet{cfg: cfg, workers: make([]workerState, cfg.Workers), rng: rand.New(rand.NewPCG(cfg.Seed, 0x666c656574))}
	for range cfg.Families {
		f.famTokens = append(f.famTokens, f.randomTokens(cfg.FamilyBlocks*cfg.BlockSize))
	}
	f.pool = f.randomTokens(cfg.MaxBatch * cfg.BlockSize)
	for w := range f.workers {
		ws := &f.workers[w]
		for k := range cfg.FamiliesPerWorker {
			ws.families = append(ws.families, (w*7+k*13)%cfg.Families)
		}
		ws.next = uint64(w+1) << 40
	}
	return f, nil
}

func (f *Fleet) randomTokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(1000 + f.rng.IntN(150000))
	}
	return out
}

// Config returns the fleet's configuration with defaults filled in.
func (f *Fleet) Config() Config { return f.cfg }

// familyHash is the engine hash of block i of family fam on any worker (engines hash content,
// so a shared prefix has the same hashes everywhere).
func familyHash(fam, i int) uint64 { return uint64(fam+1)<<32 | uint64(i+1) }

// Fill returns worker w's batches that bring it to capacity: its family prefixes, then chains
// (Prefixes, then Next until Full). Each batch is valid until the next call on the Fleet.
func (f *Fleet) Fill(w int, emit func(*indexer.Batch)) {
	f.Prefixes(w, emit)
	for !f.Full(w) {
		emit(f.Next(w))
	}
}

// Full reports whether worker w's cache is full: its next chain makes it remove one.
func (f *Fleet) Full(w int) bool { return f.workers[w].blocks+f.cfg.MaxBatch > f.cfg.BlocksPerWorker }

// Prefixes returns worker w's family-prefix batches, the first it publishes.
func (f *Fleet) Prefixes(w int, emit func(*indexer.Batch)) {
	ws := &f.workers[w]
	for _, fam := range ws.families {
		f.hashes = f.hashes[:0]
		for i := range f.cfg.FamilyBlocks {
			f.hashes = append(f.hashes, familyHash(fam, i))
		}
		f.events[0] = indexer.Event{Kind: indexer.EventStored, Hashes: f.hashes, Tokens: f.famTokens[fam], BlockSize: f.cfg.BlockSize, Medium: indexer.MediumGPU}
		f.batch = indexer.Batch{Events: f.events[:1]}
		emit(&f.batch)
	}
}

// Next returns worker w's next steady-state batch: one new chain stored, and the oldest chains
// removed while the worker holds more than its capacity. It is valid until the next call.
func (f *Fleet) Next(w int) *indexer.Batch {
	ws := &f.workers[w]
	n := f.cfg.MinBatch + f.rng.IntN(f.cfg.MaxBatch-f.cfg.MinBatch+1)
	c := chain{base: ws.next, n: n, family: ws.families[f.rng.IntN(len(ws.families))], seed: f.rng.Uint64()}
	ws.next += uint64(n)
	f.hashes = f.hashes[:0]
	for i := range n {
		f.hashes = append(f.hashes, c.base+uint64(i))
	}
	f.tokens = f.chainTokens(f.tokens[:0], c)
	f.events[0] = indexer.Event{Kind: indexer.EventStored, Hashes: f.hashes, Parent: familyHash(c.family, f.cfg.FamilyBlocks-1), HasParent: true,
		Tokens: f.tokens, BlockSize: f.cfg.BlockSize, Medium: indexer.MediumGPU}
	ws.chains = append(ws.chains, c)
	ws.blocks += n
	f.removed = f.removed[:0]
	for ws.blocks > f.cfg.BlocksPerWorker {
		old := ws.chains[ws.head]
		ws.head++
		ws.blocks -= old.n
		for i := range old.n {
			f.removed = append(f.removed, old.base+uint64(i))
		}
	}
	if ws.head > len(ws.chains)/2 { // compact the FIFO now and then
		ws.chains = append(ws.chains[:0], ws.chains[ws.head:]...)
		ws.head = 0
	}
	f.batch = indexer.Batch{Events: f.events[:1]}
	if len(f.removed) > 0 {
		f.events[1] = indexer.Event{Kind: indexer.EventRemoved, Hashes: f.removed, Medium: indexer.MediumGPU}
		f.batch.Events = f.events[:2]
	}
	return &f.batch
}

// chainTokens appends c's tokens: its first block from its seed, the rest from the pool.
func (f *Fleet) chainTokens(dst []uint32, c chain) []uint32 {
	r := rand.New(rand.NewPCG(c.seed, 1))
	for range f.cfg.BlockSize {
		dst = append(dst, uint32(1000+r.IntN(150000)))
	}
	return append(dst, f.pool[:(c.n-1)*f.cfg.BlockSize]...)
}

// Request appends to dst the tokens of an n-token prompt that one worker (chosen with rng)
// holds a prefix of: one of its family prefixes, one of its live chains, then fresh tokens. It
// returns the prompt and the blocks the worker holds of it.
func (f *Fleet) Request(dst []uint32, rng *rand.Rand, n int) ([]uint32, int) {
	ws := &f.workers[rng.IntN(len(f.workers))]
	live := ws.chains[ws.head:]
	c := live[rng.IntN(len(live))]
	dst = append(dst, f.famTokens[c.family]...)
	dst = f.chainTokens(dst, c)
	held := f.cfg.FamilyBlocks + c.n
	for len(dst) < n {
		dst = append(dst, uint32(1000+rng.IntN(150000)))
	}
	if len(dst) > n {
		dst = dst[:n]
		held = min(held, n/f.cfg.BlockSize)
	}
	return dst, held
}

// BlockEvents returns the stored plus removed blocks of b.
func BlockEvents(b *indexer.Batch) int {
	n := 0
	for i := range b.Events {
		n += len(b.Events[i].Hashes)
	}
	return n
}
