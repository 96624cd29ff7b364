package indexer

import (
	"fmt"
	"sync"
	"time"
)

// PendingConfig configures a Pending overlay. Zero fields take the documented defaults.
type PendingConfig struct {
	// TTL is how long a "routed here" entry counts. It should cover the time from routing to
	// the engine's first stored event (prefill plus event batching). Default 5s.
	TTL time.Duration `yaml:"ttl" json:"ttl"`
	// MaxEntries bounds the number of block keys remembered; the oldest go first. Default 65536.
	MaxEntries int `yaml:"max_entries" json:"max_entries"`
	// Now is the clock; nil means time.Now. It is called without locks held, so it must be safe
	// for concurrent use.
	Now func() time.Time `yaml:"-" json:"-"`
}

// pendingWays is how many workers one key can be pending on at once. A burst of identical new
// prompts lands on one worker (that is the point), so a few ways suffice; past that the entry
// expiring first is replaced.
const pendingWays = 4

// pendingRecord is one Add of key, expiring at exp.
type pendingRecord struct {
	key uint64
	exp int64
}

type pendingEntry struct {
	n   uint8
	ws  [pendingWays]WorkerID
	exp [pendingWays]int64 // unix ns
}

// Pending is the pending overlay of DESIGN.md §4: block keys the gateway just routed to a
// worker, before that worker's stored events can arrive, so identical new prompts co-locate.
//
// Entries are confirmed by the index rather than by Pending itself: the router takes, per
// worker, the larger of Index.Match and Pending.Match (MergeMatches), so once the index holds
// the keys the entry adds nothing and simply expires after TTL. If the engine never stores the
// blocks, the overlay overstates that worker for at most TTL. Memory is bounded by MaxEntries.
// Safe for concurrent use; Match takes a read lock. Pending must not be copied.
type Pending struct {
	ttl int64
	now func() time.Time

	// mu guards m and the FIFO ring of keys in insertion order (which is expiry order, since
	// the TTL is fixed); a key re-added later appears in the ring again.
	mu         sync.RWMutex
	m          map[uint64]pendingEntry
	ring       []pendingRecord
	head, size int
}

// NewPending returns an empty Pending configured by cfg. It starts no goroutines.
func NewPending(cfg PendingConfig) (*Pending, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 5 * time.Second
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 65536
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TTL < 0 || cfg.MaxEntries < 1 {
		return nil, fmt.Errorf("indexer: new pending: ttl %v, max entries %d: %w", cfg.TTL, cfg.MaxEntries, ErrInvalidConfig)
	}
	return &Pending{
		ttl: int64(cfg.TTL), now: cfg.Now,
		m: make(map[uint64]pendingEntry), ring: make([]pendingRecord, cfg.MaxEntries),
	}, nil
}

// Add records that the request with block keys keys was routed to worker w: for TTL, Match
// reports those keys as held by w.
func (p *Pending) Add(w WorkerID, keys []uint64) {
	if len(keys) == 0 {
		return
	}
	now := p.now().UnixNano()
	exp := now + p.ttl
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked(now)
	for _, k := range keys {
		e := p.m[k]
		i := 0
		for i < int(e.n) && e.ws[i] != w {
			i++
		}
		if i == int(e.n) {
			if e.n < pendingWays {
				e.n++
			} else {
				i = 0
				for j := 1; j < pendingWays; j++ {
					if e.exp[j] < e.exp[i] {
						i = j
					}
				}
			}
		}
		e.ws[i], e.exp[i] = w, exp
		p.m[k] = e
		if p.size == len(p.ring) {
			// Full: the oldest key goes, even if it was refreshed since.
			delete(p.m, p.ring[p.head].key)
			p.head = (p.head + 1) % len(p.ring)
			p.size--
		}
		p.ring[(p.head+p.size)%len(p.ring)] = pendingRecord{k, exp}
		p.size++
	}
}

// expireLocked pops the expired records at the front of the ring (FIFO order is expiry
// order) and forgets their keys unless a later Add refreshed them.
func (p *Pending) expireLocked(now int64) {
	for p.size > 0 && p.ring[p.head].exp <= now {
		k := p.ring[p.head].key
		if e, ok := p.m[k]; ok {
			latest := int64(0)
			for i := range int(e.n) {
				latest = max(latest, e.exp[i])
			}
			if latest <= now {
				delete(p.m, k)
			}
		}
		p.head = (p.head + 1) % len(p.ring)
		p.size--
	}
}

// Len returns the number of keys remembered, expired ones included until the next Add.
func (p *Pending) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.m)
}

// RemoveWorker forgets every entry of worker w.
func (p *Pending) RemoveWorker(w WorkerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.m {
		for i := 0; i < int(e.n); i++ {
			if e.ws[i] == w {
				e.n--
				e.ws[i], e.exp[i] = e.ws[e.n], e.exp[e.n]
				i--
			}
		}
		if e.n == 0 {
			delete(p.m, k)
		} else {
			p.m[k] = e
		}
	}
}

// Match appends to dst[:0] every worker with a live entry for keys[0], with the number of
// leading keys it has live entries for, and returns the slice. Workers come in no particular
// order. It allocates nothing when dst has room for the matched workers.
func (p *Pending) Match(keys []uint64, dst []WorkerMatch) []WorkerMatch {
	dst = dst[:0]
	if len(keys) == 0 {
		return dst
	}
	now := p.now().UnixNano()
	p.mu.RLock()
	defer p.mu.RUnlock()
	e := p.m[keys[0]]
	for i := range int(e.n) {
		if e.exp[i] > now {
			dst = append(dst, WorkerMatch{Worker: e.ws[i], Blocks: 1})
		}
	}
	alive := len(dst)
	for i := 1; i < len(keys) && alive > 0; i++ {
		e = p.m[keys[i]]
		for j := range dst {
			if dst[j].Blocks != i {
				continue
			}
			live := false
			for k := range int(e.n) {
				if e.ws[k] == dst[j].Worker && e.exp[k] > now {
					live = true
					break
				}
			}
			if live {
				dst[j].Blocks++
			} else {
				alive--
			}
		}
	}
	return dst
}
