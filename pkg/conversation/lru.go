package conversation

import (
	"sync"
	"time"
)

// lru is the memory store's algorithm without its locking (STYLE.md rule 10): entries keyed by
// string, each with a size, in least-recently-used order, dropped when unused for ttl or, least
// recently used first, when their sizes add up past maxBytes. Used by one goroutine at a time.
type lru struct {
	maxBytes int
	ttl      time.Duration
	bytes    int
	m        map[string]*lruEntry
	// root is the sentinel of the ring: root.next is the most recently used entry, root.prev
	// the least.
	root lruEntry
	// evicted is told the reason of every entry dropped by the bounds ("ttl", "bytes").
	evicted func(reason string)
}

type lruEntry struct {
	key        string
	val        any
	size       int
	used       time.Time
	prev, next *lruEntry
}

func newLRU(maxBytes int, ttl time.Duration, evicted func(string)) *lru {
	l := &lru{maxBytes: maxBytes, ttl: ttl, m: map[string]*lruEntry{}, evicted: evicted}
	l.root.next, l.root.prev = &l.root, &l.root
	return l
}

func (l *lru) unlink(e *lruEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (l *lru) pushFront(e *lruEntry) {
	e.prev, e.next = &l.root, l.root.next
	l.root.next.prev = e
	l.root.next = e
}

// get returns the live value of key and renews it.
func (l *lru) get(key string, now time.Time) (any, bool) {
	e, ok := l.m[key]
	if !ok {
		return nil, false
	}
	if l.expired(e, now) {
		l.drop(e, "ttl")
		return nil, false
	}
	e.used = now
	l.unlink(e)
	l.pushFront(e)
	return e.val, true
}

func (l *lru) expired(e *lruEntry, now time.Time) bool {
	return l.ttl > 0 && now.Sub(e.used) >= l.ttl
}

// put sets key to val of the given size, renewed, then applies the bounds.
func (l *lru) put(key string, val any, size int, now time.Time) {
	if e, ok := l.m[key]; ok {
		l.bytes += size - e.size
		e.val, e.size, e.used = val, size, now
		l.unlink(e)
		l.pushFront(e)
	} else {
		e := &lruEntry{key: key, val: val, size: size, used: now}
		l.m[key] = e
		l.bytes += size
		l.pushFront(e)
	}
	l.trim(now)
}

// resize changes the size of a live entry (a conversation that grew) and applies the bounds.
func (l *lru) resize(key string, size int, now time.Time) {
	if e, ok := l.m[key]; ok {
		l.bytes += size - e.size
		e.size = size
		l.trim(now)
	}
}

// remove drops key and reports whether it was live.
func (l *lru) remove(key string, now time.Time) bool {
	e, ok := l.m[key]
	if !ok {
		return false
	}
	live := !l.expired(e, now)
	l.unlink(e)
	delete(l.m, key)
	l.bytes -= e.size
	return live
}

// drop removes e for reason (an eviction).
func (l *lru) drop(e *lruEntry, reason string) {
	l.unlink(e)
	delete(l.m, e.key)
	l.bytes -= e.size
	if l.evicted != nil {
		l.evicted(reason)
	}
}

// trim drops expired entries (the least recently used are the first to expire) and then the
// least recently used until the sizes fit maxBytes.
func (l *lru) trim(now time.Time) {
	for e := l.root.prev; e != &l.root && l.expired(e, now); e = l.root.prev {
		l.drop(e, "ttl")
	}
	for l.maxBytes > 0 && l.bytes > l.maxBytes && l.root.prev != &l.root {
		l.drop(l.root.prev, "bytes")
	}
}

func (l *lru) len() int { return len(l.m) }

// recordCache is a replica's copy of stored records it wrote or read (the Redis store's, for
// chains: a record is never modified once stored), bounded by bytes and the store's TTL.
// A nil cache holds nothing. Safe for concurrent use; must not be copied.
type recordCache struct {
	// mu guards l.
	mu sync.Mutex
	l  *lru
}

// newRecordCache returns a cache of maxBytes, nil when maxBytes is negative.
func newRecordCache(maxBytes int, ttl time.Duration) *recordCache {
	if maxBytes < 0 {
		return nil
	}
	return &recordCache{l: newLRU(maxBytes, ttl, nil)}
}

func (c *recordCache) get(scope, id string) *Record {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.l.get(respKey(scope, id), time.Now())
	if !ok {
		return nil
	}
	return v.(*Record)
}

func (c *recordCache) put(scope string, r *Record) {
	if c == nil || r.size() > c.l.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l.put(respKey(scope, r.ID), r, r.size(), time.Now())
}

func (c *recordCache) remove(scope, id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l.remove(respKey(scope, id), time.Now())
}
