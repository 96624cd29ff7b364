package indexer

// u64map is an open-addressing uint64 → uint64 map (linear probing, backward-shift deletion)
// used for the per-worker engine-hash maps: one cache miss per lookup where a Go map's
// control-word probe costs about two, and 16 bytes per slot. Not safe for concurrent use.
type u64map struct {
	slots []u64slot
	n     uint64 // len(slots): any multiple of 8, kept 64–80% full (sizing.go)
	used  int    // occupied slots, not counting zero

	zeroVal uint64 // value of key 0, valid when hasZero
	hasZero bool
}

type u64slot struct{ key, val uint64 }

func newU64map() u64map {
	var m u64map
	m.resize(8)
	return m
}

func (m *u64map) resize(n int) {
	old := m.slots
	m.slots = make([]u64slot, n)
	m.n = uint64(n)
	for _, s := range old {
		if s.key != 0 {
			j := m.home(s.key)
			for m.slots[j].key != 0 {
				j = m.next(j)
			}
			m.slots[j] = s
		}
	}
}

func (m *u64map) home(key uint64) uint64 { return reduce(mix(key), m.n) }

// next is the slot after i, cyclically.
func (m *u64map) next(i uint64) uint64 {
	if i++; i == m.n {
		return 0
	}
	return i
}

// len returns the number of keys.
func (m *u64map) len() int {
	if m.hasZero {
		return m.used + 1
	}
	return m.used
}

// get returns key's value and whether key is present.
func (m *u64map) get(key uint64) (uint64, bool) {
	if key == 0 {
		return m.zeroVal, m.hasZero
	}
	for i := m.home(key); ; i = m.next(i) {
		s := &m.slots[i]
		if s.key == key {
			return s.val, true
		}
		if s.key == 0 {
			return 0, false
		}
	}
}

// put sets key's value and returns the previous one, if any.
func (m *u64map) put(key, val uint64) (old uint64, had bool) {
	if key == 0 {
		old, had = m.zeroVal, m.hasZero
		m.zeroVal, m.hasZero = val, true
		return old, had
	}
	if overLoaded(m.used+1, len(m.slots)) {
		m.resize(grownSize(len(m.slots)))
	}
	for i := m.home(key); ; i = m.next(i) {
		s := &m.slots[i]
		if s.key == key {
			old, s.val = s.val, val
			return old, true
		}
		if s.key == 0 {
			*s = u64slot{key, val}
			m.used++
			return 0, false
		}
	}
}

// del removes key and returns its value, if it was present.
func (m *u64map) del(key uint64) (uint64, bool) {
	if key == 0 {
		v, had := m.zeroVal, m.hasZero
		m.zeroVal, m.hasZero = 0, false
		return v, had
	}
	i := m.home(key)
	for m.slots[i].key != key {
		if m.slots[i].key == 0 {
			return 0, false
		}
		i = m.next(i)
	}
	val := m.slots[i].val
	j := i
	for {
		j = m.next(j)
		if m.slots[j].key == 0 {
			break
		}
		k := m.home(m.slots[j].key)
		// Slot j may move back to i only if its home is not cyclically in (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		m.slots[i] = m.slots[j]
		i = j
	}
	m.slots[i] = u64slot{}
	m.used--
	if underLoaded(m.used, len(m.slots)) {
		m.resize(shrunkSize(len(m.slots)))
	}
	return val, true
}

// each calls f for every key and value; f must not modify m.
func (m *u64map) each(f func(key, val uint64)) {
	if m.hasZero {
		f(0, m.zeroVal)
	}
	for _, s := range m.slots {
		if s.key != 0 {
			f(s.key, s.val)
		}
	}
}

// deleteIf removes every key for which drop returns true.
func (m *u64map) deleteIf(drop func(key, val uint64) bool) {
	if m.hasZero && drop(0, m.zeroVal) {
		m.zeroVal, m.hasZero = 0, false
	}
	var kill []uint64
	for _, s := range m.slots {
		if s.key != 0 && drop(s.key, s.val) {
			kill = append(kill, s.key)
		}
	}
	for _, k := range kill {
		m.del(k)
	}
}

// reset empties m, giving large tables' memory back.
func (m *u64map) reset() {
	if len(m.slots) > 1024 {
		*m = newU64map()
		return
	}
	clear(m.slots)
	m.used, m.zeroVal, m.hasZero = 0, 0, false
}

// prefetch loads the home slot of every key and returns a value derived from them. Issued as
// one batch of independent loads, the cache misses overlap (memory-level parallelism), so the
// dependent probes that follow find their slots in cache. Callers must consume the result so
// that the compiler keeps the loads.
func (m *u64map) prefetch(keys []uint64) uint64 {
	var acc uint64
	for _, k := range keys {
		h := m.home(k)
		// The next slot too: a probe or a backward shift usually reads it, and it lies on
		// the next cache line when h is a line's last slot.
		acc += m.slots[h].key + m.slots[m.next(h)].key
	}
	return acc
}

// mix scrambles a key before taking its top bits as a slot index. Engine hashes may be small
// or sequential (simulators, folded digests), which Fibonacci hashing alone clusters.
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}
