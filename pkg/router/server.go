package router

import (
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"time"

	"github.com/kvgate/kvgate/pkg/anthropic"
	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/endpoint"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// Handler returns the gateway's public API: POST /v1/completions, POST /v1/chat/completions,
// the Responses and Conversations APIs (/v1/responses, /v1/conversations), Anthropic's
// Messages API (POST /v1/messages, /v1/messages/count_tokens), vLLM's render routes (POST
// /v1/chat/completions/render, /v1/completions/render, /v1/messages/render), GET /v1/models, GET /health and GET /readiness, behind Config.Clients (client keys and
// per-key limits) when set; /health and /readiness stay open for probes (OpenPaths). Unknown paths, the admin API's among them, answer an OpenAI-style 404: the admin API
// is served only by AdminHandler (DESIGN.md §11). Metrics are served separately
// (Config.Registerer).
func (rt *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", rt.instrument("/v1/completions", rt.pl.Traced("/v1/completions", rt.pl.Handle(endpoint.Completions))))
	mux.Handle("POST /v1/chat/completions", rt.instrument("/v1/chat/completions", rt.pl.Traced("/v1/chat/completions", rt.pl.Handle(endpoint.Chat))))
	mux.Handle("GET /v1/models", rt.instrument("/v1/models", rt.handleModels))
	mux.Handle("GET /health", rt.instrument("/health", rt.handleHealth))
	mux.Handle("GET /readiness", rt.instrument("/readiness", rt.handleReadiness))
	known := map[string]bool{"/v1/completions": true, "/v1/chat/completions": true, "/v1/models": true, "/health": true, "/readiness": true}
	rt.responsesRoutes(mux, known) // POST /v1/responses and the stored-state calls (responses.go)
	mux.Handle("POST /v1/messages", rt.instrument("/v1/messages", rt.pl.Traced("/v1/messages", rt.api.Messages)))
	mux.Handle("POST /v1/messages/count_tokens", rt.instrument("/v1/messages/count_tokens", rt.api.CountTokens))
	known["/v1/messages"], known["/v1/messages/count_tokens"] = true, true
	rt.poolingRoutes(mux, known) // embeddings, pooling, classify, score, rerank (pooling.go)
	mux.Handle("POST /v1/chat/completions/render", rt.instrument("/v1/chat/completions/render", rt.api.ChatRender))
	mux.Handle("POST /v1/completions/render", rt.instrument("/v1/completions/render", rt.api.CompletionsRender))
	mux.Handle("POST /v1/messages/render", rt.instrument("/v1/messages/render", rt.api.MessagesRender))
	known["/v1/chat/completions/render"], known["/v1/completions/render"], known["/v1/messages/render"] = true, true, true
	mux.Handle("POST /tokenize", rt.instrument("/tokenize", rt.api.Tokenize))
	mux.Handle("POST /detokenize", rt.instrument("/detokenize", rt.api.Detokenize))
	mux.Handle("GET /version", rt.instrument("/version", handleVersion))
	mux.Handle("GET /ping", rt.instrument("/ping", rt.handleHealth))
	mux.Handle("POST /ping", rt.instrument("/ping", rt.handleHealth))
	for _, p := range []string{"/tokenize", "/detokenize", "/version", "/ping"} {
		known[p] = true
	}
	mux.Handle("/", rt.instrument("other", notFound(known)))
	return rt.cfg.Clients.Wrap(mux)
}

// AdminHandler returns the admin API: GET/POST/DELETE /workers and GET and POST /debug/route, each
// requiring "Authorization: Bearer <Config.AdminToken>" when a token is configured. Whoever
// reaches it can change the fleet and so read every prompt: serve it on its own listener,
// loopback unless a token is set (cmd/gateway enforces this).
func (rt *Router) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /workers", rt.instrumentAdmin("/workers", rt.admin(rt.handleListWorkers)))
	mux.Handle("POST /workers", rt.instrumentAdmin("/workers", rt.admin(rt.handleAddWorker)))
	mux.Handle("DELETE /workers", rt.instrumentAdmin("/workers", rt.admin(rt.handleRemoveWorker)))
	mux.Handle("GET /debug/route", rt.instrumentAdmin("/debug/route", rt.admin(rt.handleDebugRoute)))
	mux.Handle("POST /debug/route", rt.instrumentAdmin("/debug/route", rt.admin(rt.handleDebugRouteBody)))
	known := map[string]bool{"/workers": true, "/debug/route": true}
	if rt.cfg.Profiling {
		mux.Handle("GET /debug/pprof/", rt.instrumentAdmin("/debug/pprof", rt.admin(profiles)))
	}
	mux.Handle("/", rt.instrumentAdmin("other", rt.admin(notFound(known))))
	return mux
}

