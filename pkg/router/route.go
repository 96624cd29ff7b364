package router

import (
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/policy"
)

// ApproxTree is what the router needs of the approximate token tree (DESIGN.md §4): it records
// where requests were sent and answers, per worker, how many leading blocks of a request it
// probably holds, in blocks of the router's default block size (Config.BlockSize: build the
// tree with the same size). *indexer.Tree implements it.
type ApproxTree interface {
	Insert(w indexer.WorkerID, tokens []uint32)
	Match(tokens []uint32, dst []indexer.WorkerMatch) []indexer.WorkerMatch
	RemoveWorker(w indexer.WorkerID)
}

// PendingOverlay is what the router needs of the pending overlay: the blocks of requests routed
// moments ago, before the engine's stored events confirm them. *indexer.Pending implements it.
type PendingOverlay interface {
	Add(w indexer.WorkerID, keys []uint64)
	Match(keys []uint64, dst []indexer.WorkerMatch) []indexer.WorkerMatch
	RemoveWorker(w indexer.WorkerID)
}

// decision is the outcome of routing one request. It holds the worker's load from the pick
// (pick.Done releases it) and so must not be copied.
type decision struct {
	pick    policy.Result
	m       *member
	reason  policy.Reason
	matched int           // leading blocks the worker holds, at its own block size
	source  policy.Source // where matched came from
	keys    []uint64      // request block keys at the worker's block size (scratch-owned)
	ns      string        // the keys' namespace: the LoRA adapter requested, "" for a base model
}

// candScore is one candidate's raw scores, in the worker's own blocks.
type candScore struct {
	events, tree, pending int
	bs                    int
	fed                   bool
	load                  int64
}

// keySet is the request's block keys at one block size.
type keySet struct {
	bs      int
	keys    []uint64
	events  []indexer.WorkerMatch
	pending []indexer.WorkerMatch
}

// routeScratch holds the per-request buffers of route; taken from Router.scratch so that the
// hot path does not allocate.
type routeScratch struct {
	members []*member
	cands   []policy.Candidate
	scores  []candScore
	sets    []keySet
	tree    []indexer.WorkerMatch
	req     policy.Request
}

func (s *routeScratch) keysFor(bs int) *keySet {
	for i := range s.sets {
		if s.sets[i].bs == bs {
			return &s.sets[i]
		}
	}
	return nil
}

// routeError classifies why no worker could be chosen.
func routeError(model string, known, full bool) *openai.Error {
	switch {
	case !known:
		return &openai.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("the model %q does not exist", model), Type: openai.TypeNotFound, Param: "model", Code: "model_not_found"}
	case full:
		return &openai.Error{Status: http.StatusTooManyRequests, Message: "every worker is at its in-flight limit", Type: openai.TypeRateLimit, Code: "no_capacity"}
	}
	return &openai.Error{Status: http.StatusServiceUnavailable, Message: "no healthy worker serves the model", Type: openai.TypeUnavailable, Code: "no_healthy_worker"}
}

// knowsModel reports whether any configured worker (healthy or not) serves model.
func (rt *Router) knowsModel(model string) bool {
	def := rt.defaultModel()
	for _, m := range rt.members() {
		if m.w.Serves(model, def) {
			return true
		}
	}
	return false
}

// defaultModel returns the gateway's served model name: Config.Model, else the first model a
// worker reported.
func (rt *Router) defaultModel() string {
	if rt.cfg.Model != "" {
		return rt.cfg.Model
	}
	for _, m := range rt.members() {
		if n := m.w.ReportedModel(); n != "" {
			return n
		}
	}
	return ""
}

// engineLoadMaxAge is how old an engine-load sample may be before only in-flight counts.
func (rt *Router) engineLoadMaxAge() time.Duration { return 3 * rt.cfg.EngineMetricsInterval }

