package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// KV index modes of Config.KVIndex (--kv-index).
const (
	// KVIndexAuto scores each worker that has a KV-event stream from the event index and the
	// others from the approximate tree.
	KVIndexAuto = "auto"
	// KVIndexOff scores every worker from the approximate tree and subscribes to no events
	// (the "approximate" baseline of DESIGN.md §9).
	KVIndexOff = "off"
)

// Origins of workers, as GET /workers shows them; a DNS discovery names its own ("dns NAME").
const (
	OriginFlag  = "flag"  // --worker flags
	OriginFile  = "file"  // the --config file's workers (top level and per model)
	OriginAdmin = "admin" // POST /workers, and AddWorker
)

// Defaults of Config fields left zero: a health check every 5 s with a 2 s timeout, 30 s for a
// leaving worker's in-flight requests, and the block size of DESIGN.md §3.
const (
	DefaultHealthInterval = 5 * time.Second
	DefaultHealthTimeout  = 2 * time.Second
	DefaultDrainTimeout   = 30 * time.Second
	DefaultBlockSize      = 16
)

// Config configures a Fleet. Zero durations take the documented defaults.
type Config struct {
	// KVIndex is KVIndexAuto (default) or KVIndexOff.
	KVIndex string
	// MaxInFlightPerWorker, when > 0, makes a worker at that many in-flight requests no
	// candidate (Selection.Full then tells the caller why).
	MaxInFlightPerWorker int
	// HealthInterval and HealthTimeout pace the health checks (default 5 s and 2 s).
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// EngineMetricsInterval, when > 0, scrapes each worker's own load (an http:// worker's
	// /metrics, a grpc:// worker's GetLoads) into worker.SetEngineLoad.
	EngineMetricsInterval time.Duration
	// DrainTimeout bounds how long a worker that leaves the fleet (SyncWorkers, a pool
	// replaced) may take to finish its in-flight requests before its streams stop and its
	// blocks leave the index (default 30 s).
	DrainTimeout time.Duration
	// KVListen, when set (tcp://*:PORT), binds one ZMQ SUB socket that publishers connect to;
	// batches are attributed to workers by topic kv@<host:port>@<model>.
	KVListen string

	// Logger receives lifecycle logs at info (nil: none). Registerer receives the per-worker
	// gauges (nil: not registered). KVMetrics is passed to the event sources (nil: none). Now
	// is the clock (nil: time.Now).
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	KVMetrics  *kvbridge.Metrics
	Now        func() time.Time
}

// Fleet is the set of workers the gateway routes to, grouped in one pool per model: where each
// worker came from (its origins), its engine client, health checks, engine-load scrapes and KV
// event source, and its drain when it leaves. Requests read it through Snapshot, an immutable
// value read without locks; every change builds a new one. Build it with New, add workers, and
// call Run for the background work.
//
// A Fleet must not be copied.
type Fleet struct {
	cfg  Config
	log  *zap.Logger
	snap atomic.Pointer[Snapshot]
	// transport is the HTTP transport shared by every http:// worker's engine.
	transport *http.Transport

	// mu guards the fields below and serialises fleet changes. It is never held while calling
	// a worker, running a source or updating the index; building a member (its engine client:
	// constructors, and reading its key and certificate files) and starting its goroutines
	// (which builds its event source: constructors only, no network I/O) happen under it, so
	// that one reconcile sees one fleet and Run and a reconcile cannot both start or both miss
	// a worker.
	mu      sync.Mutex
	nextID  indexer.WorkerID
	freeIDs []indexer.WorkerID
	runCtx  context.Context // nil until Run starts
	// started is when Run started (a stamp, clock.go; 0 before), read by Ready without the lock.
	started atomic.Int64
	epoch   time.Time      // the clock's reading in New, which stamps count from (clock.go)
	stopped bool           // Run has returned or is returning
	wg      sync.WaitGroup // per-worker goroutines and drains started under runCtx
	// desired holds each origin's wanted workers (SyncWorkers, AddWorker), origins the order
	// the origins first appeared in: the first to list a URL owns it.
	desired map[string][]worker.Spec
	origins []string

	// collector is the --kv-listen source (nil without one); set once by Run.
	collector atomic.Pointer[kvbridge.ZMQCollector]
}

