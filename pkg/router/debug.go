package router

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/admission"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
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

// queueView is the admission queue of the pool a request would go to: whether it would wait
// (every candidate full, or others waiting already) and what waits, by band (a request of
// band b waits behind at least the requests of the bands ≤ b).
type queueView struct {
	WouldWait bool                  `json:"would_wait"`
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

// handleDebugRoute explains the routing decision for a prompt without sending it or recording
// anything in the tree, the pending overlay, the metrics or the policy's state:
// ?prompt=text (tokenized like a request) or ?tokens=1,2,3, and optionally &model=. A policy
// whose Pick changes shared state (policy.Explainer: round_robin, random) explains the rule it
// would apply instead; the others are pure functions of the request and the candidates
// (DESIGN.md §5) and are asked directly (their random tie-breaks may draw from the shared
// source, which decides nothing for the next request).
func (rt *Router) handleDebugRoute(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c := &call{}
	rt.resolve(c, q.Get("model"))
	tokens, aerr := rt.debugTokens(c.model, q)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	c.req.Tokens = [][]uint32{tokens}
	rt.explainRoute(w, c, "")
}

// handleDebugRouteBody explains the route of a request body, as the pipeline would take it (a
// body with "messages" is a chat request, any other a completion; ?endpoint=messages reads an
// Anthropic Messages body, converted as POST /v1/messages converts it): parsed, resolved and
// tokenized or rendered by the same endpoint, and explained like GET /debug/route.
func (rt *Router) handleDebugRouteBody(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := openai.ReadBody(w, r, rt.cfg.MaxBodyBytes)
	defer release()
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if isResponsesBody(body) {
		rt.explainResponses(w, r, body)
		return
	}
	ep := completions
	switch {
	case r.URL.Query().Get("endpoint") == "messages":
		ep = newMessagesTurn().ep
	case isChatBody(body):
		ep = chatCompletions
	}
	c := &call{}
	prompt, aerr := rt.prepare(ep, body, c, false)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if (len(c.req.Tokens) == 0 || len(c.routeTokens()) == 0) && c.media == nil {
		openai.WriteError(w, openai.BadRequest("messages", "the gateway has no tokenizer or chat template for this request (--model-path)"))
		return
	}
	rt.explainRoute(w, c, prompt)
}

// isChatBody reports whether a request body is a chat request (it has "messages").
func isChatBody(body []byte) bool {
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	return json.Unmarshal(body, &probe) == nil && probe.Messages != nil
}

// explainRoute writes the explanation of routing c (its prompt rendered from prompt, for a
// chat body): the candidates Select gives, scored as route scores them, and the policy's
// choice.
func (rt *Router) explainRoute(w http.ResponseWriter, c *call, prompt string) {
	t, tokens := c.target, c.routeTokens()
	p := t.Pool
	bs := p.BlockSize()
	out := routeExplanation{Model: t.Model, Prompt: prompt, Namespace: t.Namespace, Policy: policyName(c.model.policy), KVIndex: rt.fleet.KVIndex(),
		PromptTokens: len(tokens), BlockSize: bs, RequestBlocks: len(tokens) / bs, Media: c.media.view(bs), Workers: []workerExplain{}}
	if !p.Default() {
		out.Pool = p.Name()
	}
	s := new(routeScratch)
	rt.fleet.Snapshot().Select(&s.sel, t, nil, rt.cfg.MaxInFlightPerWorker)
	disagg := keepRole(&s.sel, legWhole)
	pol := c.model.policy
	if disagg {
		pol = c.model.pd.decode
		out.Policy = policyName(pol)
	}
	if c.req.Media > 0 {
		if aerr := mediaCandidates(&s.sel); aerr != nil {
			out.Error = aerr.Message
		}
	}
	rt.score(s, p, tokens, t.Namespace, true)
	for i, m := range s.sel.Candidates {
		out.Workers = append(out.Workers, explainWorker(m, true, s.scores[i], s.cands[i]))
	}
	for _, m := range s.sel.Rejected {
		out.Workers = append(out.Workers, explainWorker(m, false, indexer.Score{BlockSize: m.BlockSize()}, policy.Candidate{}))
	}
	if q := c.model.queue; q != nil {
		st := q.Stats()
		out.Queue = &queueView{WouldWait: st.Waiting > 0 || len(s.sel.Candidates) == 0 && s.sel.Full, Waiting: st.Waiting, Bands: st.Bands}
	}
	if len(s.sel.Candidates) == 0 {
		if out.Error == "" {
			out.Error = routeError(t.Model, s.sel.Known, false).Message
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Decision = explainPick(pol, s, tokens, bs)
	if disagg && out.Decision != nil && out.Decision.Worker != "" {
		out.PD = rt.explainPD(c, out.Decision)
	}
	writeJSON(w, http.StatusOK, out)
}

// explainPD explains the split of c, whose decode worker would be dec's, as servePair
// decides it, and the prefill worker a pair would get.
func (rt *Router) explainPD(c *call, dec *decisionView) *pdExplain {
	pd, tokens, bs := &c.model.pd, c.routeTokens(), c.target.Pool.BlockSize()
	d := rt.fleet.Snapshot().Member(dec.Worker)
	if d == nil {
		return nil
	}
	out := &pdExplain{Transfer: pd.transferOf(d.Worker()), DecodePolicy: policyName(pd.decode), PrefillPolicy: policyName(pd.prefill),
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
	if out.Split == pdPair && pairBlocked(c, d) {
		out.Split = pdGRPC
	}
	if out.Split == pdPair && out.Transfer == PDTransferNIXL && multipleOutputs(c) {
		out.Split = pdMultiple
	}
	if out.Split != pdPair {
		return out
	}
	s := new(routeScratch)
	rt.fleet.Snapshot().Select(&s.sel, c.target, d, rt.cfg.MaxInFlightPerWorker)
	keepRole(&s.sel, legPrefill)
	if len(s.sel.Candidates) == 0 {
		out.Split = pdNoPrefill
		return out
	}
	rt.score(s, c.target.Pool, tokens, c.target.Namespace, true)
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

// debugTokens returns the tokens /debug/route explains: ?tokens=1,2,3, or ?prompt= tokenized
// like a completion prompt of model m.
func (rt *Router) debugTokens(m *model, q url.Values) ([]uint32, *openai.Error) {
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
		if m.tok == nil {
			return nil, openai.BadRequest("prompt", "no tokenizer configured (--model-path); pass ?tokens= instead")
		}
		var err error
		if tokens, err = m.tok.Encode(nil, q.Get("prompt"), true); err != nil {
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

// isResponsesBody reports whether a request body is a Responses request (it has "input" and
// neither "messages" nor "prompt").
func isResponsesBody(body []byte) bool {
	var probe struct {
		Input    json.RawMessage `json:"input"`
		Messages json.RawMessage `json:"messages"`
		Prompt   json.RawMessage `json:"prompt"`
	}
	return json.Unmarshal(body, &probe) == nil && probe.Input != nil && probe.Messages == nil && probe.Prompt == nil
}

// responsesExplanation is /debug/route's answer for a Responses body: the route of its chat
// request and what the turn expanded.
type responsesExplanation struct {
	routeExplanation
	Responses responsesChain `json:"responses"`
}

type responsesChain struct {
	PreviousResponseID string `json:"previous_response_id,omitempty"`
	Conversation       string `json:"conversation,omitempty"`
	// Chain lists the stored responses (or the conversation) the turn continues, oldest first.
	Chain        []string        `json:"chain"`
	HistoryItems int             `json:"history_items"`
	InputItems   int             `json:"input_items"`
	ChatRequest  json.RawMessage `json:"chat_request"`
}

// explainResponses is /debug/route for a Responses body: the chain is read in the scope of the
// client key named by ?client_key=NAME (none: the gateway without client keys), the turn
// expanded, and its chat request explained like a chat body, nothing stored.
func (rt *Router) explainResponses(w http.ResponseWriter, r *http.Request, body []byte) {
	c := &call{}
	tn, prompt, aerr := rt.beginTurn(r.Context(), r.URL.Query().Get("client_key"), body, c, false)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if len(c.req.Tokens) == 0 || len(c.routeTokens()) == 0 {
		openai.WriteError(w, openai.BadRequest("input", "the gateway has no tokenizer or chat template for this request (--model-path)"))
		return
	}
	var rec bodyRecorder
	rt.explainRoute(&rec, c, prompt)
	var out responsesExplanation
	if err := json.Unmarshal(rec.body, &out.routeExplanation); err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Message: "explain: " + err.Error()})
		return
	}
	t := tn.t
	out.Responses = responsesChain{PreviousResponseID: t.Req.PreviousResponseID, Conversation: t.Req.Conversation, Chain: t.Chain,
		HistoryItems: len(t.History), InputItems: len(t.Input), ChatRequest: t.ChatBody(nil, 0)}
	if out.Responses.Chain == nil {
		out.Responses.Chain = []string{}
	}
	writeJSON(w, http.StatusOK, out)
}

// bodyRecorder is a ResponseWriter that keeps what is written.
type bodyRecorder struct {
	h    http.Header
	body []byte
}

func (b *bodyRecorder) Header() http.Header {
	if b.h == nil {
		b.h = http.Header{}
	}
	return b.h
}

func (b *bodyRecorder) Write(p []byte) (int, error) {
	b.body = append(b.body, p...)
	return len(p), nil
}

func (b *bodyRecorder) WriteHeader(int) {}
