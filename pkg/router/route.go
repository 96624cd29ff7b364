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

// decision is the outcome of routing one request. It holds the worker's load from the pick
// (pick.Done releases it) and so must not be copied.
type decision struct {
	pick    policy.Result
	m       *member
	reason  policy.Reason
	matched int            // leading blocks the worker holds, at its own block size
	source  indexer.Source // where matched came from
	keys    []uint64       // request block keys at the worker's block size (scratch-owned)
	ns      string         // the keys' namespace: the LoRA adapter requested, "" for a base model
}

// routeScratch holds the per-request buffers of route; taken from Router.scratch so that the
// hot path does not allocate.
type routeScratch struct {
	members []*member
	workers []indexer.LookupWorker
	scores  []indexer.Score
	cands   []policy.Candidate
	lookup  indexer.LookupScratch
	req     policy.Request
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

// engineLoadMaxAge is how old an engine-load sample may be before only in-flight counts.
func (rt *Router) engineLoadMaxAge() time.Duration { return 3 * rt.cfg.EngineMetricsInterval }

// defaultModel returns the gateway's served model name: Config.Model, else the first model a
// worker of the default pool reported, else the first configured model.
func (rt *Router) defaultModel() string { return rt.fleet.Load().defaultModel(rt.cfg.Model) }

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
	f := rt.fleet.Load()
	def := f.defaultModel(rt.cfg.Model)
	p, ns := f.resolve(model)
	s.members = s.members[:0]
	known, full := p.name != "", false // a configured model is known with no worker up
	for _, m := range f.members {
		if m.pool != p || !eligibleFor(m, model, def, ns) {
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
	rt.score(s, p, tokens, ns, false)
	defBS := p.blockSize
	// The request lives in the scratch: passed through the Policy interface it would escape.
	s.req = policy.Request{Blocks: len(tokens) / defBS, Tokens: len(tokens)}
	if keys := s.lookup.Keys(defBS); len(keys) > 0 {
		s.req.FirstBlock = keys[0]
	}
	*dec = decision{pick: policy.Take(p.policy, &s.req, s.cands), ns: ns}
	i := dec.pick.Index
	m, sc := s.members[i], &s.scores[i]
	dec.m, dec.reason, dec.source, dec.keys = m, dec.pick.Reason, sc.Source, s.lookup.Keys(sc.BlockSize)
	if exclude != nil {
		dec.reason = policy.ReasonRetry
	}
	switch dec.source {
	case indexer.SourceEvents:
		dec.matched = sc.Events
	case indexer.SourceTree:
		dec.matched = sc.Tree
	case indexer.SourcePending:
		dec.matched = sc.Pending
	}
	rt.met.lookup.Observe(time.Since(start).Seconds())
	rt.met.decision(dec.reason)
	rt.met.matched.Observe(float64(dec.matched))
	if ce := rt.log.Check(zap.DebugLevel, "route"); ce != nil {
		ce.Write(zap.String("worker", m.w.URL()), zap.String("reason", string(dec.reason)),
			zap.Int("matched_blocks", dec.matched), zap.Int("request_blocks", len(tokens)/sc.BlockSize),
			zap.Int64("load", s.cands[i].Load), zap.Int("candidates", len(s.members)))
	}
	return nil
}

// commit records a decision that is being sent: the pending overlay for event-fed workers, the
// approximate tree for the others (not for adapter requests, see fleet.resolve).
func (rt *Router) commit(dec *decision, tokens []uint32) {
	if len(tokens) == 0 {
		return
	}
	m := dec.m
	lk := &m.pool.lookup
	if m.eventFed() {
		if lk.Pending != nil && len(dec.keys) > 0 {
			lk.Pending.Add(m.ids[0], dec.keys)
		}
		return
	}
	if lk.Tree != nil && dec.ns == "" {
		lk.Tree.Insert(m.ids[0], tokens)
	}
}

// score fills s.scores and s.cands for s.members, workers of pool p: each worker's match from
// p's lookup (indexer.Lookup: events, pending overlay or tree, the best over DP ranks, in
// default-size blocks) and its load (in-flight requests, and their blocks still to prefill and
// held).
//
// Members and workers are read in one pass (a fleet of a thousand does not fit the caches
// twice), the matches then filled in from the contiguous scores.
func (rt *Router) score(s *routeScratch, p *pool, tokens []uint32, ns string, explain bool) {
	s.workers = s.workers[:0]
	if cap(s.cands) < len(s.members) {
		s.cands = make([]policy.Candidate, len(s.members))
	}
	s.cands = s.cands[:len(s.members)]
	now, maxAge := rt.now(), rt.engineLoadMaxAge()
	for i, m := range s.members {
		s.workers = append(s.workers, m.lookupWorker())
		s.cands[i] = policy.Candidate{Worker: m.w, Key: m.w.Key(), Load: m.w.Load(now, maxAge),
			Prefill: m.w.PendingPrefill(), Active: m.w.ActiveBlocks()}
	}
	s.scores = p.lookup.Score(&s.lookup, tokens, ns, s.workers, s.scores, explain)
	for i := range s.cands {
		s.cands[i].Matched, s.cands[i].Source = s.scores[i].Matched, s.scores[i].Source
	}
}
