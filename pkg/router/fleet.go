package router

import (
	"errors"
	"fmt"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
	"go.uber.org/zap"
)

// fleet is one immutable snapshot of the workers.
type fleet struct {
	members []*member
	byURL   map[string]*member
	// byHost maps host:port of each worker URL to the worker, for the --kv-listen topics
	// kv@<host:port>@<model>.
	byHost map[string]*member
}

// newFleet builds a snapshot of ms.
func newFleet(ms []*member) *fleet {
	f := &fleet{members: ms, byURL: make(map[string]*member, len(ms)), byHost: make(map[string]*member, len(ms))}
	for _, m := range ms {
		f.byURL[m.w.URL()] = m
		if h := m.topicHost(); h != "" {
			f.byHost[h] = m
		}
	}
	return f
}

// members returns the current fleet, in insertion order; callers must not modify the slice.
func (rt *Router) members() []*member { return rt.fleet.Load().members }

// Workers returns the current workers in insertion order.
func (rt *Router) Workers() []*worker.Worker {
	ms := rt.members()
	ws := make([]*worker.Worker, len(ms))
	for i, m := range ms {
		ws[i] = m.w
	}
	return ws
}

// AddWorker adds a worker. Before Run it is started when Run starts; during Run its health
// checks and event stream start at once. The worker receives requests after its first
// successful health check. It fails for an invalid spec or a duplicate URL.
func (rt *Router) AddWorker(spec worker.Spec) (*worker.Worker, error) {
	w, err := worker.New(spec)
	if err != nil {
		return nil, err
	}
	m, err := newMember(rt, w)
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.stopped {
		m.close()
		return nil, errors.New("router: add worker: router stopped")
	}
	old := rt.fleet.Load()
	if _, dup := old.byURL[w.URL()]; dup {
		m.close()
		return nil, fmt.Errorf("router: add worker %s: %w", w.URL(), worker.ErrDuplicate)
	}
	m.ids = rt.allocIDsLocked(w.Spec().DPSize)
	m.sink = &kvbridge.SinkConsumer{Sink: rt.cfg.Index, IDs: m.ids}
	rt.fleet.Store(newFleet(append(append(make([]*member, 0, len(old.members)+1), old.members...), m)))
	if rt.runCtx != nil {
		rt.startLocked(m)
	}
	rt.log.Info("worker added", zap.String("worker", w.URL()), zap.String("kind", w.Kind().String()),
		zap.String("events", w.Spec().EventEndpoint()), zap.Int("dp_size", w.Spec().DPSize))
	return w, nil
}

// RemoveWorker removes the worker with the given URL (normalized as in a spec): it stops
// receiving requests at once, its health checks and event stream stop, and its blocks leave the
// index and the tree. It waits for the worker's goroutines to exit.
func (rt *Router) RemoveWorker(url string) error {
	if s, err := (worker.Spec{URL: url}).Normalize(); err == nil {
		url = s.URL
	}
	rt.mu.Lock()
	old := rt.fleet.Load()
	m, ok := old.byURL[url]
	if !ok {
		rt.mu.Unlock()
		return fmt.Errorf("router: remove worker %s: %w", url, worker.ErrNotFound)
	}
	rest := make([]*member, 0, len(old.members))
	for _, o := range old.members {
		if o != m {
			rest = append(rest, o)
		}
	}
	rt.fleet.Store(newFleet(rest))
	rt.mu.Unlock()

	m.stop()              // cancels and joins the worker's goroutines; no lock held
	m.removed.Store(true) // the --kv-listen collector delivers no more into its IDs...
	rt.syncCollector()    // ...once the delivery it may be in has returned
	for _, id := range m.ids {
		rt.cfg.Index.RemoveWorker(id)
		if rt.cfg.Tree != nil {
			rt.cfg.Tree.RemoveWorker(id)
		}
		if rt.cfg.Pending != nil {
			rt.cfg.Pending.RemoveWorker(id)
		}
	}
	if rt.cfg.KVMetrics != nil {
		rt.cfg.KVMetrics.Forget(m.w.URL())
	}
	m.close()
	rt.mu.Lock()
	rt.freeIDs = append(rt.freeIDs, m.ids...)
	rt.mu.Unlock()
	rt.log.Info("worker removed", zap.String("worker", url))
	return nil
}

// allocIDsLocked hands out n dense WorkerIDs, reusing freed ones first.
func (rt *Router) allocIDsLocked(n int) []indexer.WorkerID {
	ids := make([]indexer.WorkerID, n)
	for i := range ids {
		if k := len(rt.freeIDs); k > 0 {
			ids[i] = rt.freeIDs[k-1]
			rt.freeIDs = rt.freeIDs[:k-1]
			continue
		}
		ids[i] = rt.nextID
		rt.nextID++
	}
	return ids
}
