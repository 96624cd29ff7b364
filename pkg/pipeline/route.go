package pipeline

import (
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// route chooses a worker for c among its pool's candidates that may serve a leg of kind k,
// excluding one member (the one a retry moves away from, or a pair's decode worker), and takes
// one in-flight request on it: dec is overwritten only on success, and the caller must call
// dec.pick.Done once the request has ended. It fills s; the decision's keys alias s and are
// valid until s is reused.
func (pl *Pipeline) route(s *routeScratch, dec *Decision, c *Call, exclude *fleet.Member, k legKind) *openai.Error {
	start := time.Now()
	pl.fleet.Snapshot().Select(&s.sel, c.Target, exclude, pl.cfg.MaxInFlightPerWorker, k == legPrefill)
	pl.engineBound(&s.sel, c)
	s.disagg = s.sel.Disagg
	if s.also != nil {
		also := s.also
		s.also = nil
		s.sel.Drop(func(m *fleet.Member) bool { return m == also }, false)
	}
	if c.Req.Pass != nil && !httpOnly(&s.sel) {
		return engine.PassOnGRPC(c.Req.Pass.Path)
	}
	if c.Req.Media > 0 {
		if aerr := mediaCandidates(&s.sel); aerr != nil {
			return aerr
		}
	}
	if len(s.sel.Candidates) == 0 {
		return RouteError(c.Target.Model, s.sel.Known, s.sel.Full)
	}
	pl.pick(s, dec, c, exclude != nil, start, pl.legPolicy(c, k, s.disagg))
	return nil
}

// legPolicy returns the policy that picks a leg of kind k of c: a prefill leg's, a
// disaggregated pool's decode policy for the decode leg or a whole request, else the model's.
func (pl *Pipeline) legPolicy(c *Call, k legKind, disagg bool) policy.Policy {
	switch {
	case k == legPrefill:
		return c.Served.pd.prefill
	case disagg:
		return c.Served.pd.decode
	}
	return c.Served.policy
}

// pick scores s.sel.Candidates for c, asks pol and takes the request's load on the chosen
// worker into dec (see route); retry marks the decision as a retry's. start is when routing
// began, for the lookup metric.
func (pl *Pipeline) pick(s *routeScratch, dec *Decision, c *Call, retry bool, start time.Time, pol policy.Policy) {
	tokens := c.RouteTokens()
	p := c.Target.Pool
	s.lookup.Media = c.mediaKeys // used and cleared by the lookup's Score
	pl.score(s, p, tokens, c.Target.Namespace, false)
	defBS := p.BlockSize()
	// The request lives in the scratch: passed through the Policy interface it would escape.
	s.req = policy.Request{Blocks: len(tokens) / defBS, Tokens: len(tokens)}
	if keys := s.lookup.Keys(defBS); len(keys) > 0 {
		s.req.FirstBlock = keys[0]
	}
	*dec = Decision{pick: policy.Take(pol, &s.req, s.cands), ns: c.Target.Namespace}
	i := dec.pick.Index
	m, sc := s.sel.Candidates[i], &s.scores[i]
	dec.m, dec.lw, dec.reason, dec.source, dec.keys, dec.bs = m, s.sel.Lookup[i], dec.pick.Reason, sc.Source, s.lookup.Keys(sc.BlockSize), sc.BlockSize
	if retry {
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
	pl.met.lookup.Observe(time.Since(start).Seconds())
	pl.traceRoute(c, dec, len(tokens)/sc.BlockSize, len(s.sel.Candidates), start)
	pl.met.countDecision(dec.reason)
	pl.met.matched.Observe(float64(dec.matched))
	if ce := pl.log.Check(zap.DebugLevel, "route"); ce != nil {
		ce.Write(zap.String("worker", m.Worker().URL()), zap.String("reason", string(dec.reason)),
			zap.Int("matched_blocks", dec.matched), zap.Int("request_blocks", len(tokens)/sc.BlockSize),
			zap.Int64("load", s.cands[i].Load), zap.Int("candidates", len(s.sel.Candidates)))
	}
}

// score fills s.scores and s.cands for s.sel.Candidates, workers of pool p: each worker's
// match from p's lookup (indexer.Lookup: events, pending overlay or tree, the best over DP
// ranks, in default-size blocks, for s.sel.Lookup, which Select read with the members) and its
// load (in-flight requests, and their blocks still to prefill and held).
//
// The workers are read in one pass (a fleet of a thousand does not fit the caches twice), the
// matches then filled in from the contiguous scores.
func (pl *Pipeline) score(s *routeScratch, p *fleet.Pool, tokens []uint32, ns string, explain bool) {
	ms := s.sel.Candidates
	if cap(s.cands) < len(ms) {
		s.cands = make([]policy.Candidate, len(ms))
	}
	s.cands = s.cands[:len(ms)]
	now := pl.now()
	for i, m := range ms {
		w := m.Worker()
		s.cands[i] = policy.Candidate{Worker: w, Key: w.Key(), Load: w.Load(now, pl.loadMaxAge),
			Prefill: w.PendingPrefill(), Active: w.ActiveBlocks()}
	}
	s.scores = p.Lookup().Score(&s.lookup, tokens, ns, s.sel.Lookup, s.scores, explain)
	for i := range s.cands {
		s.cands[i].Matched, s.cands[i].Source = s.scores[i].Matched, s.scores[i].Source
	}
}

// httpOnly removes the gRPC workers from a forwarded request's candidates, in place. It
// reports false when every candidate was a gRPC worker.
func httpOnly(sel *fleet.Selection) bool {
	had := len(sel.Candidates) > 0
	sel.Drop(func(m *fleet.Member) bool { return m.Worker().Kind() != worker.KindHTTP }, false)
	return len(sel.Candidates) > 0 || !had
}

// takeScratch returns a routeScratch from the pipeline's pool (return it with pl.scratch.Put).
func (pl *Pipeline) takeScratch() *routeScratch {
	if s, ok := pl.scratch.Get().(*routeScratch); ok {
		return s
	}
	return new(routeScratch)
}