// profiles serves net/http/pprof's pages under /debug/pprof/ (Config.Profiling). The command
// line is not among them: it may hold secrets passed as flags. (The package also registers its
// handlers on http.DefaultServeMux, which no listener of the gateway serves.)
func profiles(w http.ResponseWriter, r *http.Request) {
	switch name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/"); name {
	case "":
		pprof.Index(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "trace":
		pprof.Trace(w, r)
	case "cmdline", "symbol":
		notFound(nil)(w, r)
	default:
		pprof.Handler(name).ServeHTTP(w, r)
	}
}

// notFound answers paths outside known with 404 and known paths with a method they do not
// serve with 405.
func notFound(known map[string]bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if known[r.URL.Path] {
			openai.WriteError(w, &openai.Error{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed on " + r.URL.Path, Type: openai.TypeInvalidRequest, Code: "method_not_allowed"})
			return
		}
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Message: "no route for " + r.Method + " " + r.URL.Path, Type: openai.TypeNotFound, Code: "not_found"})
	}
}

// instrument counts a public API route's requests by code, observes their duration and, with
// the access log on, logs each (access.go).
func (rt *Router) instrument(route string, h http.HandlerFunc) http.Handler {
	return rt.count(route, h, rt.cfg.AccessLog != nil)
}

// instrumentAdmin counts an admin route's requests as instrument does; the access log is the
// public API's.
func (rt *Router) instrumentAdmin(route string, h http.HandlerFunc) http.Handler {
	return rt.count(route, h, false)
}

// count counts requests by route and code and observes their duration, logging each when log.
func (rt *Router) count(route string, h http.HandlerFunc, log bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &pipeline.StatusWriter{ResponseWriter: w}
		defer func() {
			code := sw.Code
			if code == 0 {
				code = http.StatusOK
			}
			rt.met.requests.WithLabelValues(route, statusText(code)).Inc()
			rt.met.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		if log {
			rt.logged(route, sw, r, h, start)
			return
		}
		h(sw, r)
	})
}

// statusText returns the decimal code without allocating for the common ones.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 400:
		return "400"
	case 404:
		return "404"
	case 499:
		return "499"
	case 502:
		return "502"
	case 503:
		return "503"
	}
	b := []byte{byte('0' + code/100%10), byte('0' + code/10%10), byte('0' + code%10)}
	return string(b)
}

// WriteClientError writes a client-key guard's answer (clientauth.Config.WriteError) in the
// shape of the API the request calls: Anthropic's on /v1/messages and its subpaths, OpenAI's
// elsewhere.
func WriteClientError(w http.ResponseWriter, r *http.Request, e *openai.Error) {
	if p := r.URL.Path; p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/") {
		anthropic.WriteError(w, e)
		return
	}
	openai.WriteError(w, e)
}

// OpenPaths are the public API's paths served without a client key (Config.Clients): the
// probes of load balancers and orchestrators (/ping is vLLM's, for SageMaker).
var OpenPaths = []string{"/health", "/readiness", "/ping"}

// admin guards a handler with the admin token when one is configured. The token is compared
// as client keys are (clientauth.KeySet.Match): in constant time, whatever its length.
func (rt *Router) admin(h http.HandlerFunc) http.HandlerFunc {
	if rt.adminKeys == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := clientauth.BearerToken(r.Header.Values("Authorization"))
		if _, match := rt.adminKeys.Match(tok); !ok || !match {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvgate-admin"`)
			openai.WriteError(w, &openai.Error{Status: http.StatusUnauthorized, Message: "admin token required", Type: openai.TypeAuth, Code: "unauthorized"})
			return
		}
		h(w, r)
	}
}

// poolingRoutes adds the pooling and audio endpoints to the public mux and their paths to
// known.
func (rt *Router) poolingRoutes(mux *http.ServeMux, known map[string]bool) {
	for _, p := range endpoint.PoolingPaths {
		mux.Handle("POST "+p, rt.instrument(p, rt.pl.Traced(p, rt.pl.Handle(endpoint.Pass(p)))))
		known[p] = true
	}
	for _, p := range endpoint.AudioPaths {
		mux.Handle("POST "+p, rt.instrument(p, rt.pl.Traced(p, rt.pl.Handle(endpoint.Form(p)))))
		known[p] = true
	}
}

// responsesRoutes adds the Responses and Conversations API routes to the public mux and their
// paths to known (405 for other methods).
func (rt *Router) responsesRoutes(mux *http.ServeMux, known map[string]bool) {
	routes := rt.api.ResponsesRoutes()
	patterns := make([]string, 0, len(routes))
	for p := range routes {
		patterns = append(patterns, p)
	}
	sort.Strings(patterns)
	for _, p := range patterns {
		_, path, _ := strings.Cut(p, " ")
		mux.Handle(p, rt.instrument(path, routes[p]))
	}
	known["/v1/responses"], known["/v1/conversations"] = true, true
}
