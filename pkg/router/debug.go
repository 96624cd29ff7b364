package router

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/endpoint"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// handleDebugRoute explains the routing decision for a prompt without sending it or recording
// anything in the tree, the pending overlay, the metrics or the policy's state:
// ?prompt=text (tokenized like a request) or ?tokens=1,2,3, and optionally &model=. A policy
// whose Pick changes shared state (policy.Explainer: round_robin, random) explains the rule it
// would apply instead; the others are pure functions of the request and the candidates
// (DESIGN.md §5) and are asked directly (their random tie-breaks may draw from the shared
// source, which decides nothing for the next request).
func (rt *Router) handleDebugRoute(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c := &pipeline.Call{}
	rt.pl.Resolve(c, q.Get("model"))
	tokens, aerr := debugTokens(c.Served, q)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	c.Req.Tokens = [][]uint32{tokens}
	pipeline.WriteJSON(w, http.StatusOK, rt.pl.Explain(c, "", r))
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
	ep := endpoint.Completions
	switch {
	case r.URL.Query().Get("endpoint") == "messages":
		ep = endpoint.MessagesEndpoint()
	case isChatBody(body):
		ep = endpoint.Chat
	}
	c := &pipeline.Call{}
	prompt, aerr := rt.pl.Prepare(ep, body, c, false)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if (len(c.Req.Tokens) == 0 || len(c.RouteTokens()) == 0) && !c.HasMedia() {
		openai.WriteError(w, openai.BadRequest("messages", "the gateway has no tokenizer or chat template for this request (--model-path)"))
		return
	}
	pipeline.WriteJSON(w, http.StatusOK, rt.pl.Explain(c, prompt, r))
}

// isChatBody reports whether a request body is a chat request (it has "messages").
func isChatBody(body []byte) bool {
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	return json.Unmarshal(body, &probe) == nil && probe.Messages != nil
}

// debugTokens returns the tokens /debug/route explains: ?tokens=1,2,3, or ?prompt= tokenized
// like a completion prompt of model m.
func debugTokens(m *pipeline.Served, q url.Values) ([]uint32, *openai.Error) {
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
		if m.Tok == nil {
			return nil, openai.BadRequest("prompt", "no tokenizer configured (--model-path); pass ?tokens= instead")
		}
		var err error
		if tokens, err = m.Tok.Encode(nil, q.Get("prompt"), true); err != nil {
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
	*pipeline.RouteExplanation
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
	c := &pipeline.Call{}
	t, prompt, aerr := rt.api.ExplainTurn(r.Context(), r.URL.Query().Get("client_key"), body, c)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if len(c.Req.Tokens) == 0 || len(c.RouteTokens()) == 0 {
		openai.WriteError(w, openai.BadRequest("input", "the gateway has no tokenizer or chat template for this request (--model-path)"))
		return
	}
	out := responsesExplanation{RouteExplanation: rt.pl.Explain(c, prompt, r)}
	out.Responses = responsesChain{PreviousResponseID: t.Req.PreviousResponseID, Conversation: t.Req.Conversation, Chain: t.Chain,
		HistoryItems: len(t.History), InputItems: len(t.Input), ChatRequest: t.ChatBody(nil, 0)}
	if out.Responses.Chain == nil {
		out.Responses.Chain = []string{}
	}
	pipeline.WriteJSON(w, http.StatusOK, out)
}
