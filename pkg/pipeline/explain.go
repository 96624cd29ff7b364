package pipeline

import (
	"net/http"

	"github.com/kvgate/kvgate/pkg/admission"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// /debug/route's explanation of a route, computed by the same candidate selection, scoring and
// policies as route, without taking anything.

// RouteExplanation is the /debug/route body (Explain).
type RouteExplanation struct {
	Model         string          `json:"model"`
	Pool          string          `json:"pool,omitempty"`      // the configured model whose pool routes it ("" the default pool)
	Prompt        string          `json:"prompt,omitempty"`    // a chat body's rendered prompt
	Namespace     string          `json:"namespace,omitempty"` // block-key namespace: the LoRA adapter
	Policy        string          `json:"policy"`
	KVIndex       string          `json:"kv_index"`
	PromptTokens  int             `json:"prompt_tokens"`
	BlockSize     int             `json:"block_size"`
	RequestBlocks int             `json:"request_blocks"`
	Media         *mediaView      `json:"media,omitempty"` // how a request with media is routed
	Workers       []workerExplain `json:"workers"`
	Decision      *decisionView   `json:"decision,omitempty"`
	// PD explains a disaggregated pool's split: Workers and Decision are then the decode
	// leg's (decode and both workers, by the decode policy).
	PD    *pdExplain `json:"pd,omitempty"`
	Queue *queueView `json:"queue,omitempty"` // the pool's admission queue, when configured
	Error string     `json:"error,omitempty"`
}

// pdExplain is how a disaggregated pool would run the request (pd.go).
type pdExplain struct {
	// Split is "pair" or why the request runs whole on the decode worker (X-Kvgate-Pd).
	Split             string `json:"split"`
	Transfer          string `json:"transfer"`
	DecodePolicy      string `json:"decode_policy"`
	PrefillPolicy     string `json:"prefill_policy"`
	MinUncachedTokens int    `json:"min_uncached_tokens"`
	// DecodeCachedTokens are the prompt's leading tokens the decode worker holds.
	DecodeCachedTokens int           `json:"decode_cached_tokens"`
	Prefill            *decisionView `json:"prefill,omitempty"`
	Note               string        `json:"note,omitempty"`
}

// queueView is the admission queue of the pool a request would go to: its band, whether it
// would wait (every candidate full, or requests of its band or better waiting already: a
// worse band's waiting requests do not hold it back), how many it would wait behind at least
// (Ahead: those of the bands ≤ its own), and what waits, by band.
type queueView struct {
	WouldWait bool                  `json:"would_wait"`
	Priority  int                   `json:"priority"`
	Ahead     int                   `json:"ahead"`
	Waiting   int                   `json:"waiting"`
	Bands     []admission.BandStats `json:"bands"`
}

type workerExplain struct {
	URL            string `json:"url"`
	Healthy        bool   `json:"healthy"`
	Eligible       bool   `json:"eligible"`
	EventFed       bool   `json:"event_fed"`
	BlockSize      int    `json:"block_size"`
	MatchedEvents  int    `json:"matched_events"`
	MatchedTree    int    `json:"matched_tree"`
	MatchedPending int    `json:"matched_pending"`
	Scored         int    `json:"scored_blocks"`
	ScoredFrom     string `json:"scored_from"`
	Load           int64  `json:"load"`
	InFlight       int64  `json:"in_flight"`
	EngineLoad     *int64 `json:"engine_load,omitempty"`
	// PendingPrefill and ActiveBlocks are the blocks this gateway's in-flight requests on the
	// worker must still prefill and hold (policy cost's load terms).
	PendingPrefill int64 `json:"pending_prefill_blocks"`
	ActiveBlocks   int64 `json:"active_blocks"`
}

type decisionView struct {
	Worker        string `json:"worker,omitempty"` // absent when the policy was not asked (Note)
	Reason        string `json:"reason"`
	MatchedBlocks int    `json:"matched_blocks"`
	Note          string `json:"note,omitempty"`
}

// Explain explains routing c (its prompt rendered from prompt, for a chat body) without
// sending it or recording anything in the tree, the pending overlay, the metrics or the
// policy's state: the candidates Select gives, scored as route scores them, and the policy's
// choice (explainPick). r is the request explained (its priority header and client key decide
// its admission band, as for a request sent); nil explains band 0.
func (pl *Pipeline) Explain(c *Call, prompt string, r *http.Request) *RouteExplanation {
	t, tokens := c.Target, c.RouteTokens()
	p := t.Pool
	bs := p.BlockSize()
	out := &RouteExplanation{Model: t.Model, Prompt: prompt, Namespace: t.Namespace, Policy: policyName(c.Served.policy), KVIndex: pl.fleet.KVIndex(),
		PromptTokens: len(tokens), BlockSize: bs, RequestBlocks: len(tokens) / bs, Media: c.media.view(bs), Workers: []workerExplain{}}
	if !p.Default() {
		out.Pool = p.Name()
	}
	s := new(routeScratch)
	pl.fleet.Snapshot().Select(&s.sel, t, nil, pl.cfg.MaxInFlightPerWorker, false)
	pl.engineBound(&s.sel, c)
	disagg := s.sel.Disagg
	pol := c.Served.policy
	if disagg {
		pol = c.Served.pd.decode
		out.Policy = policyName(pol)
	}
	if c.Req.Media > 0 {
		if aerr := mediaCandidates(&s.sel); aerr != nil {
			out.Error = aerr.Message
		}
	}
	s.lookup.Media = c.mediaKeys
	pl.score(s, p, tokens, t.Namespace, true)
	for i, m := range s.sel.Candidates {
		out.Workers = append(out.Workers, explainWorker(m, true, s.scores[i], s.cands[i]))
	}
	for _, m := range s.sel.Rejected {
		out.Workers = append(out.Workers, explainWorker(m, false, indexer.Score{BlockSize: m.BlockSize()}, policy.Candidate{}))
	}
	if q := c.Served.queue; q != nil {
		prio := 0
		if r != nil {
			var aerr *openai.Error
			if prio, aerr = requestPriority(r, c); aerr != nil {
				out.Error = aerr.Message
			}
		}
		st, ahead := q.Stats(), q.Ahead(prio)
		out.Queue = &queueView{WouldWait: ahead > 0 || len(s.sel.Candidates) == 0 && s.sel.Full, Priority: prio, Ahead: ahead, Waiting: st.Waiting, Bands: st.Bands}
	}
	if len(s.sel.Candidates) == 0 {
		if out.Error == "" {
			out.Error = RouteError(t.Model, s.sel.Known, false).Message
		}
		return out
	}
	out.Decision = explainPick(pol, s, tokens, bs)
	if disagg && out.Decision != nil && out.Decision.Worker != "" {
		out.PD = pl.explainPD(c, out.Decision)
	}
	return out
}

// explainPD explains the split of c, whose decode worker would be dec's, as servePair
// decides it, and the prefill worker a pair would get.
func (pl *Pipeline) explainPD(c *Call, dec *decisionView) *pdExplain {
	pd, tokens, bs := &c.Served.pd, c.RouteTokens(), c.Target.Pool.BlockSize()
	d := pl.fleet.Snapshot().Member(dec.Worker)
	if d == nil {
		return nil
	}
	out := &pdExplain{Transfer: pd.transferOf(d), DecodePolicy: policyName(pd.decode), PrefillPolicy: policyName(pd.prefill),
		MinUncachedTokens: pd.minUncached, DecodeCachedTokens: dec.MatchedBlocks * bs}
	out.Split = splitReason(len(tokens), out.DecodeCachedTokens, pd.minUncached)
	mustPair := out.Transfer == PDTransferSGLang && d.Worker().Role() == worker.RoleDecode
	switch {
	case mustPair:
		out.Split, out.Note = pdPair, "SGLang decode-mode workers serve only pairs"
	case out.Split == pdShortPrompt:
		out.Note = "the prompt is shorter than min_uncached_tokens: splitting would not pay"
	case out.Split == pdDecodeCached:
		out.Note = "the decode worker holds all but fewer than min_uncached_tokens of the prompt: it prefills the rest itself"
	}
	if out.Split == pdPair && out.Transfer != PDTransferSGLang && multipleOutputs(c) {
		out.Split = pdMultiple
	}
	if out.Split != pdPair {
		return out
	}
	s := new(routeScratch)
	pl.fleet.Snapshot().Select(&s.sel, c.Target, d, pl.cfg.MaxInFlightPerWorker, true)
	if len(s.sel.Candidates) == 0 {
		out.Split = pdNoPrefill
		return out
	}
	s.lookup.Media = c.mediaKeys
	pl.score(s, c.Target.Pool, tokens, c.Target.Namespace, true)
	out.Prefill = explainPick(pd.prefill, s, tokens, bs)
	return out
}

// explainPick asks the policy what it would pick among the scored candidates in s.
func explainPick(pol policy.Policy, s *routeScratch, tokens []uint32, bs int) *decisionView {
	req := policy.Request{Blocks: len(tokens) / bs, Tokens: len(tokens)}
	if keys := s.lookup.Keys(bs); len(keys) > 0 {
		req.FirstBlock = keys[0]
	}
	ms := s.sel.Candidates
	if ex, ok := pol.(policy.Explainer); ok {
		d, note := ex.Explain(&req, s.cands)
		out := &decisionView{Reason: string(d.Reason), Note: note}
		if d.Index >= 0 && d.Index < len(ms) {
			out.Worker, out.MatchedBlocks = ms[d.Index].Worker().URL(), s.cands[d.Index].Matched
		}
		return out
	}
	d := pol.Pick(&req, s.cands)
	if d.Index < 0 || d.Index >= len(ms) {
		return nil
	}
	return &decisionView{Worker: ms[d.Index].Worker().URL(), Reason: string(d.Reason), MatchedBlocks: s.cands[d.Index].Matched, Note: d.Reason.Explain()}
}

func explainWorker(m *fleet.Member, eligible bool, sc indexer.Score, c policy.Candidate) workerExplain {
	w := m.Worker()
	e := workerExplain{URL: w.URL(), Healthy: w.Healthy(), Eligible: eligible, EventFed: m.EventFed(), BlockSize: sc.BlockSize,
		MatchedEvents: sc.Events, MatchedTree: sc.Tree, MatchedPending: sc.Pending, Scored: c.Matched,
		ScoredFrom: c.Source.String(), Load: c.Load, InFlight: w.InFlight(), PendingPrefill: w.PendingPrefill(), ActiveBlocks: w.ActiveBlocks()}
	if n, _, ok := w.EngineLoad(); ok {
		e.EngineLoad = &n
	}
	return e
}
