package fleet

import (
	"slices"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Snapshot is one immutable state of the fleet: the serving and draining workers and the pools
// they are routed in. Every method is a read of that state, safe from any goroutine.
type Snapshot struct {
	// members are the serving workers, in insertion order; draining the workers that left
	// and finish their in-flight requests (drain.go), shown by /workers but never routed to.
	members  []*Member
	draining []*Member
	byURL    map[string]*Member
	// byHost maps host:port of each worker URL to the worker, for the --kv-listen topics
	// kv@<host:port>@<model>.
	byHost map[string]*Member
	// byID[id] is the serving worker with that WorkerID among its DP ranks' (nil: none).
	byID []*Member
	// def is the default pool; pools the other pools by name, poolNames their names in
	// configuration order.
	def       *Pool
	pools     map[string]*Pool
	poolNames []string
}

// with returns a snapshot like s with other members and draining workers.
func (s *Snapshot) with(ms, draining []*Member) *Snapshot {
	n := &Snapshot{members: ms, draining: draining, byURL: make(map[string]*Member, len(ms)), byHost: make(map[string]*Member, len(ms)),
		def: s.def, pools: s.pools, poolNames: s.poolNames}
	for _, m := range ms {
		n.byURL[m.w.URL()] = m
		for _, id := range m.ids {
			if int(id) >= len(n.byID) {
				n.byID = slices.Grow(n.byID, int(id)+1-len(n.byID))[:id+1]
			}
			n.byID[id] = m
		}
		if h := m.topicHost(); h != "" {
			n.byHost[h] = m
		}
	}
	return n
}

// Members returns the serving workers, in insertion order; callers must not modify the slice.
func (s *Snapshot) Members() []*Member { return s.members }

// Draining returns the workers that left and are finishing their in-flight requests.
func (s *Snapshot) Draining() []*Member { return s.draining }

// Member returns the serving worker with the given (normalized) URL, or nil.
func (s *Snapshot) Member(url string) *Member { return s.byURL[url] }

// ByID returns the serving worker one of whose DP ranks has the WorkerID id, or nil.
func (s *Snapshot) ByID(id indexer.WorkerID) *Member {
	if int(id) < len(s.byID) {
		return s.byID[id]
	}
	return nil
}

// Pools returns the default pool, then the others in configuration order.
func (s *Snapshot) Pools() []*Pool {
	out := make([]*Pool, 0, 1+len(s.poolNames))
	out = append(out, s.def)
	for _, n := range s.poolNames {
		out = append(out, s.pools[n])
	}
	return out
}

// DefaultPool returns the default pool.
func (s *Snapshot) DefaultPool() *Pool { return s.def }

// poolFor returns the pool a worker spec belongs to: the pool its spec's model names, else the
// default pool.
func (s *Snapshot) poolFor(sp worker.Spec) *Pool {
	if p := s.pools[sp.Model]; p != nil && sp.Model != "" {
		return p
	}
	return s.def
}

// DefaultModel returns the model name a request without one gets: the default pool's name,
// else the first model a worker of the default pool reported, else the first other pool's.
func (s *Snapshot) DefaultModel() string {
	if s.def.name != "" {
		return s.def.name
	}
	for _, m := range s.members {
		if m.pool == s.def {
			if n := m.w.ReportedModel(); n != "" {
				return n
			}
		}
	}
	if len(s.poolNames) > 0 {
		return s.poolNames[0]
	}
	return ""
}

// Target is where a request for one model is routed: its pool, the model (defaulted) and the
// block-key namespace, as Resolve finds them.
type Target struct {
	Pool *Pool
	// Model is the requested model, or the default model when the request named none;
	// Default is the default model's name at the time (workers without a spec model serve it).
	Model, Default string
	// Namespace is the request's block-key namespace (DESIGN.md §3): the LoRA adapter
	// requested, "" for a base model.
	Namespace string
}

// Resolve returns the target of a request for model ("" for the default): a non-default pool
// of that name and no namespace; else, when some worker lists model as a LoRA adapter, that
// worker's pool and the model name itself as namespace, the same string the index derives
// from an event's lora_name (indexer.Namespace(model, 0, false, "")), such a request routing
// only among the workers that list the adapter; else the default pool and no namespace. Known
// reports whether requests for the model may be routed at all (a 404 otherwise): the target is
// a non-default pool, or one of the pool's workers (healthy or not) serves the name.
//
// A request's cache_salt is not part of the namespace: the engines' events do not carry the
// salt in a form kvgate parses, so salted requests are scored as if unsalted (they may be
// credited with blocks the engine will not reuse for them, which costs a worse choice, never a
// wrong answer).
//
// Adapter requests do not use the approximate tree: it is keyed by raw tokens with no
// namespace (indexer.Lookup.Record). They are scored from events and the pending overlay,
// whose keys carry the namespace.
func (s *Snapshot) Resolve(model string) (t Target, known bool) {
	t.Default = s.DefaultModel()
	if model == "" {
		model = t.Default
	}
	t.Model = model
	if p := s.pools[model]; p != nil {
		t.Pool = p
		return t, true
	}
	t.Pool = s.def
	if model != "" {
		for _, m := range s.members {
			if m.w.HasAdapter(model) {
				t.Pool, t.Namespace = m.pool, indexer.Namespace(model, 0, false, "")
				break
			}
		}
	}
	for _, m := range s.members {
		if m.pool == t.Pool && m.serves(t) {
			return t, true
		}
	}
	return t, false
}

// Serves reports whether m may serve a request for t's model in t's namespace (the admission
// queue asks it of a worker with a free slot): see serves.
func (m *Member) Serves(t Target) bool { return m.serves(t) }

// serves reports whether m may serve a request for t's model in t's namespace: a worker that
// lists the adapter when a namespace is set, else one that serves the model.
func (m *Member) serves(t Target) bool {
	if t.Namespace != "" {
		return m.w.HasAdapter(t.Model)
	}
	return m.w.Serves(t.Model, t.Default)
}

// Selection is the answer of Select, reused across requests (its slices keep their capacity).
type Selection struct {
	// Candidates may take the request now: they serve the target's model in a role that may
	// serve the leg, are healthy and under Config.MaxInFlightPerWorker.
	Candidates []*Member
	// Lookup[i] is Candidates[i].LookupWorker(), read in Select's pass while the member is in
	// the cache; change Candidates only through Drop and Only, which keep the two in step.
	Lookup []indexer.LookupWorker
	// Rejected serve the model but are down or full (in any role).
	Rejected []*Member
	// Known is set when the model is served at all (a non-default pool, or some worker of
	// the pool serves it); Full when some worker was left out for its in-flight limit.
	// Disagg is set when some worker that serves it (healthy or not) has role=prefill: the
	// pool runs disaggregated (wire/pd.md).
	Known, Full, Disagg bool
}

// Select fills sel with the workers of t's pool that serve t's model, leaving out exclude (the
// worker a retry moves away from). The candidates are those whose role may serve a pair's
// prefill leg when prefill is set (roles prefill and both), else a whole request or a decode
// leg (decode and both). Routing and /debug/route both choose from it.
//
// It is one pass over the fleet that reads each worker once: at thousands of workers a
// decision costs about the cache lines its passes touch (docs/scaling.md).
func (s *Snapshot) Select(sel *Selection, t Target, exclude *Member, maxInFlight int, prefill bool) {
	sel.Candidates, sel.Lookup, sel.Rejected = sel.Candidates[:0], sel.Lookup[:0], sel.Rejected[:0]
	sel.Known, sel.Full, sel.Disagg = t.Pool != s.def, false, false
	for _, m := range s.members {
		if m.pool != t.Pool || !m.serves(t) {
			continue
		}
		sel.Known = true
		if m == exclude {
			continue
		}
		r := m.w.Role()
		sel.Disagg = sel.Disagg || r == worker.RolePrefill
		switch {
		case !m.w.Healthy():
			sel.Rejected = append(sel.Rejected, m)
		case maxInFlight > 0 && m.w.InFlight() >= int64(maxInFlight):
			sel.Full = true
			sel.Rejected = append(sel.Rejected, m)
		case prefill && r.Prefills() || !prefill && r.Decodes():
			sel.Candidates, sel.Lookup = append(sel.Candidates, m), append(sel.Lookup, m.LookupWorker())
		}
	}
}

// Drop removes the candidates drop reports true for, moving them to Rejected when reject is
// set, and returns how many it removed.
func (sel *Selection) Drop(drop func(m *Member) bool, reject bool) int {
	n := 0
	for i, m := range sel.Candidates {
		if drop(m) {
			if reject {
				sel.Rejected = append(sel.Rejected, m)
			}
			continue
		}
		sel.Candidates[n], sel.Lookup[n] = m, sel.Lookup[i]
		n++
	}
	removed := len(sel.Candidates) - n
	sel.Candidates, sel.Lookup = sel.Candidates[:n], sel.Lookup[:n]
	return removed
}

// Only makes m the one candidate.
func (sel *Selection) Only(m *Member) {
	sel.Candidates, sel.Lookup = append(sel.Candidates[:0], m), append(sel.Lookup[:0], m.LookupWorker())
}
