package router

import (
	"errors"
	"net/http"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The client side of DESIGN.md §11: every request to the public API, except the probes, is
// matched against the client keys (when there are any) and then admitted by its key's limits
// (limits.go) before the mux sees it. Guarding the whole handler rather than each /v1 route
// means a route added later is guarded too, and an unknown path says nothing to a caller
// without a key.

// openPaths are served without a key: the probes of load balancers and orchestrators.
var openPaths = map[string]bool{"/health": true, "/readiness": true}

// authState is one immutable generation of the client keys with each key's limiter state,
// aligned with keys (anon serves requests when there are no keys). SetAPIKeys publishes a new
// one; a key that keeps its name keeps its state, so a reload neither resets nor doubles a
// client's budget.
type authState struct {
	keys    *KeySet
	clients []*client
	anon    *client
}

// SetAPIKeys replaces the client keys, for a reload (SIGHUP) of --api-key-file. Requests
// already admitted finish under the old keys; the next request sees the new ones. A key whose
// name stays keeps its rate budget and in-flight count. It refuses an empty set: a reload that
// lost every key must not turn authentication off.
func (rt *Router) SetAPIKeys(ks *KeySet) error {
	if ks.Len() == 0 {
		return errors.New("router: set api keys: no keys (authentication is not turned off by a reload)")
	}
	rt.authMu.Lock()
	defer rt.authMu.Unlock()
	rt.auth.Store(rt.newAuthState(ks, rt.auth.Load()))
	return nil
}

// newAuthState builds the state for ks, reusing old's per-name clients.
func (rt *Router) newAuthState(ks *KeySet, old *authState) *authState {
	byName := map[string]*client{}
	if old != nil {
		for _, c := range old.clients {
			byName[c.name] = c
		}
	}
	st := &authState{keys: ks, clients: make([]*client, ks.Len())}
	for i, name := range ks.Names() {
		if c := byName[name]; c != nil {
			st.clients[i] = c
		} else {
			st.clients[i] = rt.newClient(name)
		}
	}
	if old != nil && old.anon != nil {
		st.anon = old.anon
	} else {
		st.anon = rt.newClient(anonymousClient)
	}
	return st
}

// APIKeyNames returns the names of the client keys in force (none: authentication is off).
func (rt *Router) APIKeyNames() []string { return rt.auth.Load().keys.Names() }

// guardClients authenticates and admits every request to next except openPaths.
func (rt *Router) guardClients(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		c, aerr := rt.authenticate(r)
		if aerr != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvgate"`)
			openai.WriteError(w, aerr)
			return
		}
		release, aerr := c.admit(w.Header(), rt.now())
		if aerr != nil {
			openai.WriteError(w, aerr)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// authenticate returns the client a request acts as: its key's, or the anonymous client when
// there are no keys. The error is a 401 that never repeats what the request sent.
func (rt *Router) authenticate(r *http.Request) (*client, *openai.Error) {
	st := rt.auth.Load()
	if st.keys.Len() == 0 {
		return st.anon, nil
	}
	key, problem := clientCredential(r.Header)
	if problem == "" {
		if i := st.keys.index(key); i >= 0 {
			return st.clients[i], nil
		}
		problem = "wrong"
	}
	rt.cmet.authFailures.WithLabelValues(problem).Inc()
	msg := "invalid API key"
	if problem == credMissing {
		msg = "missing API key: send it as \"Authorization: Bearer KEY\""
	}
	return nil, &openai.Error{Status: http.StatusUnauthorized, Message: msg, Type: openai.TypeInvalidRequest, Code: "invalid_api_key"}
}
