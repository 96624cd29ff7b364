package indexer

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// MaxWorkers bounds WorkerIDs: an Index ignores (and counts as Skipped) events of a worker
// with an ID at or above it, since per-worker state is a dense slice indexed by WorkerID.
// Worker sets are bitsets that grow past 64 workers, so any fleet up to MaxWorkers works;
// workers 0..63 take the fastest path.
const MaxWorkers = 1 << 16

// MediumGPU is the only storage tier the index tracks; events for other tiers (CPU offload,
// disk) are skipped because a block on a slower tier does not save prefill the same way and
// the engines report it as a separate copy.
const MediumGPU = "GPU"

// Config configures an Index. The zero value is valid: unbounded, no eviction.
type Config struct {
	// MaxBlocks bounds the number of distinct block keys held (a key shared by several workers
	// counts once). When an Apply exceeds it, about MaxBlocks/16 least-recently-touched keys
	// are dropped for every worker holding them. 0 means unbounded.
	MaxBlocks int `yaml:"max_blocks" json:"max_blocks"`
}

// WorkerMatch is one worker's answer to a lookup: Blocks leading request blocks (at least 1)
// that the worker holds with no hole.
type WorkerMatch struct {
	Worker WorkerID
	Blocks int
}

// workerState is what the index knows about one worker's event stream.
type workerState struct {
	// engine maps the worker's engine block hashes to the block keys they were placed at:
	// removals and parent lookups arrive as engine hashes.
	engine u64map
}

// core is the exact positional prefix index without locking (STYLE rule 10): block keys →
// worker sets in table, per-worker engine-hash maps in workers. Single goroutine only.
type core struct {
	t       table
	workers []*workerState // indexed by WorkerID; nil when unknown
	// blockSizes[w] is the block size of worker w's latest stored event (0 before any, or for
	// an unknown worker), dense so that a lookup reading every candidate's block size does not
	// chase a pointer per worker.
	blockSizes []int32
	keys       []uint64 // scratch for a stored chain's keys
	// sink consumes prefetch results so that the compiler keeps the loads.
	sink uint64
	ns   nsCache
}

// nsCache memoises the namespace of the last LoRA id seen so that events do not allocate.
type nsCache struct {
	id    int64
	valid bool
	s     string
}

func (c *nsCache) namespace(ev *Event) string {
	if ev.LoraName != "" || !ev.HasLoraID {
		return ev.LoraName
	}
	if !c.valid || c.id != ev.LoraID {
		c.id, c.valid, c.s = ev.LoraID, true, Namespace("", ev.LoraID, true, "")
	}
	return c.s
}

func newCore(maxBlocks int) core {
	return core{t: newTable(maxBlocks)}
}

func (c *core) worker(w WorkerID) *workerState {
	if int(w) >= len(c.workers) {
		n := max(int(w)+1, 2*len(c.workers))
		nw := make([]*workerState, n)
		copy(nw, c.workers)
		c.workers = nw
		c.blockSizes = slices.Grow(c.blockSizes, n-len(c.blockSizes))[:n]
	}
	ws := c.workers[w]
	if ws == nil {
		ws = &workerState{engine: newU64map()}
		c.workers[w] = ws
	}
	return ws
}

// applyEvent applies one event of worker w, adding its outcome to res.
func (c *core) applyEvent(w WorkerID, ev *Event, res *ApplyResult) {
	if w >= MaxWorkers {
		res.Skipped++
		return
	}
	switch ev.Kind {
	case EventStored:
		c.stored(w, ev, res)
	case EventRemoved:
		if ev.Medium != "" && ev.Medium != MediumGPU {
			res.Skipped++
			return
		}
		ws := c.worker(w)
		// Two passes with prefetches so that each pass's cache misses overlap.
		c.sink += ws.engine.prefetch(ev.Hashes)
		c.keys = c.keys[:0]
		for _, e := range ev.Hashes {
			if k, ok := ws.engine.del(e); ok {
				c.keys = append(c.keys, k)
			}
		}
		c.sink += c.t.prefetch(c.keys)
		for _, k := range c.keys {
			if c.t.remove(w, k) {
				res.Removed++
			}
		}
		c.maybeSweep(w, ws)
	case EventCleared:
		res.Removed += c.dropBlocks(w)
	default:
		res.Skipped++
	}
}

