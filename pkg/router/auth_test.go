package router

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvgate/kvgate/pkg/clientauth"
)

func mustKeySet(t *testing.T, keys ...clientauth.APIKey) *clientauth.KeySet {
	t.Helper()
	ks, err := clientauth.NewKeySet(keys)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// doHeaders sends a request to the public API with the given headers.
func (g *testGateway) doHeaders(t *testing.T, method, path, body string, h map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, g.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestAdminAPINotOnPublicHandler(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{}, fw.url())
	for _, tt := range []struct{ method, path, body string }{
		{http.MethodGet, "/workers", ""},
		{http.MethodPost, "/workers", `{"url":"http://127.0.0.1:9"}`},
		{http.MethodDelete, "/workers?url=" + fw.url(), ""},
		{http.MethodGet, "/debug/route?tokens=1,2", ""},
		{http.MethodGet, "/debug/pprof/", ""},
	} {
		resp, body := doOn(t, g.srv, tt.method, tt.path, tt.body, "")
		if resp.StatusCode != http.StatusNotFound || openAIError(t, body).Type != "not_found_error" {
			t.Errorf("public %s %s: got %d %s, want the OpenAI 404", tt.method, tt.path, resp.StatusCode, body)
		}
	}
	if n := len(g.rt.Fleet().Workers()); n != 1 {
		t.Errorf("workers after POSTs to the public API: got %d, want 1", n)
	}
	// The admin handler serves the admin API and nothing else.
	if resp, body := doOn(t, g.admin, http.MethodGet, "/workers", "", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("admin GET /workers: got %d %s, want 200", resp.StatusCode, body)
	}
	for _, p := range []string{"/v1/completions", "/v1/models", "/health"} {
		if resp, _ := doOn(t, g.admin, http.MethodGet, p, "", ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("admin GET %s: got %d, want 404", p, resp.StatusCode)
		}
	}
}

func TestAdminTokenGuardsUnknownAdminPaths(t *testing.T) {
	g := newTestGateway(t, testConfig{AdminToken: "tok"}, newFakeWorker(t, "m").url())
	if resp, _ := doOn(t, g.admin, http.MethodGet, "/debug/other", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown admin path without token: got %d, want 401", resp.StatusCode)
	}
	if resp, _ := doOn(t, g.admin, http.MethodGet, "/debug/other", "", "tok"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown admin path with token: got %d, want 404", resp.StatusCode)
	}
}

func TestClientKeys(t *testing.T) {
	fw := newFakeWorker(t, "m")
	const good, other = "sk-good-0123456789", "sk-other-abcdef"
	g := newTestGateway(t, testConfig{APIKeys: mustKeySet(t, clientauth.APIKey{Name: "team-a", Key: good}, clientauth.APIKey{Name: "team-b", Key: other})}, fw.url())
	body := `{"prompt":"hi"}`
	tests := []struct {
		name   string
		method string
		path   string
		h      map[string]string
		status int
	}{
		{"no key", http.MethodPost, "/v1/completions", nil, 401},
		{"wrong key", http.MethodPost, "/v1/completions", map[string]string{"Authorization": "Bearer sk-wrong"}, 401},
		{"prefix of a key", http.MethodPost, "/v1/completions", map[string]string{"Authorization": "Bearer " + good[:10]}, 401},
		{"basic auth", http.MethodPost, "/v1/completions", map[string]string{"Authorization": "Basic " + good}, 401},
		{"bearer", http.MethodPost, "/v1/completions", map[string]string{"Authorization": "Bearer " + good}, 200},
		{"lower-case scheme", http.MethodPost, "/v1/completions", map[string]string{"Authorization": "bearer " + other}, 200},
		{"api-key header", http.MethodPost, "/v1/completions", map[string]string{"api-key": good}, 200},
		{"models needs a key", http.MethodGet, "/v1/models", nil, 401},
		{"models with key", http.MethodGet, "/v1/models", map[string]string{"Authorization": "Bearer " + good}, 200},
		{"unknown path needs a key", http.MethodGet, "/v1/nothing", nil, 401},
		{"admin path needs a key, then is unknown", http.MethodGet, "/workers", map[string]string{"Authorization": "Bearer " + good}, 404},
		{"health is open", http.MethodGet, "/health", nil, 200},
		{"readiness is open", http.MethodGet, "/readiness", nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ""
			if tt.method == http.MethodPost {
				b = body
			}
			resp, rb := g.doHeaders(t, tt.method, tt.path, b, tt.h)
			if resp.StatusCode != tt.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, rb, tt.status)
			}
			if tt.status != 401 {
				return
			}
			e := openAIError(t, rb)
			if e.Code == nil || *e.Code != "invalid_api_key" || e.Type != "invalid_request_error" {
				t.Errorf("401 body: got %s, want code invalid_api_key", rb)
			}
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			for _, secret := range []string{good, other, "sk-wrong", good[:10]} {
				if strings.Contains(rb, secret) {
					t.Errorf("401 body %s repeats a key", rb)
				}
			}
		})
	}
	// The client's credentials never reach the worker.
	for len(fw.headers) > 0 {
		h := <-fw.headers
		if h.Get("Authorization") != "" || h.Get("Api-Key") != "" {
			t.Errorf("worker received client credentials: %v", h)
		}
	}
	m := g.metricValue(t, "kvgate_client_requests_total", "key", "team-a")
	if m < 3 {
		t.Errorf("kvgate_client_requests_total{key=team-a}: got %v, want >= 3", m)
	}
	if got := g.metricValue(t, "kvgate_client_auth_failures_total", "reason", "missing"); got != 3 {
		t.Errorf("auth failures (missing): got %v, want 3", got)
	}
	if got := g.metricValue(t, "kvgate_client_auth_failures_total", "reason", "wrong"); got != 2 {
		t.Errorf("auth failures (wrong): got %v, want 2", got)
	}
	if got := g.metricValue(t, "kvgate_client_auth_failures_total", "reason", "malformed"); got != 1 {
		t.Errorf("auth failures (malformed): got %v, want 1", got)
	}
	names, err := testutil.GatherAndCount(g.reg)
	if err != nil || names == 0 {
		t.Fatalf("gather: %d, %v", names, err)
	}
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if s := mf.String(); strings.Contains(s, good) || strings.Contains(s, other) {
			t.Errorf("metric %s holds a key", mf.GetName())
		}
	}
}

