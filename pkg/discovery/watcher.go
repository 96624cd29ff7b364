package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/worker"
)

// Defaults of Config fields left zero.
const (
	DefaultInterval = 5 * time.Second
	DefaultTimeout  = 3 * time.Second
)

// Config configures a Watcher.
type Config struct {
	// Interval is how often every name is resolved again (default 5 s, --discover-interval).
	Interval time.Duration
	// Timeout bounds one name's lookup (default 3 s, at most Interval).
	Timeout time.Duration
	// Resolver answers the lookups (nil: net.DefaultResolver, the system's; NewResolver for one
	// server).
	Resolver Resolver
	// Logger receives the changes and failures (nil: none).
	Logger *zap.Logger
	// Registerer receives the metrics kvgate_discovery_* (nil: not registered).
	Registerer prometheus.Registerer
}

// Update receives the worker specs one name resolves to now, under the origin of its spec
// (Spec.Origin), after every successful lookup (changed or not, so that an owner that lost a
// worker gets it back), and nil once a spec is no longer watched. It is called from Run's
// goroutine, one call at a time. The router's SyncWorkers is one.
type Update func(origin string, specs []worker.Spec) error

// Watcher re-resolves a set of Specs every Interval (and at once when the set changes) and
// reports each one's workers to Update. Build it with New; it must not be copied. Set is safe
// from any goroutine; Run owns the lookups.
type Watcher struct {
	cfg    Config
	update Update
	log    *zap.Logger
	met    *metrics
	poke   chan struct{}

	// mu guards specs, the set Set gave last.
	mu    sync.Mutex
	specs []Spec
}

// New validates cfg and returns a Watcher with no specs. It starts nothing.
func New(cfg Config, update Update) (*Watcher, error) {
	if update == nil {
		return nil, errors.New("discovery: new: nil update")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = min(DefaultTimeout, cfg.Interval)
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, errors.New("discovery: new: interval and timeout must not be negative")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Watcher{cfg: cfg, update: update, log: cfg.Logger, met: met, poke: make(chan struct{}, 1)}, nil
}

// Set replaces the watched specs; Run resolves the new set at once, and reports nil for the
// names no longer watched (their workers drain). Two specs of one name are an error (their
// workers would share an origin), and the set in force stays.
func (w *Watcher) Set(specs []Spec) error {
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.Name] {
			return fmt.Errorf("discovery: dns=%s is discovered twice: %w", s.Name, ErrInvalidSpec)
		}
		seen[s.Name] = true
	}
	w.mu.Lock()
	w.specs = slices.Clone(specs)
	w.mu.Unlock()
	select {
	case w.poke <- struct{}{}:
	default: // a resolution is already due
	}
	return nil
}

func (w *Watcher) current() []Spec {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.specs
}

// state is what Run remembers of one watched spec.
type state struct {
	spec    Spec
	failing bool   // the last lookup failed (logged once per streak)
	updErr  string // the last Update error (logged when it changes)
}

// Run resolves the specs until ctx is done, then returns nil. It must be called once.
func (w *Watcher) Run(ctx context.Context) error {
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	known := map[string]*state{} // by Spec.key
	for {
		w.round(ctx, known)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-w.poke:
		}
	}
}

// result is one lookup of a round.
type result struct {
	st    *state
	addrs []Address
	err   error
}

// round resolves every current spec concurrently (each bounded by Timeout), then reports the
// answers and the specs that are gone, in the order of the set.
func (w *Watcher) round(ctx context.Context, known map[string]*state) {
	specs := w.current()
	live := make(map[string]bool, len(specs))
	results := make([]result, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		k := s.key()
		live[k] = true
		st := known[k]
		if st == nil {
			st = &state{spec: s}
			known[k] = st
		}
		results[i].st = st
		wg.Add(1)
		go func(r *result) {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
			defer cancel()
			r.addrs, r.err = lookup(lctx, w.cfg.Resolver, r.st.spec)
		}(&results[i])
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: a cancelled lookup is not a DNS failure
	}
	for k, st := range known {
		if live[k] {
			continue
		}
		delete(known, k)
		// A name still watched under another template keeps its origin: the new spec's
		// answer replaces the old one's workers rather than draining them first.
		if !slices.ContainsFunc(specs, func(s Spec) bool { return s.Name == st.spec.Name }) {
			w.report(st, nil)
			w.met.forget(st.spec.Name)
		}
		w.log.Info("discovery: no longer watching", zap.String("dns", st.spec.Name))
	}
	for _, r := range results {
		w.apply(r)
	}
}

// apply reports one lookup: a failure keeps the last good set, an answer becomes workers.
func (w *Watcher) apply(r result) {
	st, name := r.st, r.st.spec.Name
	if r.err != nil {
		w.met.lookup(name, outcomeError)
		if !st.failing {
			w.log.Warn("discovery: lookup failed; keeping the workers of the last answer", zap.String("dns", name), zap.Error(r.err))
		}
		st.failing = true
		return
	}
	if st.failing {
		w.log.Info("discovery: lookup answers again", zap.String("dns", name))
		st.failing = false
	}
	specs := make([]worker.Spec, 0, len(r.addrs))
	seen := map[string]bool{}
	for _, a := range r.addrs {
		ws, err := st.spec.Expand(a)
		if err != nil {
			w.log.Warn("discovery: address makes no valid worker", zap.String("dns", name), zap.Stringer("address", a), zap.Error(err))
			continue
		}
		if !seen[ws.URL] { // two addresses of one worker (say an SRV target twice)
			seen[ws.URL] = true
			specs = append(specs, ws)
		}
	}
	if len(specs) == 0 {
		w.met.lookup(name, outcomeEmpty)
	} else {
		w.met.lookup(name, outcomeOK)
	}
	w.met.answered(name, len(specs))
	w.report(st, specs)
}

// report hands st's workers to Update, logging a failure once until it changes.
func (w *Watcher) report(st *state, specs []worker.Spec) {
	msg := ""
	if err := w.update(st.spec.Origin(), specs); err != nil {
		msg = err.Error()
		if msg != st.updErr {
			w.log.Warn("discovery: workers not updated", zap.String("dns", st.spec.Name), zap.Error(err))
		}
	}
	st.updErr = msg
}
