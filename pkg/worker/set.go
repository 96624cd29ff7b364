package worker

import (
	"errors"
	"fmt"
)

// ErrDuplicate is returned by Set.With when the URL is already in the set.
var ErrDuplicate = errors.New("worker already exists")

// ErrNotFound is returned by Set.Without when no worker has the URL.
var ErrNotFound = errors.New("worker not found")

// Set is an immutable snapshot of the fleet, in insertion order. Readers load it through an
// atomic.Pointer and never lock; changes build a new Set with With or Without. The zero value
// and nil are empty sets.
type Set struct {
	workers []*Worker
	byURL   map[string]*Worker
}

// NewSet returns a set of ws in order. It fails on a duplicate URL.
func NewSet(ws ...*Worker) (*Set, error) {
	s := &Set{workers: make([]*Worker, 0, len(ws)), byURL: make(map[string]*Worker, len(ws))}
	for _, w := range ws {
		if _, dup := s.byURL[w.URL()]; dup {
			return nil, fmt.Errorf("worker: set: %s: %w", w.URL(), ErrDuplicate)
		}
		s.workers = append(s.workers, w)
		s.byURL[w.URL()] = w
	}
	return s, nil
}

// All returns the workers in order. The slice is shared: callers must not modify it.
func (s *Set) All() []*Worker {
	if s == nil {
		return nil
	}
	return s.workers
}

// Len returns the number of workers.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.workers)
}

// Get returns the worker with the normalized URL, or nil.
func (s *Set) Get(url string) *Worker {
	if s == nil {
		return nil
	}
	return s.byURL[url]
}

// With returns a new set with w appended; s is unchanged.
func (s *Set) With(w *Worker) (*Set, error) {
	if s.Get(w.URL()) != nil {
		return nil, fmt.Errorf("worker: set: %s: %w", w.URL(), ErrDuplicate)
	}
	return NewSet(append(append(make([]*Worker, 0, s.Len()+1), s.All()...), w)...)
}

// Without returns a new set without the worker of url, and that worker; s is unchanged.
func (s *Set) Without(url string) (*Set, *Worker, error) {
	old := s.Get(url)
	if old == nil {
		return nil, nil, fmt.Errorf("worker: set: %s: %w", url, ErrNotFound)
	}
	ws := make([]*Worker, 0, s.Len())
	for _, w := range s.All() {
		if w != old {
			ws = append(ws, w)
		}
	}
	ns, err := NewSet(ws...)
	return ns, old, err
}

// Healthy appends to dst the healthy workers serving model (see Worker.Serves) and returns it.
func (s *Set) Healthy(dst []*Worker, model, def string) []*Worker {
	for _, w := range s.All() {
		if w.Healthy() && w.Serves(model, def) {
			dst = append(dst, w)
		}
	}
	return dst
}
