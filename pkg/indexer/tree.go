package indexer

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// TreeConfig configures a Tree. Zero fields take the documented defaults.
type TreeConfig struct {
	// BlockSize is the page size the tree aligns to: only whole blocks are stored and matched.
	// Default 16.
	BlockSize int `yaml:"block_size" json:"block_size"`
	// MaxBlocksPerWorker is each worker's budget, modelling its KV cache: past it, the worker's
	// least-recently-inserted blocks are dropped (leaf first). Default 65536.
	MaxBlocksPerWorker int `yaml:"max_blocks_per_worker" json:"max_blocks_per_worker"`
	// TTL: a worker's blocks not inserted again for longer than TTL no longer match and are
	// dropped by Prune or by the next eviction. Default 10m.
	TTL time.Duration `yaml:"ttl" json:"ttl"`
	// Now is the clock; nil means time.Now. It is called without locks held, so it must be safe
	// for concurrent use.
	Now func() time.Time `yaml:"-" json:"-"`
}

// Tree is the approximate token tree of DESIGN.md §4: a radix tree over token ids whose edges
// hold whole blocks, with one tenant per worker. It models the cache of a worker without an
// event stream from the gateway's own routing decisions: Insert on routing, Match on lookup.
// A tenant that holds a node holds all of its ancestors, so a worker's match is the depth of
// the deepest node on the request's path that it holds. Safe for concurrent use; Match takes a
// read lock and does not update recency (Insert does, on every routed request). Tree must not
// be copied.
type Tree struct {
	bs     int
	budget int
	ttl    int64
	now    func() time.Time

	// mu guards everything below.
	mu   sync.RWMutex
	root *tnode
	// held[w] is the set of nodes worker w holds and blocks[w] their total edge blocks.
	held   map[WorkerID]map[*tnode]struct{}
	blocks map[WorkerID]int
	// nodes is scratch for eviction.
	nodes []*tnode
}

// tnode is one radix-tree node: the edge from its parent holds tokens (whole blocks).
type tnode struct {
	parent   *tnode
	tokens   []uint32
	depth    int // blocks from the root to the end of this node's edge
	children map[uint64]*tnode
	// tenants lists the workers holding the whole edge, with the time (unix ns) they last
	// inserted through it. A parent's time is never older than a child's.
	tenants []tenant
}

type tenant struct {
	w    WorkerID
	last int64
}

func (n *tnode) tenantAt(w WorkerID) int {
	for i := range n.tenants {
		if n.tenants[i].w == w {
			return i
		}
	}
	return -1
}

