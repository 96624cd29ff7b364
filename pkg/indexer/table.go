package indexer

import (
	"math/bits"
	"slices"
	"sync/atomic"
)

// slot is one entry of the open-addressing table: who holds the prefix block key.
// A zero key marks an empty slot; the real key 0 lives in table.zero.
type slot struct {
	key uint64
	// lo is the bitset of workers 0..63 holding key.
	lo uint64
	// ext says which workers >= 64 hold key: 0 when none does; extInline|w when exactly
	// one, w, does (the common case in a large fleet, where most keys are one worker's own,
	// so it takes no memory outside the slot); otherwise an index into table.ext, the bitset
	// of workers >= 64.
	ext uint32
	// stamp is the table tick of the last insert or lookup hit. Lookups store it atomically
	// under the read lock; writers hold the write lock.
	stamp uint32
}

// fibMul spreads keys over the table (Fibonacci hashing). Keys are XXH3 outputs already, but
// callers may hand any uint64 to Match.
const fibMul = 0x9E3779B97F4A7C15

// extInline marks a slot.ext that holds one worker >= 64 itself rather than an index.
const extInline = 1 << 31

// table maps prefix block keys to worker sets: a linear-probing hash table with backward-shift
// deletion, inline 24-byte slots (one cache miss per lookup), per-worker membership counts and
// approximately least-recently-touched eviction. Its size is any multiple of 8 (the home slot
// is a multiply-high of the hash, not a mask), kept between 64% and 80% full (sizing.go),
// because slot memory is most of the index's: a power-of-two table averages about 56%. It is a plain single-goroutine type; Index
// adds the locking (STYLE rule 10). The one exception is match, which may run concurrently
// with other match calls: it only reads, apart from atomic stamp stores.
type table struct {
	slots []slot
	n     uint64 // len(slots)
	used  int    // occupied slots, not counting zero

	zero    slot
	hasZero bool

	// ext[i] is an overflow bitset for workers >= 64 (bit j = worker 64+j); ext[0] is unused
	// so that slot.ext == 0 means "none". extFree lists reusable indexes.
	ext     [][]uint64
	extFree []uint32

	// counts[w] is the number of keys worker w holds; evicted[w] counts memberships of w that
	// eviction removed since w's last engine-map sweep.
	counts  []int
	evicted []int
	members int // total (worker, key) memberships

	// tick is the logical clock stamped on inserts and hits; Index advances it once per Apply.
	tick uint32

	maxBlocks int
	hand      uint64 // eviction sweep position
	rng       uint64 // xorshift state for eviction sampling
	victims   []uint64
	sample    []uint32
}

func newTable(maxBlocks int) table {
	t := table{maxBlocks: maxBlocks, rng: 0x2545F4914F6CDD1D, ext: make([][]uint64, 1)}
	t.resize(8)
	return t
}

// resize rehashes into a table of n slots.
func (t *table) resize(n int) {
	old := t.slots
	t.slots = make([]slot, n)
	t.n = uint64(n)
	if t.hand >= t.n {
		t.hand = 0 // the eviction sweep continues from the start of a smaller table
	}
	for i := range old {
		if old[i].key != 0 {
			j := t.home(old[i].key)
			for t.slots[j].key != 0 {
				j = t.next(j)
			}
			t.slots[j] = old[i]
		}
	}
}

func (t *table) home(key uint64) uint64 { return reduce(key*fibMul, t.n) }

// next is the slot after i, cyclically.
func (t *table) next(i uint64) uint64 {
	if i++; i == t.n {
		return 0
	}
	return i
}

// len returns the number of distinct keys.
func (t *table) len() int {
	if t.hasZero {
		return t.used + 1
	}
	return t.used
}

// find returns the slot of key, or nil.
func (t *table) find(key uint64) *slot {
	if key == 0 {
		if t.hasZero {
			return &t.zero
		}
		return nil
	}
	i := t.home(key)
	for {
		s := &t.slots[i]
		if s.key == key {
			return s
		}
		if s.key == 0 {
			return nil
		}
		i = t.next(i)
	}
}