func (c *core) stored(w WorkerID, ev *Event, res *ApplyResult) {
	n, bs := len(ev.Hashes), ev.BlockSize
	if (ev.Medium != "" && ev.Medium != MediumGPU) || n == 0 || bs < 1 || len(ev.Tokens) != n*bs || len(ev.Extra) != 0 && len(ev.Extra) != n {
		res.Skipped++
		return
	}
	ws := c.worker(w)
	var parent uint64
	if ev.HasParent {
		p, ok := ws.engine.get(ev.Parent)
		if !ok {
			// Events were lost upstream: never guess the chain's position.
			res.UnknownParents++
			return
		}
		parent = p
	}
	c.blockSizes[w] = int32(bs)
	c.keys = appendChainKeysExtra(c.keys[:0], ev.Tokens, bs, parent, ev.HasParent, c.ns.namespace(ev), ev.Extra)
	c.sink += ws.engine.prefetch(ev.Hashes) + c.t.prefetch(c.keys)
	for i, e := range ev.Hashes {
		k := c.keys[i]
		if old, ok := ws.engine.put(e, k); ok && old != k {
			// The engine re-stored a block it already had elsewhere (e.g. the simulator's
			// parent-cycle anomaly): the engine holds one block per hash, so it moves.
			c.t.remove(w, old)
		}
		c.t.add(w, k)
	}
	res.Stored += n
	c.t.evict()
	c.maybeSweep(w, ws)
}

// maybeSweep drops engine-map entries whose key eviction took from w, once they are many;
// until then they are harmless (a removal finds nothing to remove).
func (c *core) maybeSweep(w WorkerID, ws *workerState) {
	if int(w) >= len(c.t.evicted) || c.t.evicted[w] < 1024 || c.t.evicted[w] < c.t.counts[w] {
		return
	}
	ws.engine.deleteIf(func(_, k uint64) bool { return !c.t.contains(w, k) })
	c.t.evicted[w] = 0
}

// dropBlocks removes every block of worker w and forgets its engine hashes; it returns the
// number of memberships removed.
func (c *core) dropBlocks(w WorkerID) int {
	if int(w) >= len(c.workers) || c.workers[w] == nil {
		return 0
	}
	ws := c.workers[w]
	n := 0
	ws.engine.each(func(_, k uint64) {
		if c.t.remove(w, k) {
			n++
		}
	})
	ws.engine.reset()
	if int(w) < len(c.t.evicted) {
		c.t.evicted[w] = 0
	}
	return n
}

func (c *core) removeWorker(w WorkerID) {
	c.dropBlocks(w)
	if int(w) < len(c.workers) {
		c.workers[w] = nil
		c.blockSizes[w] = 0
	}
}

func (c *core) workerBlocks(w WorkerID) int {
	if int(w) >= len(c.t.counts) {
		return 0
	}
	return c.t.counts[w]
}

func (c *core) workerBlockSize(w WorkerID) int {
	if int(w) >= len(c.blockSizes) {
		return 0
	}
	return int(c.blockSizes[w])
}

// Index is the exact positional prefix index of DESIGN.md §4, fed by KV-cache events through
// Apply and read through Match. It is safe for concurrent use: many Match calls, and Apply calls
// for different workers, may run at once (one goroutine per worker stream, as Sink requires).
// Index must not be copied.
type Index struct {
	// mu guards c. Match, WorkerBlocks, Len and Lookup hold it shared; Apply holds it
	// exclusively for one event (or lockChunk blocks of a long one) at a time, not a whole
	// batch, so readers wait at most that long.
	mu sync.RWMutex
	c  core
}

// ErrInvalidConfig is wrapped by constructors when a configuration value is out of range.
var ErrInvalidConfig = errors.New("invalid config")

// New returns an empty Index configured by cfg. It starts no goroutines.
func New(cfg Config) (*Index, error) {
	if cfg.MaxBlocks < 0 {
		return nil, fmt.Errorf("indexer: new: max_blocks %d < 0: %w", cfg.MaxBlocks, ErrInvalidConfig)
	}
	return &Index{c: newCore(cfg.MaxBlocks)}, nil
}

