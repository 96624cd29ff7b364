package clientauth

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Config configures a Guard. The zero value authenticates nobody and limits nothing: every
// request passes as the anonymous client.
type Config struct {
	// Keys, when it holds keys, is required of every request but OpenPaths ("Authorization:
	// Bearer KEY", "api-key: KEY" or "x-api-key: KEY"), else 401. nil or empty: no client authentication.
	// Guard.SetKeys replaces them while serving.
	Keys *KeySet
	// RateLimit is each client key's sustained request rate in requests per second, with
	// bursts of RateBurst (default: RateLimit rounded up, at least 1); over it the guard
	// answers 429 with Retry-After. Without keys the limit applies to all requests together.
	// 0: no rate limit.
	RateLimit float64
	RateBurst int
	// MaxConcurrentPerKey bounds each client key's requests in progress (a stream counts until
	// it ends); over it the guard answers 429. Without keys it bounds all requests together.
	// 0: no limit.
	MaxConcurrentPerKey int
	// OpenPaths are served without a key and without limits: the probes of load balancers and
	// orchestrators (the router passes /health and /readiness).
	OpenPaths []string
	// Registerer receives the client metrics. nil: not registered.
	Registerer prometheus.Registerer
	// Now is the clock of the rate limits (nil: time.Now).
	Now func() time.Time
	// WriteError writes the guard's 401 and 429 answers in the shape of the API the request
	// calls (the router's: Anthropic's for /v1/messages); nil: openai.WriteError.
	WriteError func(w http.ResponseWriter, r *http.Request, e *openai.Error)
}

// Guard authenticates the requests of the public API against the client keys and admits them
// by their key's limits (DESIGN.md §11). Build it with New and wrap the API handler with Wrap.
// Safe for concurrent use.
//
// A Guard must not be copied.
type Guard struct {
	cfg  Config
	open map[string]bool
	met  *metrics
	// state is the current generation of keys and their limiter state; mu serialises SetKeys.
	state atomic.Pointer[state]
	mu    sync.Mutex
}

// state is one immutable generation of the client keys with each key's limiter state, aligned
// with keys (anon serves requests when there are no keys). SetKeys publishes a new one; a key
// that keeps its name keeps its state, so a reload neither resets nor doubles a client's budget.
type state struct {
	keys    *KeySet
	clients []*client
	anon    *client
}

// New validates cfg and returns its Guard.
func New(cfg Config) (*Guard, error) {
	if cfg.RateBurst == 0 && cfg.RateLimit > 0 {
		cfg.RateBurst = max(1, int(math.Ceil(cfg.RateLimit)))
	}
	if cfg.RateLimit < 0 || math.IsNaN(cfg.RateLimit) || math.IsInf(cfg.RateLimit, 0) || cfg.RateBurst < 0 || cfg.MaxConcurrentPerKey < 0 {
		return nil, errors.New("clientauth: rate limit, burst and concurrency limit must be finite and not negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WriteError == nil {
		cfg.WriteError = func(w http.ResponseWriter, _ *http.Request, e *openai.Error) { openai.WriteError(w, e) }
	}
	g := &Guard{cfg: cfg, open: map[string]bool{}}
	for _, p := range cfg.OpenPaths {
		g.open[p] = true
	}
	var err error
	if g.met, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	g.state.Store(g.newState(cfg.Keys, nil))
	return g, nil
}

// SetKeys replaces the client keys, for a reload (SIGHUP) of --api-key-file. Requests already
// admitted finish under the old keys; the next request sees the new ones. A key whose name
// stays keeps its rate budget and in-flight count. It refuses an empty set: a reload that lost
// every key must not turn authentication off.
func (g *Guard) SetKeys(ks *KeySet) error {
	if ks.Len() == 0 {
		return errors.New("clientauth: set keys: no keys (authentication is not turned off by a reload)")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.Store(g.newState(ks, g.state.Load()))
	return nil
}

// newState builds the state for ks, reusing old's per-name clients.
func (g *Guard) newState(ks *KeySet, old *state) *state {
	byName := map[string]*client{}
	if old != nil {
		for _, c := range old.clients {
			byName[c.name] = c
		}
	}
	st := &state{keys: ks, clients: make([]*client, ks.Len())}
	for i, name := range ks.Names() {
		if c := byName[name]; c != nil {
			st.clients[i] = c
		} else {
			st.clients[i] = g.newClient(name)
		}
	}
	if old != nil && old.anon != nil {
		st.anon = old.anon
	} else {
		st.anon = g.newClient(anonymousClient)
	}
	return st
}

// KeyNames returns the names of the client keys in force (none: authentication is off).
func (g *Guard) KeyNames() []string { return g.state.Load().keys.Names() }

// Wrap returns next guarded: every request but OpenPaths is authenticated and admitted before
// next sees it. Guarding the whole handler rather than each route means a route added later is
// guarded too, and an unknown path says nothing to a caller without a key. A nil Guard returns
// next unchanged.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.open[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		c, grant, aerr := g.authenticate(r)
		if aerr != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvgate"`)
			g.cfg.WriteError(w, r, aerr)
			return
		}
		release, aerr := c.admit(w.Header(), g.cfg.Now())
		if aerr != nil {
			g.cfg.WriteError(w, r, aerr)
			return
		}
		defer release()
		if c.name != anonymousClient || g.state.Load().keys.Len() > 0 {
			r = r.WithContext(context.WithValue(r.Context(), identityKey{}, identity{name: c.name, grant: grant}))
		}
		next.ServeHTTP(w, r)
	})
}

// identityKey is the context key of the admitted client's identity (KeyName, KeyGrant).
type identityKey struct{}

// identity is the client key a request was admitted with.
type identity struct {
	name  string
	grant Grant
}

// KeyName returns the name of the client key a Guard admitted the request of ctx with, or ""
// when there is none (no Guard, no client keys configured, or an open path). Handlers scope
// per-client state by it: the Responses API's stored responses and conversations are visible
// only to the key that created them (a key keeps its state across reloads while its name
// stays; a renamed key starts afresh). Names, never keys, are what it returns.
func KeyName(ctx context.Context) string {
	id, _ := ctx.Value(identityKey{}).(identity)
	return id.name
}

// KeyGrant returns the admission bands of the client key a Guard admitted the request of ctx
// with; ok is false when there is no key (as for KeyName), and requests then ask for their band
// freely.
func KeyGrant(ctx context.Context) (g Grant, ok bool) {
	id, ok := ctx.Value(identityKey{}).(identity)
	return id.grant, ok
}

// authenticate returns the client a request acts as: its key's, or the anonymous client when
// there are no keys. The error is a 401 that never repeats what the request sent.
func (g *Guard) authenticate(r *http.Request) (*client, Grant, *openai.Error) {
	st := g.state.Load()
	if st.keys.Len() == 0 {
		return st.anon, Grant{}, nil
	}
	key, problem := clientCredential(r.Header)
	if problem == "" {
		if i := st.keys.index(key); i >= 0 {
			return st.clients[i], st.keys.grants[i], nil
		}
		problem = "wrong"
	}
	g.met.authFailures.WithLabelValues(problem).Inc()
	msg := "invalid API key"
	if problem == credMissing {
		msg = "missing API key: send it as \"Authorization: Bearer KEY\""
	}
	return nil, Grant{}, &openai.Error{Status: http.StatusUnauthorized, Message: msg, Type: openai.TypeInvalidRequest, Code: "invalid_api_key"}
}