// findOrInsert returns the slot of key, inserting an empty one stamped now if absent. The
// pointer is valid until the next insert or delete.
func (t *table) findOrInsert(key uint64) *slot {
	if key == 0 {
		if !t.hasZero {
			t.hasZero = true
			t.zero = slot{stamp: t.tick}
		}
		return &t.zero
	}
	if overLoaded(t.used+1, len(t.slots)) {
		t.resize(grownSize(len(t.slots)))
	}
	i := t.home(key)
	for {
		s := &t.slots[i]
		if s.key == key {
			return s
		}
		if s.key == 0 {
			*s = slot{key: key, stamp: t.tick}
			t.used++
			return s
		}
		i = t.next(i)
	}
}

// deleteKey removes key's slot with backward-shift deletion (no tombstones).
func (t *table) deleteKey(key uint64) {
	if key == 0 {
		t.hasZero, t.zero = false, slot{}
		return
	}
	i := t.home(key)
	for t.slots[i].key != key {
		if t.slots[i].key == 0 {
			return
		}
		i = t.next(i)
	}
	t.deleteSlot(i)
}

// deleteSlot empties slot i (occupied, not the zero key's) by backward-shift deletion.
func (t *table) deleteSlot(i uint64) {
	j := i
	for {
		j = t.next(j)
		if t.slots[j].key == 0 {
			break
		}
		k := t.home(t.slots[j].key)
		// Slot j may move back to i only if its home is not cyclically in (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot{}
	t.used--
	if underLoaded(t.used, len(t.slots)) {
		t.resize(shrunkSize(len(t.slots)))
	}
}

func (t *table) grow(w WorkerID) {
	if int(w) >= len(t.counts) {
		n := max(int(w)+1, 2*len(t.counts))
		t.counts = slices.Grow(t.counts, n-len(t.counts))[:n]
		t.evicted = slices.Grow(t.evicted, n-len(t.evicted))[:n]
	}
}

// has reports whether worker w holds s.
func (t *table) has(s *slot, w WorkerID) bool {
	if w < 64 {
		return s.lo&(1<<w) != 0
	}
	return t.extHas(s.ext, w)
}

// extHas reports whether the ext value of a slot includes worker w >= 64.
func (t *table) extHas(ext uint32, w WorkerID) bool {
	switch {
	case ext == 0:
		return false
	case ext&extInline != 0:
		return WorkerID(ext&^extInline) == w
	}
	set := t.ext[ext]
	i := int(w-64) / 64
	return i < len(set) && set[i]&(1<<((w-64)%64)) != 0
}

// extBitset turns s's inline worker into a bitset in table.ext, returning it.
func (t *table) extBitset(s *slot) []uint64 {
	inline := s.ext
	if n := len(t.extFree); n > 0 {
		s.ext = t.extFree[n-1]
		t.extFree = t.extFree[:n-1]
	} else {
		s.ext = uint32(len(t.ext))
		t.ext = append(t.ext, nil)
	}
	if inline&extInline != 0 {
		t.extSet(s, WorkerID(inline&^extInline))
	}
	return t.ext[s.ext]
}

// extSet sets worker w >= 64 in s's bitset.
func (t *table) extSet(s *slot, w WorkerID) {
	set := t.ext[s.ext]
	i := int(w-64) / 64
	if i >= len(set) {
		set = append(set, make([]uint64, i+1-len(set))...)
		t.ext[s.ext] = set
	}
	set[i] |= uint64(1) << ((w - 64) % 64)
}

// contains reports whether worker w holds key.
func (t *table) contains(w WorkerID, key uint64) bool {
	s := t.find(key)
	return s != nil && t.has(s, w)
}

// add records that worker w holds key and reports whether that is new.
func (t *table) add(w WorkerID, key uint64) bool {
	s := t.findOrInsert(key)
	s.stamp = t.tick
	if w < 64 {
		if s.lo&(1<<w) != 0 {
			return false
		}
		s.lo |= 1 << w
	} else {
		switch {
		case t.extHas(s.ext, w):
			return false
		case s.ext == 0:
			s.ext = extInline | uint32(w)
		default:
			if s.ext&extInline != 0 {
				t.extBitset(s)
			}
			t.extSet(s, w)
		}
	}
	t.grow(w)
	t.counts[w]++
	t.members++
	return true
}

// remove drops worker w from key and reports whether w held it. An entry left with no worker
// is deleted.
func (t *table) remove(w WorkerID, key uint64) bool {
	s := t.find(key)
	if s == nil || !t.has(s, w) {
		return false
	}
	switch {
	case w < 64:
		s.lo &^= 1 << w
	case s.ext&extInline != 0:
		s.ext = 0
	default:
		set := t.ext[s.ext]
		set[(w-64)/64] &^= 1 << ((w - 64) % 64)
		// Back to inline (or none) when at most one worker is left.
		left, one := 0, WorkerID(0)
		for i, x := range set {
			if n := bits.OnesCount64(x); n > 0 {
				left += n
				one = WorkerID(64 + 64*i + bits.TrailingZeros64(x))
			}
		}
		if left <= 1 {
			t.freeExt(s)
			if left == 1 {
				s.ext = extInline | uint32(one)
			}
		}
	}
	t.counts[w]--
	t.members--
	if s.lo == 0 && s.ext == 0 {
		t.deleteKey(key)
	}
	return true
}

func (t *table) freeExt(s *slot) {
	clear(t.ext[s.ext])
	t.extFree = append(t.extFree, s.ext)
	s.ext = 0
}

// dropEntry deletes key for every worker holding it (eviction).
func (t *table) dropEntry(key uint64) {
	s := t.find(key)
	if s == nil {
		return
	}
	for lo := s.lo; lo != 0; lo &= lo - 1 {
		w := bits.TrailingZeros64(lo)
		t.counts[w]--
		t.evicted[w]++
		t.members--
	}
	switch {
	case s.ext&extInline != 0:
		w := s.ext &^ extInline
		t.counts[w]--
		t.evicted[w]++
		t.members--
	case s.ext != 0:
		for i, word := range t.ext[s.ext] {
			for ; word != 0; word &= word - 1 {
				w := 64 + 64*i + bits.TrailingZeros64(word)
				t.counts[w]--
				t.evicted[w]++
				t.members--
			}
		}
		t.freeExt(s)
	}
	t.deleteKey(key)
}

// evict brings the table back to at most maxBlocks keys when it holds more, dropping about a
// sixteenth of the budget of least-recently-touched keys at once so that the sweep cost is
// amortised. It samples slot ages to pick an age cutoff, then sweeps from a rotating hand and
// drops keys at least that old; keys are "touched" by inserts and by lookup hits.
func (t *table) evict() {
	if t.maxBlocks <= 0 || t.len() <= t.maxBlocks {
		return
	}
	target := t.maxBlocks - t.maxBlocks/16
	if t.maxBlocks < 16 {
		target = t.maxBlocks
	}
	for t.len() > target {
		need := t.len() - target
		cutoff := t.ageCutoff(need)
		t.victims = t.victims[:0]
		if t.hasZero && t.tick-t.zero.stamp >= cutoff {
			t.victims = append(t.victims, 0)
		}
		for scanned := 0; scanned < len(t.slots) && len(t.victims) < need; scanned++ {
			s := &t.slots[t.hand]
			t.hand = t.next(t.hand)
			if s.key != 0 && t.tick-s.stamp >= cutoff {
				t.victims = append(t.victims, s.key)
			}
		}
		for _, k := range t.victims {
			t.dropEntry(k)
		}
		if t.hand >= t.n {
			t.hand = 0
		}
	}
}

// ageCutoff estimates from a sample the age (in ticks) at or above which about need keys lie.
func (t *table) ageCutoff(need int) uint32 {
	const samples = 256
	t.sample = t.sample[:0]
	if t.used == 0 {
		return 0
	}
	for tries := 0; len(t.sample) < samples && tries < 16*samples; tries++ {
		t.rng ^= t.rng << 13
		t.rng ^= t.rng >> 7
		t.rng ^= t.rng << 17
		s := &t.slots[reduce(t.rng, t.n)]
		if s.key != 0 {
			t.sample = append(t.sample, t.tick-s.stamp)
		}
	}
	if len(t.sample) == 0 {
		return 0
	}
	slices.Sort(t.sample)
	// The need/len oldest fraction of the sample; round towards older so as not to overshoot.
	i := len(t.sample) - 1 - (need*len(t.sample))/t.len()
	return t.sample[max(i, 0)]
}

// match appends to dst[:0] each worker holding at least keys[0] with the number of leading
// keys it holds with no hole, touching the hit slots. It does not allocate when dst has room
// for the matched workers. It may run concurrently with other match calls.
func (t *table) match(keys []uint64, dst []WorkerMatch) []WorkerMatch {
	dst = dst[:0]
	if len(keys) == 0 {
		return dst
	}
	s := t.find(keys[0])
	if s == nil {
		return dst
	}
	tick := t.tick
	touch(s, tick)
	alive := s.lo
	// Workers >= 64 go first in dst, workers < 64 are appended as they stop matching.
	if s.ext&extInline != 0 {
		dst = append(dst, WorkerMatch{Worker: WorkerID(s.ext &^ extInline), Blocks: 1})
	} else if s.ext != 0 {
		for i, word := range t.ext[s.ext] {
			for ; word != 0; word &= word - 1 {
				dst = append(dst, WorkerMatch{Worker: WorkerID(64 + 64*i + bits.TrailingZeros64(word)), Blocks: 1})
			}
		}
	}
	// The workers >= 64 still matching are dst[:live]; one that stops is swapped to the end
	// of dst[:live], so each key costs the workers still matching, not every holder of
	// keys[0] (a system prompt's first block is held by hundreds of workers in a large fleet).
	live := len(dst)
	i := 1
	for ; i < len(keys) && (alive != 0 || live > 0); i++ {
		s = t.find(keys[i])
		var lo uint64
		var ext uint32
		if s != nil {
			touch(s, tick)
			lo, ext = s.lo, s.ext
		}
		if gone := alive &^ lo; gone != 0 {
			for ; gone != 0; gone &= gone - 1 {
				dst = append(dst, WorkerMatch{Worker: WorkerID(bits.TrailingZeros64(gone)), Blocks: i})
			}
			alive &= lo
		}
		if live > 0 {
			live = t.extMatch(dst, live, ext)
		}
	}
	for ; alive != 0; alive &= alive - 1 {
		dst = append(dst, WorkerMatch{Worker: WorkerID(bits.TrailingZeros64(alive)), Blocks: i})
	}
	return dst
}

// extMatch advances the still-matching workers dst[:live] (all >= 64, Blocks equal to the
// current key's index) over a key whose slot.ext is ext: a worker holding it counts one more
// block, one that does not is moved past the new live end with its count final. It returns
// the new live count.
func (t *table) extMatch(dst []WorkerMatch, live int, ext uint32) int {
	switch {
	case ext == 0:
		return 0
	case ext&extInline != 0:
		// At most the one worker survives.
		w := WorkerID(ext &^ extInline)
		for j := range dst[:live] {
			if dst[j].Worker == w {
				dst[j].Blocks++
				dst[0], dst[j] = dst[j], dst[0]
				return 1
			}
		}
		return 0
	}
	set := t.ext[ext]
	for j := 0; j < live; {
		w := dst[j].Worker - 64
		if k := int(w / 64); k < len(set) && set[k]&(1<<(w%64)) != 0 {
			dst[j].Blocks++
			j++
			continue
		}
		live--
		dst[j], dst[live] = dst[live], dst[j]
	}
	return live
}

// touch stamps s with tick unless it already carries it, so that hot keys shared by many
// readers are not written on every hit.
func touch(s *slot, tick uint32) {
	if atomic.LoadUint32(&s.stamp) != tick {
		atomic.StoreUint32(&s.stamp, tick)
	}
}

// prefetch loads the home slot of every key; see u64map.prefetch.
func (t *table) prefetch(keys []uint64) uint64 {
	var acc uint64
	for _, k := range keys {
		h := t.home(k)
		// The next slot too: a probe or a backward shift usually reads it, and it lies on
		// the next cache line when h is a line's last slot.
		acc += t.slots[h].key + t.slots[t.next(h)].key
	}
	return acc
}