// adapterNamespace returns the block-key namespace of a request for model (DESIGN.md §3): the
// model name itself when some worker lists it as a LoRA adapter, the same string the index
// derives from an event's lora_name (indexer.Namespace(model, 0, false, "")); "" for a base
// model. Such a request routes only among the workers that list the adapter (adapterOnly).
//
// A request's cache_salt is not part of the namespace: the engines' events do not carry the
// salt in a form kvgate parses, so salted requests are scored as if unsalted (they may be
// credited with blocks the engine will not reuse for them, which costs a worse choice, never a
// wrong answer).
//
// Adapter requests do not use the approximate tree: it is keyed by raw tokens with no
// namespace, so an adapter prompt would match (and later be matched by) the base model's. They
// are scored from events and the pending overlay, whose keys carry the namespace.
func (rt *Router) adapterNamespace(model string) string {
	if model == "" {
		return ""
	}
	for _, m := range rt.members() {
		if m.w.HasAdapter(model) {
			return indexer.Namespace(model, 0, false, "")
		}
	}
	return ""
}

// eligibleFor reports whether m may serve a request for model in namespace ns: a worker that
// lists the adapter when ns is set, else one that serves the model.
func eligibleFor(m *member, model, def, ns string) bool {
	if ns != "" {
		return m.w.HasAdapter(model)
	}
	return m.w.Serves(model, def)
}

// route chooses a worker for a request of model with the given prompt tokens (nil when the
// prompt could not be tokenized), excluding one member (the one a retry moves away from), and
// takes one in-flight request on it: dec is overwritten only on success, and the caller must
// call dec.pick.Done once the request has ended. It fills s; the decision's keys alias s and are
// valid until s is reused.
func (rt *Router) route(s *routeScratch, dec *decision, model string, tokens []uint32, exclude *member) *openai.Error {
	start := time.Now()
	def := rt.defaultModel()
	ns := rt.adapterNamespace(model)
	s.members = s.members[:0]
	known, full := false, false
	for _, m := range rt.members() {
		if !eligibleFor(m, model, def, ns) {
			continue
		}
		known = true
		if !m.w.Healthy() || m == exclude {
			continue
		}
		if rt.cfg.MaxInFlightPerWorker > 0 && m.w.InFlight() >= int64(rt.cfg.MaxInFlightPerWorker) {
			full = true
			continue
		}
		s.members = append(s.members, m)
	}
	if len(s.members) == 0 {
		return routeError(model, known, full)
	}
	rt.score(s, tokens, ns, false)
	defBS := rt.cfg.BlockSize
	// The request lives in the scratch: passed through the Policy interface it would escape.
	s.req = policy.Request{Blocks: len(tokens) / defBS, Tokens: len(tokens)}
	if ks := s.keysFor(defBS); ks != nil && len(ks.keys) > 0 {
		s.req.FirstBlock = ks.keys[0]
	}
	*dec = decision{pick: policy.Take(rt.cfg.Policy, &s.req, s.cands), ns: ns}
	i := dec.pick.Index
	m := s.members[i]
	sc := &s.scores[i]
	dec.m, dec.reason, dec.source = m, dec.pick.Reason, s.cands[i].Source
	if exclude != nil {
		dec.reason = policy.ReasonRetry
	}
	switch dec.source {
	case policy.SourceEvents:
		dec.matched = sc.events
	case policy.SourceTree:
		dec.matched = sc.tree
	case policy.SourcePending:
		dec.matched = sc.pending
	}
	if ks := s.keysFor(sc.bs); ks != nil {
		dec.keys = ks.keys
	}
	rt.met.lookup.Observe(time.Since(start).Seconds())
	rt.met.decision(dec.reason)
	rt.met.matched.Observe(float64(dec.matched))
	if ce := rt.log.Check(zap.DebugLevel, "route"); ce != nil {
		ce.Write(zap.String("worker", m.w.URL()), zap.String("reason", string(dec.reason)),
			zap.Int("matched_blocks", dec.matched), zap.Int("request_blocks", len(tokens)/sc.bs),
			zap.Int64("load", sc.load), zap.Int("candidates", len(s.members)))
	}
	return nil
}

// commit records a decision that is being sent: the pending overlay for event-fed workers, the
// approximate tree for the others (not for adapter requests, see adapterNamespace).
func (rt *Router) commit(dec *decision, tokens []uint32) {
	if len(tokens) == 0 {
		return
	}
	m := dec.m
	if m.eventFed() {
		if rt.cfg.Pending != nil && len(dec.keys) > 0 {
			rt.cfg.Pending.Add(m.ids[0], dec.keys)
		}
		return
	}
	if rt.cfg.Tree != nil && dec.ns == "" {
		rt.cfg.Tree.Insert(m.ids[0], tokens)
	}
}