// NewTree returns an empty Tree configured by cfg. It starts no goroutines.
func NewTree(cfg TreeConfig) (*Tree, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	if cfg.MaxBlocksPerWorker == 0 {
		cfg.MaxBlocksPerWorker = 65536
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BlockSize < 1 || cfg.MaxBlocksPerWorker < 1 || cfg.TTL < 0 {
		return nil, fmt.Errorf("indexer: new tree: block size %d, budget %d, ttl %v: %w",
			cfg.BlockSize, cfg.MaxBlocksPerWorker, cfg.TTL, ErrInvalidConfig)
	}
	return &Tree{
		bs: cfg.BlockSize, budget: cfg.MaxBlocksPerWorker, ttl: int64(cfg.TTL), now: cfg.Now,
		root: &tnode{}, held: map[WorkerID]map[*tnode]struct{}{}, blocks: map[WorkerID]int{},
	}, nil
}

// BlockSize returns the tree's page size in tokens.
func (t *Tree) BlockSize() int { return t.bs }

// Insert records that worker w was sent tokens: every whole block of tokens now counts as held
// by w, most recently used. Call it when the gateway routes a request to w.
func (t *Tree) Insert(w WorkerID, tokens []uint32) {
	n := len(tokens) / t.bs
	if n == 0 {
		return
	}
	tokens = tokens[:n*t.bs]
	now := t.now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.root
	for pos := 0; pos < n; {
		first := tokens[pos*t.bs : (pos+1)*t.bs]
		h := ContentHash(first)
		child := cur.children[h]
		if child == nil {
			child = &tnode{parent: cur, tokens: slices.Clone(tokens[pos*t.bs:]), depth: cur.depth + n - pos}
			if cur.children == nil {
				cur.children = map[uint64]*tnode{}
			}
			cur.children[h] = child
			t.touchLocked(child, w, now)
			break
		}
		m := t.commonBlocks(child.tokens, tokens[pos*t.bs:])
		if m == 0 {
			break // content-hash collision with different tokens: leave the rest unrecorded
		}
		if m < len(child.tokens)/t.bs {
			child = t.splitLocked(child, m, h)
		}
		t.touchLocked(child, w, now)
		pos += m
		cur = child
	}
	if t.blocks[w] > t.budget {
		t.evictLocked(w, now, t.budget-t.budget/16)
	}
}

// commonBlocks returns how many leading whole blocks edge and tokens share.
func (t *Tree) commonBlocks(edge, tokens []uint32) int {
	m := 0
	for (m+1)*t.bs <= len(edge) && (m+1)*t.bs <= len(tokens) &&
		slices.Equal(edge[m*t.bs:(m+1)*t.bs], tokens[m*t.bs:(m+1)*t.bs]) {
		m++
	}
	return m
}

// splitLocked cuts n's edge after m blocks and returns the new upper node, which inherits n's
// tenants (they held the whole edge). h is the content hash of n's first block.
func (t *Tree) splitLocked(n *tnode, m int, h uint64) *tnode {
	mid := &tnode{
		parent:  n.parent,
		tokens:  n.tokens[: m*t.bs : m*t.bs],
		depth:   n.depth - (len(n.tokens)/t.bs - m),
		tenants: slices.Clone(n.tenants),
	}
	n.tokens = n.tokens[m*t.bs:]
	n.parent = mid
	mid.children = map[uint64]*tnode{ContentHash(n.tokens[:t.bs]): n}
	mid.parent.children[h] = mid
	for _, tn := range mid.tenants {
		t.held[tn.w][mid] = struct{}{}
	}
	return mid
}

// touchLocked marks n held by w as of now.
func (t *Tree) touchLocked(n *tnode, w WorkerID, now int64) {
	if i := n.tenantAt(w); i >= 0 {
		// max keeps a parent never older than its children even if the clock steps back.
		n.tenants[i].last = max(n.tenants[i].last, now)
		return
	}
	n.tenants = append(n.tenants, tenant{w, now})
	if t.held[w] == nil {
		t.held[w] = map[*tnode]struct{}{}
	}
	t.held[w][n] = struct{}{}
	t.blocks[w] += len(n.tokens) / t.bs
}

// dropLocked removes w's tenancy of n and frees n when nobody holds it. Callers drop children
// before parents, so a freed node has no children left.
func (t *Tree) dropLocked(n *tnode, w WorkerID) {
	i := n.tenantAt(w)
	if i < 0 {
		return
	}
	n.tenants = slices.Delete(n.tenants, i, i+1)
	delete(t.held[w], n)
	t.blocks[w] -= len(n.tokens) / t.bs
	if len(t.held[w]) == 0 {
		delete(t.held, w)
		delete(t.blocks, w)
	}
	for n != t.root && len(n.tenants) == 0 && len(n.children) == 0 {
		p := n.parent
		delete(p.children, ContentHash(n.tokens[:t.bs]))
		n.parent = nil
		n = p
	}
}

// sortedHeldLocked returns w's nodes, least recently used first and, among equals, deepest
// first: an order in which dropping a prefix never leaves a node held without its parent.
func (t *Tree) sortedHeldLocked(w WorkerID) []*tnode {
	t.nodes = t.nodes[:0]
	for n := range t.held[w] {
		t.nodes = append(t.nodes, n)
	}
	slices.SortFunc(t.nodes, func(a, b *tnode) int {
		la, lb := a.tenants[a.tenantAt(w)].last, b.tenants[b.tenantAt(w)].last
		if la != lb {
			if la < lb {
				return -1
			}
			return 1
		}
		return b.depth - a.depth
	})
	return t.nodes
}

// evictLocked drops w's expired nodes, then its least recently used ones until it holds at
// most target blocks.
func (t *Tree) evictLocked(w WorkerID, now int64, target int) {
	for _, n := range t.sortedHeldLocked(w) {
		i := n.tenantAt(w)
		if t.blocks[w] <= target && now-n.tenants[i].last <= t.ttl {
			break
		}
		t.dropLocked(n, w)
	}
	clear(t.nodes)
}

// Prune drops every tenancy older than the TTL, releasing its memory. Expired tenancies never
// match even before Prune runs; the owner may call it periodically.
func (t *Tree) Prune() {
	now := t.now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for w := range t.held {
		t.evictLocked(w, now, t.budget)
	}
}

// RemoveWorker drops everything worker w holds.
func (t *Tree) RemoveWorker(w WorkerID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	nodes := t.sortedHeldLocked(w)
	slices.SortFunc(nodes, func(a, b *tnode) int { return b.depth - a.depth })
	for _, n := range nodes {
		t.dropLocked(n, w)
	}
	clear(t.nodes)
}

// WorkerBlocks returns the number of blocks worker w holds, expired ones included until they
// are pruned.
func (t *Tree) WorkerBlocks(w WorkerID) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.blocks[w]
}

// Match appends to dst[:0] every worker holding at least the first whole block of tokens, with
// the number of leading blocks it holds, and returns the slice. Workers come in no particular
// order. It allocates nothing when dst has room for the matched workers.
func (t *Tree) Match(tokens []uint32, dst []WorkerMatch) []WorkerMatch {
	dst = dst[:0]
	n := len(tokens) / t.bs
	if n == 0 {
		return dst
	}
	expired := t.now().UnixNano() - t.ttl
	t.mu.RLock()
	defer t.mu.RUnlock()
	cur := t.root
	for pos := 0; pos < n; {
		child := cur.children[ContentHash(tokens[pos*t.bs:(pos+1)*t.bs])]
		if child == nil {
			break
		}
		m := t.commonBlocks(child.tokens, tokens[pos*t.bs:])
		if m == 0 {
			break
		}
		alive := 0
		if cur == t.root {
			for _, tn := range child.tenants {
				if tn.last >= expired {
					dst = append(dst, WorkerMatch{Worker: tn.w, Blocks: m})
					alive++
				}
			}
		} else {
			// Tenants only thin out going down: extend the workers that held every node so far.
			for i := range dst {
				if dst[i].Blocks != pos {
					continue
				}
				if j := child.tenantAt(dst[i].Worker); j >= 0 && child.tenants[j].last >= expired {
					dst[i].Blocks += m
					alive++
				}
			}
		}
		if alive == 0 || m < len(child.tokens)/t.bs {
			break
		}
		pos += m
		cur = child
	}
	return dst
}