// New validates cfg and the pools (pools[0] is the default pool: see PoolConfig) and returns a
// Fleet with no workers. It starts no goroutines.
func New(cfg Config, pools []PoolConfig) (*Fleet, error) {
	switch cfg.KVIndex {
	case "":
		cfg.KVIndex = KVIndexAuto
	case KVIndexAuto, KVIndexOff:
	default:
		return nil, fmt.Errorf("fleet: kv-index %q: want auto or off", cfg.KVIndex)
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = DefaultHealthTimeout
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.MaxInFlightPerWorker < 0 || cfg.HealthInterval < 0 || cfg.HealthTimeout < 0 || cfg.EngineMetricsInterval < 0 || cfg.DrainTimeout < 0 {
		return nil, errors.New("fleet: limits and intervals must not be negative")
	}
	if cfg.KVListen != "" && cfg.KVIndex == KVIndexOff {
		return nil, errors.New("fleet: --kv-listen needs --kv-index auto")
	}
	if len(pools) == 0 {
		return nil, errors.New("fleet: a default pool is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Fleet{cfg: cfg, log: cfg.Logger, epoch: cfg.Now(), transport: engine.NewTransport(), desired: map[string][]worker.Spec{}}
	s := &Snapshot{pools: map[string]*Pool{}}
	for i, pc := range pools {
		p, err := f.newPool(pc, i == 0, s.def)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			s.def = p
			continue
		}
		if s.pools[p.name] != nil {
			return nil, fmt.Errorf("fleet: pool %q configured twice", p.name)
		}
		s.pools[p.name] = p
		s.poolNames = append(s.poolNames, p.name)
	}
	f.snap.Store(s.with(nil, nil))
	if err := registerGauges(cfg.Registerer, f.Snapshot); err != nil {
		return nil, err
	}
	return f, nil
}

// startedAt returns when Run started (the zero time before).
func (f *Fleet) startedAt() time.Time {
	if t := f.started.Load(); t != 0 {
		return f.instant(t)
	}
	return time.Time{}
}

// Snapshot returns the fleet as it is now: immutable, safe to read from any goroutine.
func (f *Fleet) Snapshot() *Snapshot { return f.snap.Load() }

// KVIndex returns the KV index mode in force (KVIndexAuto or KVIndexOff).
func (f *Fleet) KVIndex() string { return f.cfg.KVIndex }

// Run runs the background work until ctx is done: per worker a health loop (with model
// discovery and engine-load scrapes) and its KV-event stream, plus the --kv-listen collector.
// It returns after every goroutine it started has exited. Run must be called at most once.
func (f *Fleet) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.runCtx != nil || f.stopped {
		f.mu.Unlock()
		return errors.New("fleet: run: already running")
	}
	f.runCtx = ctx
	f.started.Store(f.stamp(f.cfg.Now()))
	for _, m := range f.Snapshot().members {
		f.startLocked(m)
	}
	if f.cfg.KVListen != "" {
		if err := f.startCollectorLocked(ctx); err != nil {
			f.stopped = true
			f.mu.Unlock()
			f.stopAll()
			return err
		}
	}
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.stopAll()
	return nil
}

// stopAll joins every goroutine started under runCtx (which is done) and closes clients, of
// the serving and the draining workers.
func (f *Fleet) stopAll() {
	all := func() []*Member {
		s := f.Snapshot()
		return append(slices.Clone(s.members), s.draining...)
	}
	for _, m := range all() {
		m.stop()
	}
	f.wg.Wait()
	for _, m := range all() {
		m.close()
	}
	f.transport.CloseIdleConnections()
}

// startLocked starts m's goroutines under runCtx.
func (f *Fleet) startLocked(m *Member) {
	ctx, cancel := context.WithCancel(f.runCtx)
	m.start(ctx, cancel, &f.wg)
}

// Workers returns the serving workers in insertion order (not those draining).
func (f *Fleet) Workers() []*worker.Worker {
	ms := f.Snapshot().members
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
func (f *Fleet) AddWorker(spec worker.Spec) (*worker.Worker, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, errors.New("fleet: add worker: fleet stopped")
	}
	if _, dup := f.Snapshot().byURL[spec.URL]; dup {
		return nil, fmt.Errorf("fleet: add worker %s: %w", spec.URL, worker.ErrDuplicate)
	}
	prev := f.desired[OriginAdmin]
	f.setDesiredLocked(OriginAdmin, append(slices.Clip(prev), spec))
	if err := f.reconcileLocked(); err != nil {
		f.setDesiredLocked(OriginAdmin, prev)
		return nil, err
	}
	m := f.Snapshot().byURL[spec.URL]
	if m == nil { // claimed by nothing: cannot happen, the URL was free
		return nil, fmt.Errorf("fleet: add worker %s: not added", spec.URL)
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
func (f *Fleet) SyncWorkers(origin string, specs []worker.Spec) error {
	norm := make([]worker.Spec, 0, len(specs))
	seen := make(map[string]bool, len(specs))
	for _, s := range specs {
		ns, err := s.Normalize()
		if err != nil {
			return fmt.Errorf("fleet: sync %s workers: %w", origin, err)
		}
		if seen[ns.URL] {
			return fmt.Errorf("fleet: sync %s workers: %s listed twice: %w", origin, ns.URL, worker.ErrDuplicate)
		}
		seen[ns.URL] = true
		norm = append(norm, ns)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return errors.New("fleet: sync workers: fleet stopped")
	}
	prev, had := f.desired[origin]
	f.setDesiredLocked(origin, norm)
	if err := f.reconcileLocked(); err != nil {
		if had {
			f.setDesiredLocked(origin, prev)
		} else {
			f.setDesiredLocked(origin, nil)
		}
		return err
	}
	return nil
}

// setDesiredLocked records origin's wanted workers, remembering the order origins first
// appeared in (which decides who owns a URL two of them list).
func (f *Fleet) setDesiredLocked(origin string, specs []worker.Spec) {
	if _, ok := f.desired[origin]; !ok {
		f.origins = append(f.origins, origin)
	}
	f.desired[origin] = specs
}

// claim is the origin and spec that own one URL.
type claim struct {
	origin string
	spec   worker.Spec
}

// claimsLocked returns, in order, the URLs the origins want and who owns each.
func (f *Fleet) claimsLocked() (map[string]claim, []string) {
	want := map[string]claim{}
	var order []string
	for _, o := range f.origins {
		for _, s := range f.desired[o] {
			if c, taken := want[s.URL]; taken {
				if c.origin != o {
					f.log.Debug("worker listed by two origins; the first keeps it", zap.String("worker", s.URL),
						zap.String("origin", c.origin), zap.String("ignored", o))
				}
				continue
			}
			want[s.URL] = claim{o, s}
			order = append(order, s.URL)
		}
	}
	return want, order
}

// reconcileLocked moves the fleet to what the origins want, in the pools the current snapshot
// gives: it builds every new member first and fails, changing nothing, if one cannot be built;
// then it publishes the new snapshot, starts the new members and drains the ones that left.
func (f *Fleet) reconcileLocked() error {
	old := f.Snapshot()
	want, order := f.claimsLocked()
	keep := make(map[string]*Member, len(old.members))
	var leave []*Member
	for _, m := range old.members {
		c, ok := want[m.w.URL()]
		if ok && c.origin == m.origin && c.spec == m.w.Spec() && old.poolFor(c.spec) == m.pool {
			keep[m.w.URL()] = m
			continue
		}
		leave = append(leave, m)
	}
	next := make([]*Member, 0, len(order))
	for _, m := range old.members { // kept members stay in their order; new ones follow
		if keep[m.w.URL()] == m {
			next = append(next, m)
		}
	}
	var added []*Member
	for _, u := range order {
		if keep[u] != nil {
			continue
		}
		c := want[u]
		m, err := f.newMember(c.spec, old.poolFor(c.spec), c.origin)
		if err != nil {
			for _, a := range added {
				a.close()
			}
			return fmt.Errorf("fleet: worker %s: %w", u, err)
		}
		added = append(added, m)
		next = append(next, m)
	}
	if len(added) == 0 && len(leave) == 0 {
		return nil
	}
	for _, m := range added {
		m.setIDs(f.allocIDsLocked(m.w.Spec().DPSize))
	}
	f.snap.Store(old.with(next, append(slices.Clip(old.draining), leave...)))
	for _, m := range added {
		if f.runCtx != nil {
			f.startLocked(m)
		}
		f.log.Info("worker added", zap.String("worker", m.w.URL()), zap.String("origin", m.origin), zap.String("kind", m.w.Kind().String()),
			zap.String("model", m.pool.name), zap.String("events", m.w.Spec().EventEndpoint()), zap.Int("dp_size", m.w.Spec().DPSize))
	}
	for _, m := range leave {
		f.drainLocked(m)
	}
	return nil
}

// RemoveWorker removes the worker with the given URL (normalized as in a spec) at once, without
// draining: it stops receiving requests, its health checks and event stream stop, and its
// blocks leave the index and the tree. It waits for the worker's goroutines to exit. Its origin
// no longer lists it (a file or DNS origin lists it again on its next change or resolution); a
// URL another origin also lists passes to that one.
func (f *Fleet) RemoveWorker(url string) error {
	if s, err := (worker.Spec{URL: url}).Normalize(); err == nil {
		url = s.URL
	}
	f.mu.Lock()
	old := f.Snapshot()
	m, ok := old.byURL[url]
	if !ok {
		f.mu.Unlock()
		return fmt.Errorf("fleet: remove worker %s: %w", url, worker.ErrNotFound)
	}
	f.desired[m.origin] = slices.DeleteFunc(slices.Clone(f.desired[m.origin]), func(s worker.Spec) bool { return s.URL == url })
	rest := slices.DeleteFunc(slices.Clone(old.members), func(o *Member) bool { return o == m })
	f.snap.Store(old.with(rest, old.draining))
	if err := f.reconcileLocked(); err != nil { // another origin's spec for the URL failed to build
		f.log.Warn("worker removed; another origin's spec for it not started", zap.String("worker", url), zap.Error(err))
	}
	f.mu.Unlock()
	f.teardown(m)
	f.log.Info("worker removed", zap.String("worker", url))
	return nil
}

// allocIDsLocked hands out n dense WorkerIDs, reusing freed ones first.
func (f *Fleet) allocIDsLocked(n int) []indexer.WorkerID {
	ids := make([]indexer.WorkerID, n)
	for i := range ids {
		if k := len(f.freeIDs); k > 0 {
			ids[i] = f.freeIDs[k-1]
			f.freeIDs = f.freeIDs[:k-1]
			continue
		}
		ids[i] = f.nextID
		f.nextID++
	}
	return ids
}
