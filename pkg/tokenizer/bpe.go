package tokenizer

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
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
// bytes) to its BPE ids. A slot holds the word's hash as a tag beside an immutable entry, each
// published atomically; a probe compares the tags of its set (one cache line) and reads only the
// entry whose tag matches, so a miss in a full set touches no entry and a hit one. A new word
// takes an empty way of its set, else replaces one chosen by hash bits. Readers never block and
// never see a torn entry (an entry is self-describing, and a tag that raced with another
// writer's entry only costs a failed word comparison); two writers racing for a slot just lose
// one entry.
type wordCache struct {
	seed  uint64
	slots []cacheSlot // set i is slots[4i : 4i+4]
	mask  uint64      // number of sets - 1
}

// cacheSlot is one way of a set: tag is the hash of the entry's word with the low bit set (0:
// empty); entry points at the first word of the entry's buffer.
type cacheSlot struct {
	tag   atomic.Uint64
	entry atomic.Pointer[uint32]
}

// A cache entry is one pointer-free []uint32 allocation: a header (number of ids | word length
// << 16), the ids, then the word's bytes.

// maxCachedWord bounds the length of cached words (longer ones are rare and would pin memory);
// it also keeps the id count and the word length of an entry within 16 bits each.
const maxCachedWord = 64

const ways = 4

// newWordCache returns a cache of about `entries` words (rounded up to a power of two).
func newWordCache(entries int) *wordCache {
	sets := 1 << bits.Len(uint(entries/ways-1))
	return &wordCache{seed: rand.Uint64(), slots: make([]cacheSlot, ways*sets), mask: uint64(sets - 1)}
}

// get returns the ids of w (ok false on a miss) and w's hash, for put.
func (c *wordCache) get(w string) (ids []uint32, h uint64, ok bool) {
	h = wordHash(c.seed, w)
	tag := h | 1
	set := c.slots[ways*(h&c.mask):][:ways]
	for i := range set {
		if set[i].tag.Load() != tag {
			continue
		}
		p := set[i].entry.Load()
		if p == nil {
			continue
		}
		n, wl := int(*p&0xFFFF), int(*p>>16)
		if wl != len(w) {
			continue
		}
		buf := unsafe.Slice(p, 1+n+(wl+3)/4)
		if unsafe.String((*byte)(unsafe.Pointer(&buf[1+n])), wl) == w {
			return buf[1 : 1+n : 1+n], h, true
		}
	}
	return nil, h, false
}

// put stores the ids of w (non-empty, at most maxCachedWord bytes) under its hash h.
func (c *wordCache) put(h uint64, w string, ids []uint32) {
	buf := make([]uint32, 1+len(ids)+(len(w)+3)/4)
	buf[0] = uint32(len(ids)) | uint32(len(w))<<16
	copy(buf[1:], ids)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&buf[1+len(ids)])), len(w)), w)
	set := c.slots[ways*(h&c.mask):][:ways]
	way := &set[(h>>32)%ways]
	for i := range set {
		if set[i].tag.Load() == 0 {
			way = &set[i]
			break
		}
	}
	way.entry.Store(&buf[0])
	way.tag.Store(h | 1)
}

// wordHash is the word cache's hash of a word: wyhash's construction (64x64->128-bit multiply
// folds of the input with secret constants and a per-cache random seed) on the short strings
// words are. It is a hand-written replacement for hash/maphash.String: with it Encode is about
// 15% faster on a chat prompt whose words hit the cache (BenchmarkRenderChat/tokenize/cold in
// pkg/chat, BenchmarkEncode here; maphash.String, four calls down to the runtime's AES hash,
// took a fifth of Encode's profile, wordHash a twentieth). Hashing a word list alone, the two
// are equally fast; the difference is in the lookup loop.
func wordHash(seed uint64, s string) uint64 {
	const k0, k1, k2 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	n := len(b)
	var x, y uint64
	switch {
	case n >= 16:
		for len(b) > 16 {
			seed = wymix(binary.LittleEndian.Uint64(b)^k1, binary.LittleEndian.Uint64(b[8:])^seed)
			b = b[16:]
		}
		b = unsafe.Slice(unsafe.StringData(s), n)[n-16:]
		x, y = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	case n >= 8:
		x, y = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[n-8:])
	case n >= 4:
		x, y = uint64(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[n-4:]))
	case n > 0:
		x = uint64(b[0])<<16 | uint64(b[n>>1])<<8 | uint64(b[n-1])
	}
	return wymix(k2^uint64(n), wymix(x^k1, y^seed^k0))
}

func wymix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
