package conversation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of MemoryConfig fields left zero.
const (
	DefaultMaxBytes = 256 << 20
	DefaultTTL      = 24 * time.Hour
)

// MemoryConfig configures a Memory store.
type MemoryConfig struct {
	// MaxBytes bounds what the store holds (records' and conversations' bytes, counted as
	// stored); past it the least recently used go first (default 256 MiB).
	MaxBytes int
	// TTL is how long an entry nobody reads or writes is kept (default 24 h).
	TTL time.Duration
	// Registerer receives the store's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// ErrTooLarge is returned by Memory for a single record or conversation larger than its
// MaxBytes: it could never be kept.
var ErrTooLarge = errors.New("conversation: entry larger than the store's bound")

// Memory is the in-process Store of one gateway replica: bounded by bytes and a TTL since last
// use, least recently used dropped first (counted in kvgate_responses_store_evictions_total).
// Its state is lost on restart and not shared with other replicas: use Redis for those. Safe
// for concurrent use; must not be copied.
type Memory struct {
	now func() time.Time
	met *storeMetrics
	// mu guards l and every conversation entry in it.
	mu sync.Mutex
	l  *lru
}

// convEntry is a stored conversation: its metadata and items (canonical JSON each).
type convEntry struct {
	c     *Conversation
	items [][]byte
	size  int
}

// NewMemory validates cfg and returns an empty store.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if cfg.MaxBytes < 0 || cfg.TTL < 0 {
		return nil, errors.New("conversation: memory store: max bytes and ttl must not be negative")
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	met, err := newStoreMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Memory{now: cfg.Now, met: met}
	m.l = newLRU(cfg.MaxBytes, cfg.TTL, func(reason string) { met.evictions.WithLabelValues(reason).Inc() })
	return m, nil
}

func respKey(scope, id string) string { return scope + "\x00r\x00" + id }
func convKey(scope, id string) string { return scope + "\x00c\x00" + id }

// publishLocked updates the size gauges.
func (m *Memory) publishLocked() {
	m.met.bytes.Set(float64(m.l.bytes))
	m.met.entries.Set(float64(m.l.len()))
}

// GetResponses implements Store.
func (m *Memory) GetResponses(_ context.Context, scope string, ids []string) ([]*Record, error) {
	out := make([]*Record, len(ids))
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range ids {
		if v, ok := m.l.get(respKey(scope, id), now); ok {
			out[i] = v.(*Record)
		}
	}
	m.publishLocked()
	return out, nil
}

// GetChain implements Store.
func (m *Memory) GetChain(_ context.Context, scope, id string) ([]*Record, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.publishLocked()
	v, ok := m.l.get(respKey(scope, id), now)
	if !ok {
		return nil, nil
	}
	head := v.(*Record)
	out := make([]*Record, len(head.Ancestors)+1)
	for i, a := range head.Ancestors {
		if v, ok := m.l.get(respKey(scope, a), now); ok {
			out[i] = v.(*Record)
		}
	}
	out[len(out)-1] = head
	return out, nil
}

// PutResponse implements Store.
func (m *Memory) PutResponse(_ context.Context, scope string, rec *Record) error {
	size := rec.size()
	if size > m.l.maxBytes {
		return fmt.Errorf("%w: response %s is %d bytes, the bound %d", ErrTooLarge, rec.ID, size, m.l.maxBytes)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.l.put(respKey(scope, rec.ID), rec, size, m.now())
	m.publishLocked()
	return nil
}

// DeleteResponse implements Store.
func (m *Memory) DeleteResponse(_ context.Context, scope, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := m.l.remove(respKey(scope, id), m.now())
	m.publishLocked()
	return ok, nil
}

// convLocked returns the live conversation entry of id.
func (m *Memory) convLocked(scope, id string) *convEntry {
	v, ok := m.l.get(convKey(scope, id), m.now())
	if !ok {
		return nil
	}
	return v.(*convEntry)
}

// GetConversation implements Store.
func (m *Memory) GetConversation(_ context.Context, scope, id string) (*Conversation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.convLocked(scope, id); e != nil {
		c := *e.c
		return &c, nil
	}
	return nil, nil
}

// PutConversation implements Store.
func (m *Memory) PutConversation(_ context.Context, scope string, c *Conversation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cc := *c
	e := m.convLocked(scope, c.ID)
	if e == nil {
		e = &convEntry{}
	}
	e.size += len(cc.Metadata) - metaSize(e.c)
	e.c = &cc
	if e.size+64 > m.l.maxBytes {
		return fmt.Errorf("%w: conversation %s", ErrTooLarge, c.ID)
	}
	m.l.put(convKey(scope, c.ID), e, e.size+64, m.now())
	m.publishLocked()
	return nil
}

func metaSize(c *Conversation) int {
	if c == nil {
		return 0
	}
	return len(c.Metadata)
}

// ConversationItems implements Store.
func (m *Memory) ConversationItems(_ context.Context, scope, id string) ([][]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.convLocked(scope, id)
	if e == nil {
		return nil, false, nil
	}
	return append([][]byte(nil), e.items...), true, nil
}

// AppendItems implements Store.
func (m *Memory) AppendItems(_ context.Context, scope, id string, items [][]byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.convLocked(scope, id)
	if e == nil {
		return false, nil
	}
	add := 0
	for _, it := range items {
		add += len(it) + 16
	}
	if e.size+add+64 > m.l.maxBytes {
		return true, fmt.Errorf("%w: conversation %s would hold %d bytes", ErrTooLarge, id, e.size+add)
	}
	e.items = append(e.items, items...)
	e.size += add
	m.l.resize(convKey(scope, id), e.size+64, m.now())
	m.publishLocked()
	return true, nil
}

// DeleteItem implements Store.
func (m *Memory) DeleteItem(_ context.Context, scope, id, itemID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.convLocked(scope, id)
	if e == nil {
		return false, nil
	}
	for i, it := range e.items {
		if itemIDOf(it) == itemID {
			e.size -= len(it) + 16
			e.items = append(e.items[:i:i], e.items[i+1:]...)
			m.l.resize(convKey(scope, id), e.size+64, m.now())
			m.publishLocked()
			return true, nil
		}
	}
	return false, nil
}

// DeleteConversation implements Store.
func (m *Memory) DeleteConversation(_ context.Context, scope, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := m.l.remove(convKey(scope, id), m.now())
	m.publishLocked()
	return ok, nil
}

var _ Store = (*Memory)(nil)
