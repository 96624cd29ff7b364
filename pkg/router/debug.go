package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/policy"
)

// routeExplanation is the GET /debug/route body.
type routeExplanation struct {
	Model         string          `json:"model"`
	Pool          string          `json:"pool,omitempty"`      // the configured model whose pool routes it ("" the default pool)
	Prompt        string          `json:"prompt,omitempty"`    // a chat body's rendered prompt
	Namespace     string          `json:"namespace,omitempty"` // block-key namespace: the LoRA adapter
	Policy        string          `json:"policy"`
	KVIndex       string          `json:"kv_index"`
	PromptTokens  int             `json:"prompt_tokens"`
	BlockSize     int             `json:"block_size"`
	RequestBlocks int             `json:"request_blocks"`
	Workers       []workerExplain `json:"workers"`
	Decision      *decisionView   `json:"decision,omitempty"`
	Error         string          `json:"error,omitempty"`
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

// policyName is the name a policy reports (the policies policy.New builds are fmt.Stringers).
func policyName(p policy.Policy) string {
	if s, ok := p.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", p)
}

// handleDebugRoute explains the routing decision for a prompt without sending it or recording
// anything in the tree, the pending overlay, the metrics or the policy's state:
// ?prompt=text (tokenized like a request) or ?tokens=1,2,3, and optionally &model=. A policy
// whose Pick changes shared state (policy.Explainer: round_robin, random) explains the rule it
// would apply instead; the others are pure functions of the request and the candidates
// (DESIGN.md §5) and are asked directly (their random tie-breaks may draw from the shared
// source, which decides nothing for the next request).
func (rt *Router) handleDebugRoute(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	model := rt.debugModel(q.Get("model"))
	p, _ := rt.fleet.Load().resolve(model)
	tokens, aerr := rt.debugTokens(p, q)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	rt.explainRoute(w, model, tokens, "")
}

// debugModel defaults the model of a request /debug/route explains.
func (rt *Router) debugModel(model string) string {
	if model == "" {
		return rt.defaultModel()
	}
	return model
}

// handleDebugRouteBody explains the route of a request body, as POST /v1/completions or POST
// /v1/chat/completions would take it (a body with "messages" is a chat request): tokenized or
// rendered like one, and explained like GET /debug/route.
func (rt *Router) handleDebugRouteBody(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := openai.ReadBody(w, r, rt.cfg.MaxBodyBytes)
	defer release()
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	var model, prompt string
	var tokens []uint32
	if isChatBody(body) {
		req, aerr := openai.ParseChat(body, openai.Limits{MaxN: rt.cfg.MaxN})
		if aerr != nil {
			openai.WriteError(w, aerr)
			return
		}
		model = rt.debugModel(req.Model)
		p, _ := rt.fleet.Load().resolve(model)
		if tokens, prompt, aerr = rt.renderChat(p, req); aerr != nil {
			openai.WriteError(w, aerr)
			return
		}
	} else {
		req, aerr := openai.ParseCompletion(body, openai.Limits{MaxN: rt.cfg.MaxN})
		if aerr != nil {
			openai.WriteError(w, aerr)
			return
		}
		model = rt.debugModel(req.Model)
		p, _ := rt.fleet.Load().resolve(model)
		all, aerr := rt.promptTokens(p, req)
		if aerr != nil {
			openai.WriteError(w, aerr)
			return
		}
		tokens = all[0]
	}
	if len(tokens) == 0 {
		openai.WriteError(w, openai.BadRequest("messages", "the gateway has no tokenizer or chat template for this request (--model-path)"))
		return
	}
	rt.explainRoute(w, model, tokens, prompt)
}

// isChatBody reports whether a request body is a chat request (it has "messages").
func isChatBody(body []byte) bool {
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	return json.Unmarshal(body, &probe) == nil && probe.Messages != nil
}

// explainRoute writes the explanation of routing tokens (rendered from prompt, for a chat
// body) for model, defaulted.
func (rt *Router) explainRoute(w http.ResponseWriter, model string, tokens []uint32, prompt string) {
	f := rt.fleet.Load()
	def := f.defaultModel(rt.cfg.Model)
	p, ns := f.resolve(model)
	bs := p.blockSize
	out := routeExplanation{Model: model, Pool: p.name, Prompt: prompt, Namespace: ns, Policy: policyName(p.policy), KVIndex: rt.cfg.KVIndex,
		PromptTokens: len(tokens), BlockSize: bs, RequestBlocks: len(tokens) / bs, Workers: []workerExplain{}}
	s := new(routeScratch)
	var ineligible []*member
	for _, m := range f.members {
		if m.pool != p || !eligibleFor(m, model, def, ns) {
			continue
		}
		if m.w.Healthy() && (rt.cfg.MaxInFlightPerWorker == 0 || m.w.InFlight() < int64(rt.cfg.MaxInFlightPerWorker)) {
			s.members = append(s.members, m)
		} else {
			ineligible = append(ineligible, m)
		}
	}
	rt.score(s, p, tokens, ns, true)
	for i, m := range s.members {
		sc, c := s.scores[i], s.cands[i]
		out.Workers = append(out.Workers, rt.explainWorker(m, true, sc, c))
	}
	for _, m := range ineligible {
		out.Workers = append(out.Workers, rt.explainWorker(m, false, indexer.Score{BlockSize: m.blockSize()}, policy.Candidate{}))
	}
	if len(s.members) == 0 {
		out.Error = routeError(model, len(ineligible) > 0 || p.name != "", false).Message
		writeJSON(w, http.StatusOK, out)
		return
	}
	req := policy.Request{Blocks: len(tokens) / bs, Tokens: len(tokens)}
	if keys := s.lookup.Keys(bs); len(keys) > 0 {
		req.FirstBlock = keys[0]
	}
	if ex, ok := p.policy.(policy.Explainer); ok {
		d, note := ex.Explain(&req, s.cands)
		out.Decision = &decisionView{Reason: string(d.Reason), Note: note}
		if d.Index >= 0 && d.Index < len(s.members) {
			out.Decision.Worker, out.Decision.MatchedBlocks = s.members[d.Index].w.URL(), s.cands[d.Index].Matched
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	d := p.policy.Pick(&req, s.cands)
	if d.Index >= 0 && d.Index < len(s.members) {
		out.Decision = &decisionView{Worker: s.members[d.Index].w.URL(), Reason: string(d.Reason), MatchedBlocks: s.cands[d.Index].Matched}
	}
	writeJSON(w, http.StatusOK, out)
}

// debugTokens returns the tokens /debug/route explains: ?tokens=1,2,3, or ?prompt= tokenized
// like a completion prompt of pool p.
func (rt *Router) debugTokens(p *pool, q url.Values) ([]uint32, *openai.Error) {
	var tokens []uint32
	switch {
	case q.Has("tokens"):
		for _, f := range strings.FieldsFunc(q.Get("tokens"), func(r rune) bool { return r == ',' || r == ' ' }) {
			v, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, openai.BadRequest("tokens", "tokens must be comma-separated token ids")
			}
			tokens = append(tokens, uint32(v))
		}
	case q.Has("prompt"):
		if p.tok == nil {
			return nil, openai.BadRequest("prompt", "no tokenizer configured (--model-path); pass ?tokens= instead")
		}
		var err error
		if tokens, err = p.tok.Encode(nil, q.Get("prompt"), true); err != nil {
			return nil, openai.BadRequest("prompt", "prompt could not be tokenized: "+err.Error())
		}
	default:
		return nil, openai.BadRequest("prompt", "pass ?prompt=text or ?tokens=1,2,3")
	}
	if len(tokens) == 0 {
		return nil, openai.BadRequest("prompt", "prompt must not be empty")
	}
	return tokens, nil
}

func (rt *Router) explainWorker(m *member, eligible bool, sc indexer.Score, c policy.Candidate) workerExplain {
	e := workerExplain{URL: m.w.URL(), Healthy: m.w.Healthy(), Eligible: eligible, EventFed: m.eventFed(), BlockSize: sc.BlockSize,
		MatchedEvents: sc.Events, MatchedTree: sc.Tree, MatchedPending: sc.Pending, Scored: c.Matched,
		ScoredFrom: c.Source.String(), Load: c.Load, InFlight: m.w.InFlight(), PendingPrefill: m.w.PendingPrefill(), ActiveBlocks: m.w.ActiveBlocks()}
	if n, _, ok := m.w.EngineLoad(); ok {
		e.EngineLoad = &n
	}
	return e
}
