package router

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Origins of workers, as GET /workers shows them; a DNS discovery names its own ("dns NAME").
const (
	OriginFlag  = "flag"  // --worker flags
	OriginFile  = "file"  // the --config file's workers (top level and per model)
	OriginAdmin = "admin" // POST /workers, and AddWorker
)

// fleet is one immutable snapshot of the workers and the models they are routed under.
type fleet struct {
	// members are the serving workers, in insertion order; draining the workers that left
	// and finish their in-flight requests (drain.go), shown by /workers but never routed to.
	members  []*member
	draining []*member
	byURL    map[string]*member
	// byHost maps host:port of each worker URL to the worker, for the --kv-listen topics
	// kv@<host:port>@<model>.
	byHost map[string]*member
	// def is the default pool; models the configured models' pools by name, modelNames their
	// names in configuration order.
	def        *pool
	models     map[string]*pool
	modelNames []string
}

// with returns a snapshot like f with other members and draining workers.
func (f *fleet) with(ms, draining []*member) *fleet {
	n := &fleet{members: ms, draining: draining, byURL: make(map[string]*member, len(ms)), byHost: make(map[string]*member, len(ms)),
		def: f.def, models: f.models, modelNames: f.modelNames}
	for _, m := range ms {
		n.byURL[m.w.URL()] = m
		if h := m.topicHost(); h != "" {
			n.byHost[h] = m
		}
	}
	return n
}

// members returns the serving workers, in insertion order; callers must not modify the slice.
func (rt *Router) members() []*member { return rt.fleet.Load().members }

// Workers returns the serving workers in insertion order (not those draining).
func (rt *Router) Workers() []*worker.Worker {
	ms := rt.members()
	ws := make([]*worker.Worker, len(ms))
	for i, m := range ms {
		ws[i] = m.w
	}
	return ws
}

// AddWorker adds a worker of origin OriginAdmin. Before Run it is started when Run starts;
// during Run its health checks and event stream start at once. The worker receives requests
// after its first successful health check. It fails for an invalid spec or a URL already in the
// fleet.
func (rt *Router) AddWorker(spec worker.Spec) (*worker.Worker, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.stopped {
		return nil, errors.New("router: add worker: router stopped")
	}
	if _, dup := rt.fleet.Load().byURL[spec.URL]; dup {
		return nil, fmt.Errorf("router: add worker %s: %w", spec.URL, worker.ErrDuplicate)
	}
	prev := rt.desired[OriginAdmin]
	rt.setDesiredLocked(OriginAdmin, append(slices.Clip(prev), spec))
	if err := rt.reconcileLocked(); err != nil {
		rt.setDesiredLocked(OriginAdmin, prev)
		return nil, err
	}
	m := rt.fleet.Load().byURL[spec.URL]
	if m == nil { // claimed by nothing: cannot happen, the URL was free
		return nil, fmt.Errorf("router: add worker %s: not added", spec.URL)
	}
	return m.w, nil
}

