package router

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/clientauth"
)

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestRateLimitPerKey(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{APIKeys: mustKeySet(t, clientauth.APIKey{Name: "a", Key: "key-a"}, clientauth.APIKey{Name: "b", Key: "key-b"}), RateLimit: 0.5, RateBurst: 2, Now: clock.Now}, fw.url())
	send := func(key string) *http.Response {
		r, _ := g.doHeaders(t, http.MethodPost, "/v1/completions", `{"prompt":"hi"}`, map[string]string{"Authorization": "Bearer " + key})
		return r
	}
	for i := range 2 {
		if r := send("key-a"); r.StatusCode != 200 {
			t.Fatalf("request %d within the burst: got %d, want 200", i+1, r.StatusCode)
		}
	}
	r, body := g.doHeaders(t, http.MethodPost, "/v1/completions", `{"prompt":"hi"}`, map[string]string{"Authorization": "Bearer key-a"})
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: got %d %s, want 429", r.StatusCode, body)
	}
	e := openAIError(t, body)
	if e.Type != "rate_limit_error" || e.Code == nil || *e.Code != "rate_limit_exceeded" {
		t.Errorf("429 body: got %s, want type rate_limit_error, code rate_limit_exceeded", body)
	}
	// One token every 2 s: the next is 2 s away.
	if got := r.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After: got %q, want 2", got)
	}
	if ms, err := strconv.Atoi(r.Header.Get("Retry-After-Ms")); err != nil || ms < 1900 || ms > 2000 {
		t.Errorf("Retry-After-Ms: got %q, want about 2000", r.Header.Get("Retry-After-Ms"))
	}
	// Another key has its own budget.
	if r := send("key-b"); r.StatusCode != 200 {
		t.Errorf("other key: got %d, want 200", r.StatusCode)
	}
	clock.Advance(2 * time.Second)
	if r := send("key-a"); r.StatusCode != 200 {
		t.Errorf("after waiting Retry-After: got %d, want 200", r.StatusCode)
	}
	if got := g.metricValue(t, "kvgate_client_limited_total", "key", "a", "limit", "rate"); got != 1 {
		t.Errorf("kvgate_client_limited_total{key=a,limit=rate}: got %v, want 1", got)
	}
	if got := g.metricValue(t, "kvgate_client_requests_total", "key", "a"); got != 3 {
		t.Errorf("kvgate_client_requests_total{key=a}: got %v, want 3", got)
	}
	// A reload keeps the budget of a key that keeps its name.
	if err := g.clients.SetKeys(mustKeySet(t, clientauth.APIKey{Name: "a", Key: "key-a2"})); err != nil {
		t.Fatal(err)
	}
	if r := send("key-a2"); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after a reload, same name: got %d, want 429 (the budget is kept)", r.StatusCode)
	}
}

func TestConcurrencyLimitPerKey(t *testing.T) {
	fw := newFakeWorker(t, "m")
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n"))
		http.NewResponseController(w).Flush()
		started <- struct{}{}
		<-release
		w.Write([]byte("data: [DONE]\n\n"))
	}
	g := newTestGateway(t, testConfig{APIKeys: mustKeySet(t, clientauth.APIKey{Name: "a", Key: "key-a"}, clientauth.APIKey{Name: "b", Key: "key-b"}), MaxConcurrentPerKey: 1}, fw.url())
	hdr := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", stringsReader(`{"prompt":"hi","stream":true}`))
		req.Header.Set("Authorization", "Bearer key-a")
		resp, err := g.srv.Client().Do(req)
		if err != nil {
			done <- -1
			return
		}
		drain(resp)
		done <- resp.StatusCode
	}()
	select {
	case <-started:
	case <-time.After(defaultTestTimeout):
		t.Fatal("stream did not start")
	}
	r, body := g.doHeaders(t, http.MethodPost, "/v1/completions", `{"prompt":"hi"}`, hdr("key-a"))
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1" {
		t.Errorf("second concurrent request: got %d (Retry-After %q) %s, want 429 with Retry-After 1", r.StatusCode, r.Header.Get("Retry-After"), body)
	}
	go func() { <-started }() // key b's stream starts too
	rb := make(chan int, 1)
	go func() {
		r, _ := g.doHeaders(t, http.MethodPost, "/v1/completions", `{"prompt":"hi"}`, hdr("key-b"))
		rb <- r.StatusCode
	}()
	close(release)
	if got := <-done; got != 200 {
		t.Errorf("the stream: got %d, want 200", got)
	}
	if got := <-rb; got != 200 {
		t.Errorf("other key meanwhile: got %d, want 200", got)
	}
	if r, _ := g.doHeaders(t, http.MethodPost, "/v1/completions", `{"prompt":"hi"}`, hdr("key-a")); r.StatusCode != 200 {
		t.Errorf("after the stream ended: got %d, want 200", r.StatusCode)
	}
	if got := g.metricValue(t, "kvgate_client_limited_total", "key", "a", "limit", "concurrency"); got != 1 {
		t.Errorf("kvgate_client_limited_total{key=a,limit=concurrency}: got %v, want 1", got)
	}
}

// Without keys the limits bound all requests together, as the anonymous client.
func TestLimitsWithoutKeys(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	g := newTestGateway(t, testConfig{RateLimit: 1, Now: clock.Now}, newFakeWorker(t, "m").url())
	if r, _ := g.post(t, `{"prompt":"hi"}`); r.StatusCode != 200 {
		t.Fatalf("first: got %d, want 200", r.StatusCode)
	}
	if r, _ := g.post(t, `{"prompt":"hi"}`); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second in the same second: got %d, want 429", r.StatusCode)
	}
	if r, _ := g.do(t, http.MethodGet, "/health", "", ""); r.StatusCode != 200 {
		t.Errorf("/health under the limit: got %d, want 200 (probes are not limited)", r.StatusCode)
	}
	if got := g.metricValue(t, "kvgate_client_limited_total", "key", "anonymous", "limit", "rate"); got != 1 {
		t.Errorf("limited{key=anonymous}: got %v, want 1", got)
	}
}

func TestNewRejectsBadLimits(t *testing.T) {
	for _, cfg := range []Config{{AdminToken: "has space"}, {MaxPrompts: -1}, {MaxN: -1}} {
		cfg.Models = []Model{{Name: "m", Policy: &fixedPolicy{}, Index: mustIndex(t)}}
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): got nil error", cfg)
		}
	}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// drain reads and closes a response body.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