// Apply applies worker w's events in order (Sink). Stored chains are placed at their position:
// from block 0 (namespaced by the event's LoRA fields) without a parent, or after the parent's
// key when the parent is known for w; an unknown parent is counted in UnknownParents and the
// chain is not placed. Events of a non-GPU Medium, malformed stored events (token count not
// BlockSize × hashes) and events of a worker ≥ MaxWorkers are counted in Skipped. Removals of
// unknown hashes are ignored. Stored counts the blocks of placed chains, Removed the
// memberships actually removed. A block hash the worker already had at another key moves.
func (ix *Index) Apply(w WorkerID, events []Event) ApplyResult {
	var res ApplyResult
	for i := range events {
		ev := &events[i]
		if n := len(ev.Hashes); ev.Kind == EventStored && n > lockChunk && ev.BlockSize > 0 && len(ev.Tokens) == n*ev.BlockSize {
			ix.applyStoredChunks(w, ev, i == 0, &res)
			continue
		}
		ix.mu.Lock()
		if i == 0 {
			ix.c.t.tick++ // one recency tick per batch
		}
		ix.c.applyEvent(w, ev, &res)
		ix.mu.Unlock()
	}
	return res
}

// lockChunk bounds the blocks one Apply places per write-lock hold, so that a reader never
// waits behind a whole long prompt's chain (tens of microseconds at most).
const lockChunk = 256

// applyStoredChunks applies a long stored chain as consecutive chunks, each continuing from
// the previous chunk's last block as its parent: the keys are the same as in one piece.
func (ix *Index) applyStoredChunks(w WorkerID, ev *Event, tick bool, res *ApplyResult) {
	sub := *ev
	bs := ev.BlockSize
	for from := 0; from < len(ev.Hashes); from += lockChunk {
		to := min(from+lockChunk, len(ev.Hashes))
		sub.Hashes, sub.Tokens = ev.Hashes[from:to], ev.Tokens[from*bs:to*bs]
		if len(ev.Extra) > 0 {
			sub.Extra = ev.Extra[from:to]
		}
		if from > 0 {
			sub.Parent, sub.HasParent = ev.Hashes[from-1], true
		}
		ix.mu.Lock()
		if tick && from == 0 {
			ix.c.t.tick++
		}
		var r ApplyResult
		ix.c.applyEvent(w, &sub, &r)
		ix.mu.Unlock()
		res.Stored += r.Stored
		res.Skipped += r.Skipped
		res.UnknownParents += r.UnknownParents
		if r.Stored == 0 {
			return // the chain broke (unknown parent or skipped): place nothing after it
		}
	}
}

// ResetWorker drops every block of worker w (Sink). The worker stays known, with its block size.
func (ix *Index) ResetWorker(w WorkerID) {
	ix.mu.Lock()
	ix.c.dropBlocks(w)
	ix.mu.Unlock()
}

// RemoveWorker forgets worker w entirely. Its ID may be reused afterwards.
func (ix *Index) RemoveWorker(w WorkerID) {
	ix.mu.Lock()
	ix.c.removeWorker(w)
	ix.mu.Unlock()
}

// Match appends to dst[:0] every worker holding at least the first of keys (block keys from
// AppendBlockKeys for that worker's block size and the request's namespace), with the number
// of leading keys it holds with no hole, and returns the slice. Workers come in no particular
// order. It allocates nothing when dst has room for the matched workers (cap 64 covers a
// 64-worker fleet). Hits refresh the keys' recency for eviction.
func (ix *Index) Match(keys []uint64, dst []WorkerMatch) []WorkerMatch {
	ix.mu.RLock()
	dst = ix.c.t.match(keys, dst)
	ix.mu.RUnlock()
	return dst
}

// WorkerBlocks returns the number of block keys worker w holds, in O(1).
func (ix *Index) WorkerBlocks(w WorkerID) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.c.workerBlocks(w)
}

// Len returns the number of distinct block keys held.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.c.t.len()
}

// Memberships returns the number of (worker, block key) pairs held.
func (ix *Index) Memberships() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.c.t.members
}

var _ Sink = (*Index)(nil)
