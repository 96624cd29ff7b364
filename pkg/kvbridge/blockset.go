package kvbridge

import (
	"slices"

	"github.com/kvgate/kvgate/api/common"
)

// DefaultSnapshotMaxBlocks is the default bound of a BridgeServer's block set per DP rank: at
// least the GPU block count of most single engines (vLLM's num_gpu_blocks is in the tens of
// thousands for common models and GPUs). A block costs about 50 bytes of node and map entry
// plus the published block it keeps alive (about 160 bytes at 16 tokens).
const DefaultSnapshotMaxBlocks = 1 << 18

// noNode is the nil index of blockSet's node links.
const noNode = -1

// blockNode is one block of a blockSet: a block in the cache (live) or an ancestor kept only
// because a live block below it still needs its tokens (a ghost; see blockSet).
type blockNode struct {
	// blk is the block as it was published; shared read-only with the history.
	blk *common.KvBlock
	// parent is the node of the block before blk in its chain, noNode at position 0.
	parent int32
	// prev and next link the nodes in creation order (oldest at head), a free node's next
	// links the free list.
	prev, next int32
	// kids counts the nodes whose parent this is.
	kids int32
	live bool
}

// blockSet is one DP rank's current block set as its events describe it: the blocks stored and
// not removed since the last AllBlocksCleared, each kept once with what a BlockStored needs to
// replay it (the published *common.KvBlock: hash, token ids, block size, LoRA id) and its
// parent. It is the algorithm alone: single-goroutine, no locks (BridgeServer holds its own).
//
// A client computes a block's key from its whole chain (pkg/indexer), so a live block whose
// parent was removed still needs that parent's tokens to be replayed: such ancestors stay as
// ghosts until their last descendant goes, and a snapshot stores them and then removes them.
// A store whose parent is not live is dropped, as a client's index drops it (an unknown parent
// is never placed), so every node's parent is known. Nodes (live and ghost) are bounded by max;
// past it the oldest live block is dropped and counted in evicted.
//
// Per event the cost is one map operation and O(1) list work per block; no per-block
// allocation (nodes live in one slab with a free list). Creation order is a topological order
// (a parent exists before its children), which the snapshot relies on.
type blockSet struct {
	max   int
	nodes []blockNode
	// live maps the hash of every live block to its node; ghosts are in no map.
	live       map[int64]int32
	head, tail int32 // creation order
	free       int32 // free list through next
	used       int   // nodes in use (live and ghost)

	evicted  uint64 // live blocks dropped by the bound
	orphaned uint64 // stored chains dropped because their parent was not live
}

func newBlockSet(max int) *blockSet {
	return &blockSet{max: max, live: map[int64]int32{}, head: noNode, tail: noNode, free: noNode}
}

// liveLen returns the number of live blocks.
func (s *blockSet) liveLen() int { return len(s.live) }

// clear empties the set (AllBlocksCleared), keeping its storage.
func (s *blockSet) clear() {
	clear(s.live)
	clear(s.nodes) // drop the references to published blocks
	s.nodes = s.nodes[:0]
	s.head, s.tail, s.free, s.used = noNode, noNode, noNode, 0
}

// store applies a BlockStored: blocks is a chain whose first block follows parent (nil: the
// chain starts at position 0). A chain a client would reject (no blocks, token counts that are
// not the block size) or whose parent is not live is ignored.
func (s *blockSet) store(parent *int64, blocks []*common.KvBlock) {
	if !storable(blocks) {
		return
	}
	p := int32(noNode)
	if parent != nil && *parent != 0 {
		i, ok := s.live[*parent]
		if !ok {
			s.orphaned++
			return
		}
		p = i
	}
	for _, b := range blocks {
		if i, ok := s.live[b.GetBlockHash()]; ok {
			if n := &s.nodes[i]; n.parent == p && slices.Equal(n.blk.GetTokenIds(), b.GetTokenIds()) && n.blk.GetLoraId() == b.GetLoraId() {
				p = i // the same block stored again: nothing changes
				continue
			}
			// The same hash with other content moves (as in the index): the new block takes
			// the hash and the old one goes, kept as a ghost if it has children (it may be
			// the new block's own parent, in the simulator's parent-cycle anomaly).
			n := s.add(b, p)
			s.retire(i)
			p = n
			continue
		}
		p = s.add(b, p)
	}
	for s.max > 0 && s.used > s.max && s.evictOldest() {
	}
}

// storable reports whether a client's decoder accepts the chain (ProtoDecoder.Decode).
func storable(blocks []*common.KvBlock) bool {
	if len(blocks) == 0 {
		return false
	}
	bs := int(blocks[0].GetBlockSize())
	if bs <= 0 {
		bs = len(blocks[0].GetTokenIds())
	}
	if bs <= 0 {
		return false
	}
	for _, b := range blocks {
		if (b.GetBlockSize() != 0 && int(b.GetBlockSize()) != bs) || len(b.GetTokenIds()) != bs {
			return false
		}
	}
	return true
}

// remove applies a BlockRemoved of one hash; an unknown hash is ignored.
func (s *blockSet) remove(h int64) {
	if i, ok := s.live[h]; ok {
		s.demote(i)
	}
}

// add appends a live node for b after parent p and returns it.
func (s *blockSet) add(b *common.KvBlock, p int32) int32 {
	var i int32
	if s.free != noNode {
		i = s.free
		s.free = s.nodes[i].next
	} else {
		s.nodes = append(s.nodes, blockNode{})
		i = int32(len(s.nodes) - 1)
	}
	s.nodes[i] = blockNode{blk: b, parent: p, prev: s.tail, next: noNode, live: true}
	if s.tail != noNode {
		s.nodes[s.tail].next = i
	} else {
		s.head = i
	}
	s.tail = i
	if p != noNode {
		s.nodes[p].kids++
	}
	s.live[b.GetBlockHash()] = i
	s.used++
	return i
}

// demote takes live node i out of the cache: it stays as a ghost while it has children, and
// is freed (with the ghost ancestors it was the last child of) otherwise.
func (s *blockSet) demote(i int32) {
	delete(s.live, s.nodes[i].blk.GetBlockHash())
	s.retire(i)
}

// retire is demote for a node whose hash is no longer mapped to it.
func (s *blockSet) retire(i int32) {
	s.nodes[i].live = false
	for i != noNode && !s.nodes[i].live && s.nodes[i].kids == 0 {
		p := s.nodes[i].parent
		s.release(i)
		if p != noNode {
			s.nodes[p].kids--
		}
		i = p
	}
}

// release unlinks node i from the creation order and frees it.
func (s *blockSet) release(i int32) {
	n := &s.nodes[i]
	if n.prev != noNode {
		s.nodes[n.prev].next = n.next
	} else {
		s.head = n.next
	}
	if n.next != noNode {
		s.nodes[n.next].prev = n.prev
	} else {
		s.tail = n.prev
	}
	*n = blockNode{next: s.free}
	s.free = i
	s.used--
}

// evictOldest drops the oldest live block; false when there is none.
func (s *blockSet) evictOldest() bool {
	for i := s.head; i != noNode; i = s.nodes[i].next {
		if s.nodes[i].live {
			s.evicted++
			s.demote(i)
			return true
		}
	}
	return false
}

// frozenSet is a copy of a blockSet's nodes taken under the bridge's lock, to build a snapshot
// from outside it. The blocks themselves are shared (immutable).
type frozenSet struct {
	nodes []blockNode
	head  int32
}

func (s *blockSet) freeze() frozenSet {
	return frozenSet{nodes: slices.Clone(s.nodes), head: s.head}
}
