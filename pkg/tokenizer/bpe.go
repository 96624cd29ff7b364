package tokenizer

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"
)

// mergeTable maps a pair of token ids to its merge: (rank+1)<<32 | merged id. Zero means "no
// merge", and a smaller value is a higher-priority merge, so callers can compare values directly.
// Open addressing with linear probing; read-only after load.
type mergeTable struct {
	keys  []uint64
	vals  []uint64
	shift uint
}

func newMergeTable(n int) *mergeTable {
	size := 1 << bits.Len(uint(n*2+1)) // load factor <= 0.5
	return &mergeTable{keys: make([]uint64, size), vals: make([]uint64, size), shift: uint(64 - bits.Len(uint(size-1)))}
}

func (m *mergeTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> m.shift }

// put stores a merge; a later put for the same pair replaces the earlier one, as in the Hugging
// Face BPE model whose merge map is built by collecting the merges list into a HashMap.
func (m *mergeTable) put(a, b, rank, merged uint32) {
	k := uint64(a)<<32 | uint64(b)
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(k); ; i = (i + 1) & mask {
		if m.vals[i] == 0 || m.keys[i] == k {
			m.keys[i] = k
			m.vals[i] = uint64(rank+1)<<32 | uint64(merged)
			return
		}
	}
}

func (m *mergeTable) get(a, b uint32) uint64 {
	k := uint64(a)<<32 | uint64(b)
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(k); ; i = (i + 1) & mask {
		v := m.vals[i]
		if v == 0 || m.keys[i] == k {
			return v
		}
	}
}

const noMerge = ^uint64(0)

// scanLimit is the word length (in initial symbols) up to which bpe uses the quadratic scan;
// longer words use the heap. Both apply the lowest-rank merge first, leftmost among equals,
// exactly like tokenizers' Word::merge_all, so they give identical results.
const scanLimit = 96

// bpe appends the BPE encoding of the raw-byte word w to out.
func (t *Tokenizer) bpe(st *encState, w string, out []uint32) []uint32 {
	ids := st.ids[:0]
	for i := 0; i < len(w); i++ {
		if id := t.byteID[w[i]]; id >= 0 {
			ids = append(ids, uint32(id))
		}
	}
	return t.mergeSymbols(st, ids, out)
}

// mergeSymbols applies the merges to the initial symbols ids (which must be st.ids's storage)
// and appends the result to out.
func (t *Tokenizer) mergeSymbols(st *encState, ids []uint32, out []uint32) []uint32 {
	if len(ids) > scanLimit {
		st.ids = ids
		return t.bpeHeap(st, out)
	}
	if len(ids) < 2 {
		st.ids = ids
		return append(out, ids...)
	}
	// ranks[i] is the merge value of the pair (ids[i], ids[i+1]).
	ranks := st.ranks[:0]
	for i := 0; i+1 < len(ids); i++ {
		v := t.merges.get(ids[i], ids[i+1])
		if v == 0 {
			v = noMerge
		}
		ranks = append(ranks, v)
	}
	for len(ranks) > 0 {
		best, p := noMerge, -1
		for i, v := range ranks {
			if v < best {
				best, p = v, i
			}
		}
		if p < 0 {
			break
		}
		ids[p] = uint32(best)
		ids = append(ids[:p+1], ids[p+2:]...)
		ranks = append(ranks[:p], ranks[p+1:]...)
		if p > 0 {
			v := t.merges.get(ids[p-1], ids[p])
			if v == 0 {
				v = noMerge
			}
			ranks[p-1] = v
		}
		if p < len(ranks) {
			v := t.merges.get(ids[p], ids[p+1])
			if v == 0 {
				v = noMerge
			}
			ranks[p] = v
		}
	}
	st.ids, st.ranks = ids, ranks
	return append(out, ids...)
}