// score fills s.cands and s.scores for s.members, hashing block keys under namespace ns
// (adapterNamespace). Matched counts are converted to blocks of the default size so workers
// with different block sizes compete on one scale.
func (rt *Router) score(s *routeScratch, tokens []uint32, ns string, explain bool) {
	defBS := rt.cfg.BlockSize
	n := len(s.members)
	s.cands = growCands(s.cands, n)
	s.scores = growScores(s.scores, n)
	s.sets = s.sets[:0]
	now := rt.now()
	maxAge := rt.engineLoadMaxAge()
	anyTree := false
	for i, m := range s.members {
		fed := m.eventFed()
		bs := m.w.BlockSize(defBS)
		s.scores[i] = candScore{bs: bs, fed: fed, load: m.w.Load(now, maxAge)}
		if !fed {
			anyTree = true
		}
		if len(tokens) >= bs && s.keysFor(bs) == nil {
			if len(s.sets) < cap(s.sets) {
				s.sets = s.sets[:len(s.sets)+1]
			} else {
				s.sets = append(s.sets, keySet{})
			}
			ks := &s.sets[len(s.sets)-1]
			ks.bs = bs
			ks.keys = indexer.AppendBlockKeys(ks.keys[:0], tokens, bs, ns)
		}
	}
	for i := range s.sets {
		ks := &s.sets[i]
		if len(ks.keys) == 0 {
			continue
		}
		if rt.cfg.KVIndex != KVIndexOff {
			ks.events = rt.cfg.Index.Match(ks.keys, ks.events[:0])
		} else {
			ks.events = ks.events[:0]
		}
		if rt.cfg.Pending != nil {
			ks.pending = rt.cfg.Pending.Match(ks.keys, ks.pending[:0])
		} else {
			ks.pending = ks.pending[:0]
		}
	}
	s.tree = s.tree[:0]
	if (anyTree || explain) && rt.cfg.Tree != nil && len(tokens) > 0 && ns == "" {
		s.tree = rt.cfg.Tree.Match(tokens, s.tree)
	}
	for i, m := range s.members {
		sc := &s.scores[i]
		if ks := s.keysFor(sc.bs); ks != nil {
			sc.events = s.maxFor(m, ks.events)
			sc.pending = s.maxFor(m, ks.pending)
		}
		if t := s.maxFor(m, s.tree); t > 0 {
			sc.tree = t
		}
		c := policy.Candidate{Worker: m.w, Key: m.w.Key(), Load: sc.load}
		// Events and pending count blocks of the worker's own size; the tree counts blocks
		// of the default size. Compare in default-size blocks.
		ev, pe := sc.events*sc.bs/defBS, sc.pending*sc.bs/defBS
		switch {
		case sc.fed && ev >= pe && ev > 0:
			c.Matched, c.Source = ev, policy.SourceEvents
		case sc.fed && pe > 0:
			c.Matched, c.Source = pe, policy.SourcePending
		case !sc.fed && sc.tree > 0:
			c.Matched, c.Source = sc.tree, policy.SourceTree
		}
		s.cands[i] = c
	}
}

// maxFor returns the largest Blocks among m's IDs (its DP ranks) in ms.
func (s *routeScratch) maxFor(m *member, ms []indexer.WorkerMatch) int {
	best := 0
	for _, wm := range ms {
		for _, id := range m.ids {
			if wm.Worker == id && wm.Blocks > best {
				best = wm.Blocks
			}
		}
	}
	return best
}

func growCands(c []policy.Candidate, n int) []policy.Candidate {
	if cap(c) < n {
		return make([]policy.Candidate, n)
	}
	return c[:n]
}

func growScores(c []candScore, n int) []candScore {
	if cap(c) < n {
		return make([]candScore, n)
	}
	return c[:n]
}

var (
	_ EventIndex     = (*indexer.Index)(nil)
	_ ApproxTree     = (*indexer.Tree)(nil)
	_ PendingOverlay = (*indexer.Pending)(nil)
)
