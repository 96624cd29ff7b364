package router

import (
	"encoding/json"
	"net/http"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/openai"
)

// The Responses API's calls on stored state (retrieve, delete, input items) and the
// Conversations API, each in the scope of the client key (clientauth.KeyName), and
// /debug/route for a Responses body.

// replyJSON writes a stored object's JSON, or the error.
func replyJSON(w http.ResponseWriter, body []byte, aerr *openai.Error) {
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}

func scopeOf(r *http.Request) string { return clientauth.KeyName(r.Context()) }

func (rt *Router) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	b, aerr := rt.responses.Response(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

func (rt *Router) handleDeleteResponse(w http.ResponseWriter, r *http.Request) {
	b, aerr := rt.responses.DeleteResponse(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

// listQuery reads after, limit and order.
func listQuery(r *http.Request) (conversation.ListQuery, *openai.Error) {
	q := r.URL.Query()
	return conversation.ParseListQuery(q.Get("after"), q.Get("limit"), q.Get("order"))
}

func (rt *Router) handleInputItems(w http.ResponseWriter, r *http.Request) {
	q, aerr := listQuery(r)
	var b []byte
	if aerr == nil {
		b, aerr = rt.responses.InputItems(r.Context(), scopeOf(r), r.PathValue("id"), q)
	}
	replyJSON(w, b, aerr)
}

// withBody runs fn with the request's bounded body.
func (rt *Router) withBody(w http.ResponseWriter, r *http.Request, fn func(body []byte) ([]byte, *openai.Error)) {
	body, release, aerr := openai.ReadBody(w, r, rt.cfg.MaxBodyBytes)
	defer release()
	var b []byte
	if aerr == nil {
		b, aerr = fn(body)
	}
	replyJSON(w, b, aerr)
}

func (rt *Router) handleCreateConversation(w http.ResponseWriter, r *http.Request) {
	rt.withBody(w, r, func(body []byte) ([]byte, *openai.Error) {
		return rt.responses.CreateConversation(r.Context(), scopeOf(r), body)
	})
}

func (rt *Router) handleGetConversation(w http.ResponseWriter, r *http.Request) {
	b, aerr := rt.responses.GetConversation(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

func (rt *Router) handleUpdateConversation(w http.ResponseWriter, r *http.Request) {
	rt.withBody(w, r, func(body []byte) ([]byte, *openai.Error) {
		return rt.responses.UpdateConversation(r.Context(), scopeOf(r), r.PathValue("id"), body)
	})
}

func (rt *Router) handleDeleteConversation(w http.ResponseWriter, r *http.Request) {
	b, aerr := rt.responses.DeleteConversation(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

func (rt *Router) handleListItems(w http.ResponseWriter, r *http.Request) {
	q, aerr := listQuery(r)
	var b []byte
	if aerr == nil {
		b, aerr = rt.responses.ListItems(r.Context(), scopeOf(r), r.PathValue("id"), q)
	}
	replyJSON(w, b, aerr)
}

func (rt *Router) handleAddItems(w http.ResponseWriter, r *http.Request) {
	rt.withBody(w, r, func(body []byte) ([]byte, *openai.Error) {
		return rt.responses.AddItems(r.Context(), scopeOf(r), r.PathValue("id"), body)
	})
}

func (rt *Router) handleGetItem(w http.ResponseWriter, r *http.Request) {
	b, aerr := rt.responses.GetItem(r.Context(), scopeOf(r), r.PathValue("id"), r.PathValue("item_id"))
	replyJSON(w, b, aerr)
}

func (rt *Router) handleDeleteItem(w http.ResponseWriter, r *http.Request) {
	b, aerr := rt.responses.DeleteItem(r.Context(), scopeOf(r), r.PathValue("id"), r.PathValue("item_id"))
	replyJSON(w, b, aerr)
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
