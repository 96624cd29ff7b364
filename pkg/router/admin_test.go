package router

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
)

func TestAdminWorkersAPI(t *testing.T) {
	a := newFakeWorker(t, "m")
	b := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{AdminToken: "s3cret"}, a.url())
	t.Run("token required", func(t *testing.T) {
		for _, tok := range []string{"", "wrong"} {
			resp, body := g.do(t, http.MethodGet, "/workers", "", tok)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("token %q: got %d %s, want 401", tok, resp.StatusCode, body)
			}
		}
		if resp, _ := g.do(t, http.MethodGet, "/debug/route?tokens=1,2", "", ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/debug/route without token: got %d, want 401", resp.StatusCode)
		}
	})
	t.Run("add list delete", func(t *testing.T) {
		resp, body := g.do(t, http.MethodPost, "/workers", `{"url":"`+b.url()+`","model":"other"}`, "s3cret")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("add: got %d %s", resp.StatusCode, body)
		}
		if resp, _ := g.do(t, http.MethodPost, "/workers", `{"url":"`+b.url()+`"}`, "s3cret"); resp.StatusCode != http.StatusConflict {
			t.Errorf("duplicate add: got %d, want 409", resp.StatusCode)
		}
		if resp, _ := g.do(t, http.MethodPost, "/workers", `{"url":"ftp://x:1"}`, "s3cret"); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("bad spec: got %d, want 400", resp.StatusCode)
		}
		g.waitFor(t, "new worker healthy", func() bool { return len(g.rt.Fleet().Workers()) == 2 && g.rt.Fleet().Workers()[1].Healthy() })
		// The new worker serves its own model.
		r, body := g.post(t, `{"model":"other","prompt":"hi"}`)
		if r.StatusCode != http.StatusOK || r.Header.Get(pipeline.HeaderWorker) != b.url() {
			t.Errorf("request for the added model: got %d on %q (%s)", r.StatusCode, r.Header.Get(pipeline.HeaderWorker), body)
		}
		_, list := g.do(t, http.MethodGet, "/workers", "", "s3cret")
		var out struct {
			Workers []workerView `json:"workers"`
		}
		if err := json.Unmarshal([]byte(list), &out); err != nil {
			t.Fatal(err)
		}
		var urls []string
		for _, w := range out.Workers {
			urls = append(urls, w.URL)
			if !w.Healthy || w.Kind != "http" || w.ReportedModel != "m" {
				t.Errorf("worker view: got %+v", w)
			}
		}
		if d := cmp.Diff([]string{a.url(), b.url()}, urls); d != "" {
			t.Errorf("listed workers (-want +got):\n%s", d)
		}
		_, models := g.do(t, http.MethodGet, "/v1/models", "", "")
		if !strings.Contains(models, `"id":"other"`) || !strings.Contains(models, `"id":"test-model"`) {
			t.Errorf("/v1/models: got %s", models)
		}
		if resp, _ := g.do(t, http.MethodDelete, "/workers?url="+b.url(), "", "s3cret"); resp.StatusCode != http.StatusNoContent {
			t.Errorf("delete: got %d, want 204", resp.StatusCode)
		}
		if resp, _ := g.do(t, http.MethodDelete, "/workers", `{"url":"`+b.url()+`"}`, "s3cret"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("second delete: got %d, want 404", resp.StatusCode)
		}
		if r, _ := g.post(t, `{"model":"other","prompt":"hi"}`); r.StatusCode != http.StatusNotFound {
			t.Errorf("model of the removed worker: got %d, want 404", r.StatusCode)
		}
	})
	t.Run("add with flag syntax", func(t *testing.T) {
		c := newFakeWorker(t, "m")
		resp, body := g.do(t, http.MethodPost, "/workers", "url="+c.url()+",block_size=32", "s3cret")
		if resp.StatusCode != http.StatusCreated || !strings.Contains(body, `"block_size":32`) {
			t.Errorf("add: got %d %s", resp.StatusCode, body)
		}
	})
}

func TestHealthReadinessModelsAndUnknownRoutes(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{}, fw.url())
	for _, tt := range []struct {
		method, path string
		status       int
		contains     string
	}{
		{http.MethodGet, "/health", 200, `"ok"`},
		{http.MethodGet, "/readiness", 200, `"ready"`},
		{http.MethodGet, "/v1/models", 200, `"id":"test-model"`},
		{http.MethodGet, "/v1/chat/nothing", 404, `"not_found_error"`},
		{http.MethodGet, "/v1/completions", 405, ""},
	} {
		resp, body := g.do(t, tt.method, tt.path, "", "")
		if resp.StatusCode != tt.status || !strings.Contains(body, tt.contains) {
			t.Errorf("%s %s: got %d %s, want %d containing %q", tt.method, tt.path, resp.StatusCode, body, tt.status, tt.contains)
		}
	}
}

