package endpoint

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

func (a *API) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	b, aerr := a.responses.Response(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

func (a *API) handleDeleteResponse(w http.ResponseWriter, r *http.Request) {
	b, aerr := a.responses.DeleteResponse(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

// listQuery reads after, limit and order.
func listQuery(r *http.Request) (conversation.ListQuery, *openai.Error) {
	q := r.URL.Query()
	return conversation.ParseListQuery(q.Get("after"), q.Get("limit"), q.Get("order"))
}

func (a *API) handleInputItems(w http.ResponseWriter, r *http.Request) {
	q, aerr := listQuery(r)
	var b []byte
	if aerr == nil {
		b, aerr = a.responses.InputItems(r.Context(), scopeOf(r), r.PathValue("id"), q)
	}
	replyJSON(w, b, aerr)
}

// withBody runs fn with the request's bounded body.
func (a *API) withBody(w http.ResponseWriter, r *http.Request, fn func(body []byte) ([]byte, *openai.Error)) {
	body, release, aerr := openai.ReadBody(w, r, a.pl.Config().MaxBodyBytes)
	defer release()
	var b []byte
	if aerr == nil {
		b, aerr = fn(body)
	}
	replyJSON(w, b, aerr)
}

func (a *API) handleCreateConversation(w http.ResponseWriter, r *http.Request) {
	a.withBody(w, r, func(body []byte) ([]byte, *openai.Error) {
		return a.responses.CreateConversation(r.Context(), scopeOf(r), body)
	})
}

func (a *API) handleGetConversation(w http.ResponseWriter, r *http.Request) {
	b, aerr := a.responses.GetConversation(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

func (a *API) handleUpdateConversation(w http.ResponseWriter, r *http.Request) {
	a.withBody(w, r, func(body []byte) ([]byte, *openai.Error) {
		return a.responses.UpdateConversation(r.Context(), scopeOf(r), r.PathValue("id"), body)
	})
}

func (a *API) handleDeleteConversation(w http.ResponseWriter, r *http.Request) {
	b, aerr := a.responses.DeleteConversation(r.Context(), scopeOf(r), r.PathValue("id"))
	replyJSON(w, b, aerr)
}

func (a *API) handleListItems(w http.ResponseWriter, r *http.Request) {
	q, aerr := listQuery(r)
	var b []byte
	if aerr == nil {
		b, aerr = a.responses.ListItems(r.Context(), scopeOf(r), r.PathValue("id"), q)
	}
	replyJSON(w, b, aerr)
}

func (a *API) handleAddItems(w http.ResponseWriter, r *http.Request) {
	a.withBody(w, r, func(body []byte) ([]byte, *openai.Error) {
		return a.responses.AddItems(r.Context(), scopeOf(r), r.PathValue("id"), body)
	})
}

func (a *API) handleGetItem(w http.ResponseWriter, r *http.Request) {
	b, aerr := a.responses.GetItem(r.Context(), scopeOf(r), r.PathValue("id"), r.PathValue("item_id"))
	replyJSON(w, b, aerr)
}

func (a *API) handleDeleteItem(w http.ResponseWriter, r *http.Request) {
	b, aerr := a.responses.DeleteItem(r.Context(), scopeOf(r), r.PathValue("id"), r.PathValue("item_id"))
	replyJSON(w, b, aerr)
}

// ResponsesRoutes returns the Responses and Conversations APIs' handlers by mux pattern:
// POST /v1/responses (traced) and the calls on stored state.
func (a *API) ResponsesRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/responses":                            a.pl.Traced("/v1/responses", a.Responses),
		"GET /v1/responses/{id}":                        a.handleGetResponse,
		"DELETE /v1/responses/{id}":                     a.handleDeleteResponse,
		"GET /v1/responses/{id}/input_items":            a.handleInputItems,
		"POST /v1/conversations":                        a.handleCreateConversation,
		"GET /v1/conversations/{id}":                    a.handleGetConversation,
		"POST /v1/conversations/{id}":                   a.handleUpdateConversation,
		"DELETE /v1/conversations/{id}":                 a.handleDeleteConversation,
		"GET /v1/conversations/{id}/items":              a.handleListItems,
		"POST /v1/conversations/{id}/items":             a.handleAddItems,
		"GET /v1/conversations/{id}/items/{item_id}":    a.handleGetItem,
		"DELETE /v1/conversations/{id}/items/{item_id}": a.handleDeleteItem,
	}
}
