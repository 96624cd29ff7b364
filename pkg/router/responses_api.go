package router

import (
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