func TestDebugRouteExplains(t *testing.T) {
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{}, a.url(), b.url())
	toks := strings.Repeat("5,", 40) + "5"
	resp, body := g.do(t, http.MethodGet, "/debug/route?tokens="+toks, "", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	var ex pipeline.RouteExplanation
	if err := json.Unmarshal([]byte(body), &ex); err != nil {
		t.Fatal(err)
	}
	if ex.PromptTokens != 41 || ex.RequestBlocks != 2 || len(ex.Workers) != 2 || ex.Decision == nil || ex.Decision.Reason != "no_match" ||
		ex.Decision.Note != policy.ReasonNoMatch.Explain() {
		t.Errorf("explanation: got %s, want reason no_match explained", body)
	}
	// Explaining records nothing: a real request afterwards still matches nothing.
	r, _ := g.post(t, `{"prompt":[`+toks+`]}`)
	if got := r.Header.Get(pipeline.HeaderReason); got != "no_match" {
		t.Errorf("request after /debug/route: got reason %q, want no_match", got)
	}
	for _, bad := range []string{"/debug/route", "/debug/route?tokens=a,b", "/debug/route?prompt="} {
		if resp, _ := g.do(t, http.MethodGet, bad, "", ""); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: got %d, want 400", bad, resp.StatusCode)
		}
	}
}

func TestMetricsRecorded(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{}, fw.url())
	g.post(t, `{"prompt":"metrics please"}`)
	g.post(t, `{"prompt":""}`)
	if got := testutil.ToFloat64(g.rt.met.requests.WithLabelValues("/v1/completions", "200")); got != 1 {
		t.Errorf("requests 200: got %v, want 1", got)
	}
	if got := testutil.ToFloat64(g.rt.met.requests.WithLabelValues("/v1/completions", "400")); got != 1 {
		t.Errorf("requests 400: got %v, want 1", got)
	}
	if got := g.metricValue(t, "kvgate_routing_decisions_total", "reason", "no_match"); got != 1 {
		t.Errorf("decisions no_match: got %v, want 1", got)
	}
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"kvgate_requests_total", "kvgate_request_duration_seconds", "kvgate_time_to_first_token_seconds",
		"kvgate_routing_decisions_total", "kvgate_matched_blocks", "kvgate_tokenize_duration_seconds", "kvgate_lookup_duration_seconds",
		"kvgate_worker_in_flight", "kvgate_worker_healthy", "kvgate_index_blocks", "kvgate_worker_event_fed"} {
		if !names[n] {
			t.Errorf("metric %s not gathered", n)
		}
	}
}

func TestEngineLoadScrape(t *testing.T) {
	fw := newFakeWorker(t, "m")
	fw.metrics = "# HELP vllm:num_requests_running x\nvllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\nvllm:num_requests_running{model_name=\"m\",engine=\"1\"} 2\nvllm:num_requests_waiting{model_name=\"m\"} 4\nvllm:num_requests_running_other 100\n"
	g := newTestGateway(t, testConfig{EngineMetricsInterval: 10 * time.Millisecond}, fw.url())
	w := g.rt.Fleet().Workers()[0]
	g.waitFor(t, "engine load scraped", func() bool { n, _, ok := w.EngineLoad(); return ok && n == 9 })
	if got := w.Load(time.Now(), 3*10*time.Millisecond); got != 9 {
		t.Errorf("blended load: got %d, want 9", got)
	}
}

// TestDebugRouteLeavesRoundRobinAlone: explaining a route does not advance round_robin's
// rotation, so over two workers the next real request still alternates.
func TestDebugRouteLeavesRoundRobinAlone(t *testing.T) {
	for _, name := range []string{policy.NameRoundRobin, policy.NameRandom} {
		t.Run(name, func(t *testing.T) {
			a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
			cfg := policy.DefaultConfig()
			var n uint64
			cfg.Rand = func() uint64 { n++; return n * 0x9e3779b97f4a7c15 }
			p, err := policy.New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			g := newTestGateway(t, testConfig{Policy: p}, a.url(), b.url())
			for i := 0; i < 3; i++ {
				_, body := g.do(t, http.MethodGet, "/debug/route?tokens=1,2,3", "", "")
				var ex pipeline.RouteExplanation
				if err := json.Unmarshal([]byte(body), &ex); err != nil {
					t.Fatal(err)
				}
				if ex.Decision == nil || ex.Decision.Reason != name || ex.Decision.Worker != "" || ex.Decision.Note == "" || len(ex.Workers) != 2 {
					t.Fatalf("explanation: got %s, want reason %s with a note and no worker", body, name)
				}
			}
			if name != policy.NameRoundRobin {
				return
			}
			r1, _ := g.post(t, `{"prompt":"x"}`)
			for i := 0; i < 3; i++ { // an odd number: had each advanced the rotation, r2 would repeat r1's worker
				g.do(t, http.MethodGet, "/debug/route?tokens=1,2,3", "", "")
			}
			r2, _ := g.post(t, `{"prompt":"x"}`)
			w1, w2 := r1.Header.Get(pipeline.HeaderWorker), r2.Header.Get(pipeline.HeaderWorker)
			if w1 == "" || w1 == w2 {
				t.Errorf("round robin after /debug/route: got workers %q then %q, want the other worker second", w1, w2)
			}
		})
	}
}