// SyncWorkers makes the fleet's workers of origin exactly specs (any origin string: OriginFlag,
// OriginFile, "dns NAME"): a new URL becomes a worker (health-checked, its events subscribed,
// replaying from 0), a URL no longer listed is drained (drain.go), and a URL whose spec changed,
// or whose model's pool did, is drained and started again with the new spec. A URL another
// origin holds stays with it (the first origin to list a URL owns it; this one's spec takes over
// should that one drop it). It is idempotent and cheap when nothing changed. An invalid spec or
// a URL listed twice fails the whole call and changes nothing.
func (rt *Router) SyncWorkers(origin string, specs []worker.Spec) error {
	norm := make([]worker.Spec, 0, len(specs))
	seen := make(map[string]bool, len(specs))
	for _, s := range specs {
		ns, err := s.Normalize()
		if err != nil {
			return fmt.Errorf("router: sync %s workers: %w", origin, err)
		}
		if seen[ns.URL] {
			return fmt.Errorf("router: sync %s workers: %s listed twice: %w", origin, ns.URL, worker.ErrDuplicate)
		}
		seen[ns.URL] = true
		norm = append(norm, ns)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.stopped {
		return errors.New("router: sync workers: router stopped")
	}
	prev, had := rt.desired[origin]
	rt.setDesiredLocked(origin, norm)
	if err := rt.reconcileLocked(); err != nil {
		if had {
			rt.setDesiredLocked(origin, prev)
		} else {
			rt.setDesiredLocked(origin, nil)
		}
		return err
	}
	return nil
}

// setDesiredLocked records origin's wanted workers, remembering the order origins first
// appeared in (which decides who owns a URL two of them list).
func (rt *Router) setDesiredLocked(origin string, specs []worker.Spec) {
	if _, ok := rt.desired[origin]; !ok {
		rt.origins = append(rt.origins, origin)
	}
	rt.desired[origin] = specs
}

// claim is the origin and spec that own one URL.
type claim struct {
	origin string
	spec   worker.Spec
}

// reconcileLocked moves the fleet to what the origins want, in the pools the current models
// give: it builds every new member first and fails, changing nothing, if one cannot be built;
// then it publishes the new snapshot, starts the new members and drains the ones that left.
func (rt *Router) reconcileLocked() error {
	old := rt.fleet.Load()
	want := map[string]claim{}
	var order []string
	for _, o := range rt.origins {
		for _, s := range rt.desired[o] {
			if c, taken := want[s.URL]; taken {
				if c.origin != o {
					rt.log.Debug("worker listed by two origins; the first keeps it", zap.String("worker", s.URL),
						zap.String("origin", c.origin), zap.String("ignored", o))
				}
				continue
			}
			want[s.URL] = claim{o, s}
			order = append(order, s.URL)
		}
	}
	keep := make(map[string]*member, len(old.members))
	var leave []*member
	for _, m := range old.members {
		c, ok := want[m.w.URL()]
		if ok && c.origin == m.origin && c.spec == m.w.Spec() && old.poolFor(c.spec) == m.pool {
			keep[m.w.URL()] = m
			continue
		}
		leave = append(leave, m)
	}
	var added []*member
	fail := func(err error) error {
		for _, m := range added {
			m.close()
		}
		return err
	}
	next := make([]*member, 0, len(order))
	for _, m := range old.members { // kept members stay in their order; new ones follow
		if keep[m.w.URL()] == m {
			next = append(next, m)
		}
	}
	for _, u := range order {
		if keep[u] != nil {
			continue
		}
		c := want[u]
		w, err := worker.New(c.spec)
		if err != nil {
			return fail(err)
		}
		m, err := newMember(rt, w, old.poolFor(c.spec), c.origin)
		if err != nil {
			return fail(fmt.Errorf("router: worker %s: %w", u, err))
		}
		added = append(added, m)
		next = append(next, m)
	}
	if len(added) == 0 && len(leave) == 0 {
		return nil
	}
	for _, m := range added {
		m.ids = rt.allocIDsLocked(m.w.Spec().DPSize)
		m.sink = &kvbridge.SinkConsumer{Sink: m.pool.lookup.Index, IDs: m.ids}
	}
	rt.fleet.Store(old.with(next, append(slices.Clip(old.draining), leave...)))
	for _, m := range added {
		if rt.runCtx != nil {
			rt.startLocked(m)
		}
		rt.log.Info("worker added", zap.String("worker", m.w.URL()), zap.String("origin", m.origin), zap.String("kind", m.w.Kind().String()),
			zap.String("model", m.pool.name), zap.String("events", m.w.Spec().EventEndpoint()), zap.Int("dp_size", m.w.Spec().DPSize))
	}
	for _, m := range leave {
		rt.drainLocked(m)
	}
	return nil
}

// RemoveWorker removes the worker with the given URL (normalized as in a spec) at once, without
// draining: it stops receiving requests, its health checks and event stream stop, and its
// blocks leave the index and the tree. It waits for the worker's goroutines to exit. Its origin
// no longer lists it (a file or DNS origin lists it again on its next change or resolution); a
// URL another origin also lists passes to that one.
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
	rt.desired[m.origin] = slices.DeleteFunc(slices.Clone(rt.desired[m.origin]), func(s worker.Spec) bool { return s.URL == url })
	rest := slices.DeleteFunc(slices.Clone(old.members), func(o *member) bool { return o == m })
	rt.fleet.Store(old.with(rest, old.draining))
	if err := rt.reconcileLocked(); err != nil { // another origin's spec for the URL failed to build
		rt.log.Warn("worker removed; another origin's spec for it not started", zap.String("worker", url), zap.Error(err))
	}
	rt.mu.Unlock()
	rt.teardown(m)
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