// bpeHeap is Word::merge_all of tokenizers: a min-heap of (rank, position) over a linked list of
// symbols, skipping stale entries. O(n log n) for very long words (a 10 MB run of letters). It
// stays one function, heap included, so the hot loop keeps its state in registers.
func (t *Tokenizer) bpeHeap(st *encState, out []uint32) []uint32 {
	ids := st.ids
	n := len(ids)
	next := slices.Grow(st.next[:0], n)[:n]
	prev := slices.Grow(st.prev[:0], n)[:n]
	for i := range n {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	alive := slices.Grow(st.alive[:0], n)[:n]
	for i := range alive {
		alive[i] = true
	}
	h := st.heap[:0]
	push := func(v uint64) { // v = rank<<32 | pos, rank including the +1 offset
		h = append(h, v)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if h[p] <= h[i] {
				break
			}
			h[p], h[i] = h[i], h[p]
			i = p
		}
	}
	pop := func() uint64 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(h) && h[l] < h[m] {
				m = l
			}
			if r < len(h) && h[r] < h[m] {
				m = r
			}
			if m == i {
				break
			}
			h[m], h[i] = h[i], h[m]
			i = m
		}
		return top
	}
	for i := 0; i+1 < n; i++ {
		if v := t.merges.get(ids[i], ids[i+1]); v != 0 {
			push(v&^0xFFFFFFFF | uint64(i))
		}
	}
	for len(h) > 0 {
		top := pop()
		pos := int32(top & 0xFFFFFFFF)
		if !alive[pos] || next[pos] < 0 {
			continue
		}
		r := next[pos]
		v := t.merges.get(ids[pos], ids[r])
		if v == 0 || v>>32 != top>>32 { // stale: the pair at pos changed since this entry was pushed
			continue
		}
		ids[pos] = uint32(v)
		alive[r] = false
		next[pos] = next[r]
		if nn := next[r]; nn >= 0 {
			prev[nn] = pos
		}
		if p := prev[pos]; p >= 0 {
			if v := t.merges.get(ids[p], ids[pos]); v != 0 {
				push(v&^0xFFFFFFFF | uint64(p))
			}
		}
		if nn := next[pos]; nn >= 0 {
			if v := t.merges.get(ids[pos], ids[nn]); v != 0 {
				push(v&^0xFFFFFFFF | uint64(pos))
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, ids[i])
	}
	st.next, st.prev, st.alive, st.heap = next, prev, alive, h
	return out
}

// wordCache is a bounded, lock-free, 4-way set-associative cache from a pre-tokenized word (raw
// bytes) to its BPE ids. A slot holds an immutable entry published with an atomic pointer; a new
// word takes an empty way of its set, else replaces one chosen by hash bits. Readers never block
// and never see a torn entry; two writers racing for a slot just lose one entry.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[cacheEntry] // set i is slots[4i : 4i+4]
	mask  uint64                       // number of sets - 1
}

type cacheEntry struct {
	word string
	ids  []uint32
}

// maxCachedWord bounds the length of cached words (longer ones are rare and would pin memory).
const maxCachedWord = 64

const ways = 4

// newWordCache returns a cache of about `entries` words (rounded up to a power of two).
func newWordCache(entries int) *wordCache {
	sets := 1 << bits.Len(uint(entries/ways-1))
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[cacheEntry], ways*sets), mask: uint64(sets - 1)}
}

func (c *wordCache) get(w string) (*cacheEntry, uint64) {
	h := maphash.String(c.seed, w)
	set := c.slots[ways*(h&c.mask):][:ways]
	for i := range set {
		if e := set[i].Load(); e != nil && e.word == w {
			return e, h
		}
	}
	return nil, h
}

func (c *wordCache) put(h uint64, w string, ids []uint32) {
	// One allocation for the ids and the word's bytes.
	buf := make([]uint32, len(ids)+(len(w)+3)/4)
	copy(buf, ids)
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf[len(ids):]))), len(w))
	copy(wb, w)
	e := &cacheEntry{word: unsafe.String(unsafe.SliceData(wb), len(w)), ids: buf[:len(ids):len(ids)]}
	set := c.slots[ways*(h&c.mask):][:ways]
	for i := range set {
		if set[i].Load() == nil {
			set[i].Store(e)
			return
		}
	}
	set[(h>>32)%ways].Store(e)
}