func TestSetAPIKeysReload(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{APIKeys: mustKeySet(t, clientauth.APIKey{Name: "a", Key: "key-one"})}, fw.url())
	bearer := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	if r, _ := g.doHeaders(t, http.MethodGet, "/v1/models", "", bearer("key-one")); r.StatusCode != 200 {
		t.Fatalf("before reload: got %d, want 200", r.StatusCode)
	}
	if err := g.clients.SetKeys(mustKeySet(t, clientauth.APIKey{Name: "a", Key: "key-two"}, clientauth.APIKey{Name: "b", Key: "key-three"})); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key    string
		status int
	}{{"key-one", 401}, {"key-two", 200}, {"key-three", 200}} {
		if r, _ := g.doHeaders(t, http.MethodGet, "/v1/models", "", bearer(tt.key)); r.StatusCode != tt.status {
			t.Errorf("after reload, %s: got %d, want %d", tt.key, r.StatusCode, tt.status)
		}
	}
	if err := g.clients.SetKeys(mustKeySet(t)); err == nil {
		t.Error("SetAPIKeys(empty): got nil error, want a refusal")
	}
	if err := g.clients.SetKeys(nil); err == nil {
		t.Error("SetAPIKeys(nil): got nil error, want a refusal")
	}
	if r, _ := g.doHeaders(t, http.MethodGet, "/v1/models", "", bearer("key-two")); r.StatusCode != 200 {
		t.Errorf("after refused reloads: got %d, want the keys kept (200)", r.StatusCode)
	}
	if got := g.clients.KeyNames(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("APIKeyNames: got %v, want [a b]", got)
	}
}

// TestAdminProfiles: with Profiling, the admin API serves Go's runtime profiles behind the
// admin token, never the command line (it may hold secrets passed as flags); without it, none.
func TestAdminProfiles(t *testing.T) {
	g := newTestGateway(t, testConfig{AdminToken: "tok", Profiling: true}, newFakeWorker(t, "m").url())
	if resp, _ := doOn(t, g.admin, http.MethodGet, "/debug/pprof/heap", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("heap profile without token: got %d, want 401", resp.StatusCode)
	}
	resp, body := doOn(t, g.admin, http.MethodGet, "/debug/pprof/heap", "", "tok")
	if resp.StatusCode != http.StatusOK || len(body) == 0 || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("heap profile: got %d %q, %d bytes, want a profile", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	if resp, body := doOn(t, g.admin, http.MethodGet, "/debug/pprof/goroutine?debug=1", "", "tok"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("goroutine profile: got %d %.80q", resp.StatusCode, body)
	}
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/nosuch"} {
		if resp, _ := doOn(t, g.admin, http.MethodGet, p, "", "tok"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: got %d, want 404", p, resp.StatusCode)
		}
	}
	off := newTestGateway(t, testConfig{}, newFakeWorker(t, "m").url())
	if resp, _ := doOn(t, off.admin, http.MethodGet, "/debug/pprof/heap", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("heap profile with profiling off: got %d, want 404", resp.StatusCode)
	}
}
