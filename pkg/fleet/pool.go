package fleet

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// PoolConfig configures the pool of one model. Its workers are those whose spec names it, and
// its index, tree and pending overlay hold their blocks alone, so that neither the prompts nor
// the cached blocks of two models mix (token ids of two tokenizers mean different text, and one
// model's traffic must not evict another's blocks from a shared index).
//
// The first pool given to New is the default pool: it also takes every worker whose spec names
// no other pool, and serves requests that name no model.
type PoolConfig struct {
	// Name is the served model name. Required and unique, except for the default pool, whose
	// empty name means "the first model one of its workers reports".
	Name string
	// BlockSize is the block size of the pool's workers whose spec and events give none
	// (0: DefaultBlockSize); Tree, when set, must use it.
	BlockSize int
	// Index is the pool's event index (required); Tree and Pending are optional.
	Index   *indexer.Index
	Tree    *indexer.Tree
	Pending *indexer.Pending
	// Decoder decodes the generated token ids of the pool's grpc:// workers (nil: they answer
	// 501).
	Decoder engine.Detokenizer
	// Routing is the owner's own state for the model (the router's tokenizer, renderer and
	// policy); the fleet hands it back with the pool and never reads it.
	Routing any
}

// Pool is one model's pool as the fleet built it. It is immutable: replacing a model builds a
// new pool, and its workers are rebuilt in it.
type Pool struct {
	name      string
	def       bool
	blockSize int
	lookup    indexer.Lookup
	routing   any
	// engineCfg is what the pool's members' engines are built with.
	engineCfg engine.Config
}

// Name returns the model's name ("" for a default pool that takes its workers' name).
func (p *Pool) Name() string { return p.name }

// Default reports whether p is the default pool.
func (p *Pool) Default() bool { return p.def }

// BlockSize returns the pool's default block size, the scale of its lookup's scores.
func (p *Pool) BlockSize() int { return p.blockSize }

// Lookup returns the pool's lookup over its index, tree and pending overlay.
func (p *Pool) Lookup() *indexer.Lookup { return &p.lookup }

// Routing returns PoolConfig.Routing.
func (p *Pool) Routing() any { return p.routing }

// newPool validates pc and builds its pool (the default pool when def; other pools may not
// take the default's name).
func (f *Fleet) newPool(pc PoolConfig, def bool, defPool *Pool) (*Pool, error) {
	switch {
	case pc.Name == "" && !def:
		return nil, errors.New("fleet: pool: a model name is required")
	case defPool != nil && pc.Name == defPool.name:
		return nil, fmt.Errorf("fleet: pool %q: it is the default model already", pc.Name)
	case pc.Index == nil:
		return nil, fmt.Errorf("fleet: pool %q: an index is required", pc.Name)
	}
	if pc.BlockSize == 0 {
		pc.BlockSize = DefaultBlockSize
	}
	if pc.BlockSize < 1 || pc.BlockSize > worker.MaxBlockSize {
		return nil, fmt.Errorf("fleet: pool %q: block size %d out of range", pc.Name, pc.BlockSize)
	}
	if pc.Tree != nil && pc.Tree.BlockSize() != pc.BlockSize {
		return nil, fmt.Errorf("fleet: pool %q: the tree's block size %d is not the model's %d", pc.Name, pc.Tree.BlockSize(), pc.BlockSize)
	}
	p := &Pool{name: pc.Name, def: def, blockSize: pc.BlockSize, routing: pc.Routing,
		lookup:    indexer.Lookup{Index: pc.Index, Tree: pc.Tree, Pending: pc.Pending, BlockSize: pc.BlockSize, EventsOff: f.cfg.KVIndex == KVIndexOff},
		engineCfg: engine.Config{HTTP: f.transport, Logger: f.log, Now: f.cfg.Now, Tokenizer: pc.Decoder}}
	return p, nil
}

// SetPool adds a pool while serving, or replaces the one of that name: the new pool starts with
// an empty index, and the workers of the old one, like those whose spec names the model and
// were served by the default pool, drain and start again in it. It fails, changing nothing, for
// an invalid pool, the default pool's name, or a worker that cannot be rebuilt.
func (f *Fleet) SetPool(pc PoolConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return errors.New("fleet: set pool: fleet stopped")
	}
	old := f.Snapshot()
	p, err := f.newPool(pc, false, old.def)
	if err != nil {
		return err
	}
	pools := maps.Clone(old.pools)
	pools[p.name] = p
	names := old.poolNames
	if !slices.Contains(names, p.name) {
		names = append(slices.Clip(names), p.name)
	}
	return f.setPoolsLocked(old, pools, names)
}

// RemovePool stops serving a model's pool: its workers drain, and any whose spec still names
// it (a --worker flag's, say) starts again in the default pool. It fails for a name that has
// no pool, and for the default pool.
func (f *Fleet) RemovePool(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.Snapshot()
	if old.pools[name] == nil {
		return fmt.Errorf("fleet: remove pool %q: not configured", name)
	}
	pools := maps.Clone(old.pools)
	delete(pools, name)
	return f.setPoolsLocked(old, pools, slices.DeleteFunc(slices.Clone(old.poolNames), func(n string) bool { return n == name }))
}

// PoolNames returns the names of the pools other than the default, in order.
func (f *Fleet) PoolNames() []string { return slices.Clone(f.Snapshot().poolNames) }

// setPoolsLocked publishes old's workers under new pools and reconciles them into their pools;
// on failure it puts old back.
func (f *Fleet) setPoolsLocked(old *Snapshot, pools map[string]*Pool, names []string) error {
	s := old.with(old.members, old.draining)
	s.pools, s.poolNames = pools, names
	f.snap.Store(s)
	if err := f.reconcileLocked(); err != nil {
		f.snap.Store(old)
		return err
	}
	return nil
}
