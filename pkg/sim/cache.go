package sim

import (
	"errors"
	"fmt"
)

// cblock is one physical KV block.
type cblock struct {
	hash   BlockHash
	hashed bool  // the block is in cache.byHash under hash
	ref    int32 // running requests that use the block
	// prev/next link the block into the free queue (-1 = none); inFree says it is queued.
	prev, next int32
	inFree     bool
}

// cache is a paged KV cache with prefix caching, modelled on vLLM's V1 block pool: every block
// whose reference count is zero sits in one free queue, ordered by eviction priority; cached
// (hashed) blocks stay findable by hash while they wait there, and allocation pops the queue head,
// evicting the head's hash if it had one. Requests release their blocks tail-first, so the end
// of a chain is evicted before its beginning and a cached prefix stays reachable from block 0.
//
// cache is a plain single-goroutine type: it has no locks, and the caller (core) serialises use.
// Allocation and lookup do not allocate memory once the internal slices have grown.
type cache struct {
	bs     int
	blocks []cblock
	byHash map[BlockHash]int32
	// head and tail of the free queue; head is evicted first.
	head, tail int32
	free       int // blocks in the free queue (allocatable, including evictable cached ones)
	used       int // blocks with ref > 0
	// evicted collects the hashes dropped since the last TakeEvicted, in eviction order.
	evicted []BlockHash
}

// ErrBadCacheConfig is wrapped by NewEngine's error for a Config whose NumBlocks or BlockSize
// is negative (zero takes the default).
var ErrBadCacheConfig = errors.New("sim: bad cache config")

// newCache returns an empty cache of numBlocks blocks of blockSize tokens each.
func newCache(numBlocks, blockSize int) (*cache, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("sim: new cache: %d blocks of %d tokens: %w", numBlocks, blockSize, ErrBadCacheConfig)
	}
	c := &cache{
		bs:     blockSize,
		blocks: make([]cblock, numBlocks),
		byHash: make(map[BlockHash]int32, numBlocks),
		head:   -1,
		tail:   -1,
	}
	for i := range c.blocks {
		c.blocks[i].prev, c.blocks[i].next = -1, -1
		c.pushTail(int32(i))
	}
	return c, nil
}

// BlockSize returns the number of tokens per block.
func (c *cache) BlockSize() int { return c.bs }

// NumBlocks returns the capacity in blocks.
func (c *cache) NumBlocks() int { return len(c.blocks) }

// NumFree returns the number of blocks an allocation can use: unreferenced blocks, cached or not.
func (c *cache) NumFree() int { return c.free }

// NumUsed returns the number of blocks referenced by at least one request.
func (c *cache) NumUsed() int { return c.used }

// NumCached returns the number of blocks findable by hash (referenced or not).
func (c *cache) NumCached() int { return len(c.byHash) }

// Usage returns the fraction of blocks in use by requests, as vLLM's kv_cache_usage_perc
// reports it (cached but unreferenced blocks count as free).
func (c *cache) Usage() float64 { return float64(c.used) / float64(len(c.blocks)) }

// Match returns how many leading hashes name cached blocks, without changing any state.
func (c *cache) Match(hashes []BlockHash) int {
	for i, h := range hashes {
		if _, ok := c.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Acquire references the cached blocks named by hashes (all of which must be cached: pass a
// prefix of length Match) and allocates fresh blocks, appending all block ids to dst in chain
// order. It is all-or-nothing: when the free queue cannot supply the fresh blocks plus the
// cached blocks that are currently unreferenced, nothing changes and ok is false.
func (c *cache) Acquire(dst []int32, hashes []BlockHash, fresh int) (_ []int32, ok bool) {
	need := fresh
	for _, h := range hashes {
		id, found := c.byHash[h]
		if !found {
			return dst, false
		}
		if c.blocks[id].ref == 0 {
			need++
		}
	}
	if need > c.free {
		return dst, false
	}
	for _, h := range hashes {
		id := c.byHash[h]
		c.ref(id)
		dst = append(dst, id)
	}
	return c.allocLocked(dst, fresh), true
}

// Allocate appends n fresh blocks to dst, evicting cached blocks from the free queue head as
// needed. It is all-or-nothing: when fewer than n blocks are free, ok is false.
func (c *cache) Allocate(dst []int32, n int) (_ []int32, ok bool) {
	if n > c.free {
		return dst, false
	}
	return c.allocLocked(dst, n), true
}

func (c *cache) allocLocked(dst []int32, n int) []int32 {
	for range n {
		id := c.head
		c.unlink(id)
		b := &c.blocks[id]
		if b.hashed {
			delete(c.byHash, b.hash)
			b.hashed = false
			c.evicted = append(c.evicted, b.hash)
		}
		b.ref = 1
		c.used++
		dst = append(dst, id)
	}
	return dst
}

// Commit records that block id now holds the full block named h, making it findable by hash.
// It returns false (and leaves the block private to its request) when the block is already
// hashed or another block already caches h, as happens when two running requests compute the
// same new block in the same step.
func (c *cache) Commit(id int32, h BlockHash) bool {
	b := &c.blocks[id]
	if b.hashed {
		return false
	}
	if _, dup := c.byHash[h]; dup {
		return false
	}
	b.hash, b.hashed = h, true
	c.byHash[h] = id
	return true
}

// Release drops one reference to each block in ids. Blocks that become unreferenced join the
// tail of the free queue in reverse order, so the last block of a chain is evicted first.
func (c *cache) Release(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		b := &c.blocks[id]
		b.ref--
		if b.ref == 0 {
			c.used--
			c.pushTail(id)
		}
	}
}

// Reset forgets every cached hash, as vLLM's reset_prefix_cache does. Like vLLM it refuses
// (returns false) while any block is referenced by a running request. Cleared hashes are not
// reported through TakeEvicted: the caller publishes one AllBlocksCleared instead.
func (c *cache) Reset() bool {
	if c.used > 0 {
		return false
	}
	for h, id := range c.byHash {
		c.blocks[id].hashed = false
		delete(c.byHash, h)
	}
	return true
}

// TakeEvicted appends the hashes evicted since the previous call to dst, oldest first.
func (c *cache) TakeEvicted(dst []BlockHash) []BlockHash {
	dst = append(dst, c.evicted...)
	c.evicted = c.evicted[:0]
	return dst
}

// AppendCached appends the folded hash of every cached block to dst, in no particular order.
func (c *cache) AppendCached(dst []uint64) []uint64 {
	for h := range c.byHash {
		dst = append(dst, h.Fold())
	}
	return dst
}

func (c *cache) ref(id int32) {
	b := &c.blocks[id]
	if b.ref == 0 {
		c.unlink(id)
		c.used++
	}
	b.ref++
}

func (c *cache) pushTail(id int32) {
	b := &c.blocks[id]
	b.prev, b.next, b.inFree = c.tail, -1, true
	if c.tail >= 0 {
		c.blocks[c.tail].next = id
	} else {
		c.head = id
	}
	c.tail = id
	c.free++
}

func (c *cache) unlink(id int32) {
	b := &c.blocks[id]
	if b.prev >= 0 {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next >= 0 {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next, b.inFree = -1, -1, false
	c.free--
}
