//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/deploy"
	"github.com/kvgate/kvgate/internal/harness"
)

// TestNginxAndPrometheus runs the shipped deployment on loopback: two simulators publishing KV
// events, two gateway replicas, the shipped nginx template (real nginx) round-robin in front,
// and a real Prometheus server with the shipped scrape configuration and rules. It asserts that
// streams through nginx arrive incrementally and complete, that both replicas serve traffic,
// and that Prometheus scraped kvgate's routing metrics and evaluates the shipped rules.
func TestNginxAndPrometheus(t *testing.T) {
	l := newLauncher(t)
	sims := []*harness.Sim{
		startSim(t, l, harness.SimOptions{Name: "sim0", Events: true}),
		startSim(t, l, harness.SimOptions{Name: "sim1", Events: true}),
	}
	var workers []string
	for _, s := range sims {
		workers = append(workers, s.WorkerSpec(true))
	}
	gws := []*harness.Gateway{
		startGateway(t, l, harness.GatewayOptions{Name: "gateway0", Workers: workers}),
		startGateway(t, l, harness.GatewayOptions{Name: "gateway1", Workers: workers}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	nginx, err := l.StartNginx(ctx, harness.NginxOptions{
		Upstreams: []string{fmt.Sprintf("127.0.0.1:%d", gws[0].Port), fmt.Sprintf("127.0.0.1:%d", gws[1].Port)},
		Config: func(listen string, upstreams []string, prefix string) (string, error) {
			return deploy.NginxConfig(deploy.NginxParams{Listen: listen, Upstreams: upstreams, Standalone: true, Prefix: prefix, WorkerProcesses: 1})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, nginx.Process)

	cfg, err := deploy.PrometheusConfig(deploy.PrometheusParams{
		Gateways:       []string{fmt.Sprintf("127.0.0.1:%d", gws[0].PromPort), fmt.Sprintf("127.0.0.1:%d", gws[1].PromPort)},
		Engines:        []string{strings.TrimPrefix(sims[0].URL, "http://"), strings.TrimPrefix(sims[1].URL, "http://")},
		ScrapeInterval: "1s",
	})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := deploy.Rules("1s")
	if err != nil {
		t.Fatal(err)
	}
	prom, err := l.StartPrometheus(ctx, cfg, rules)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, prom.Process)

	t.Run("nginx forwards only the public API", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{http.MethodGet, "/workers"}, {http.MethodPost, "/workers"}, {http.MethodDelete, "/workers"},
			{http.MethodGet, "/debug/route?prompt=x"}, {http.MethodGet, "/metrics"}, {http.MethodGet, "/"},
		} {
			req, _ := http.NewRequest(c.method, nginx.URL+c.path, strings.NewReader(`{"url":"http://127.0.0.1:9"}`))
			resp, err := httpClient.Do(req)
			mustf(t, err == nil, "%s %s through nginx: %v", c.method, c.path, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"not_found_error"`) {
				t.Errorf("%s %s through nginx: got %d %s, want nginx's OpenAI-shaped 404", c.method, c.path, resp.StatusCode, b)
			}
		}
		for _, p := range []string{"/health", "/readiness", "/v1/models"} {
			resp, err := httpClient.Get(nginx.URL + p)
			mustf(t, err == nil, "GET %s through nginx: %v", p, err)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s through nginx: got %d, want 200", p, resp.StatusCode)
			}
		}
	})

	t.Run("streaming through nginx is incremental and complete", func(t *testing.T) {
		// At --time-scale 1 the simulator spends at least its 22 ms step overhead per token, so
		// 40 tokens take about a second; buffering anywhere would deliver them in one burst.
		status, events := streamCompletion(t, nginx.URL, map[string]any{
			"model": testModel, "prompt": text("nginx-stream", 80), "max_tokens": 40,
			"stream_options": map[string]any{"include_usage": true},
		})
		mustf(t, status == http.StatusOK, "status: got %d, want 200", status)
		// The detokenizer may merge a token that ends inside a UTF-8 character into the next
		// chunk, so there can be fewer chunks than tokens; usage counts the tokens.
		mustf(t, len(events) >= 25, "got %d data events, want about one per token (40) and [DONE]", len(events))
		mustf(t, events[len(events)-1].Data == "[DONE]", "last event: got %q, want [DONE]", events[len(events)-1].Data)
		var text strings.Builder
		completionTokens, finish := 0, ""
		for _, e := range events[:len(events)-1] {
			var chunk struct {
				Choices []struct {
					Text         string  `json:"text"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *usage `json:"usage"`
				Error any    `json:"error"`
			}
			if err := json.Unmarshal([]byte(e.Data), &chunk); err != nil {
				t.Fatalf("chunk %q: %v", e.Data, err)
			}
			mustf(t, chunk.Error == nil, "error event in stream: %s", e.Data)
			for _, c := range chunk.Choices {
				text.WriteString(c.Text)
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
			if chunk.Usage != nil {
				completionTokens = chunk.Usage.CompletionTokens
			}
		}
		mustf(t, text.Len() > 0, "no text in the stream")
		mustf(t, finish == "length" && completionTokens == 40, "got finish_reason %q and %d completion tokens, want length and 40", finish, completionTokens)
		first, last := events[0].At, events[len(events)-3].At // before the usage chunk and [DONE]
		spread := last - first
		distinct := 1
		for i := 1; i < len(events); i++ {
			if events[i].At-events[i-1].At > 5*time.Millisecond {
				distinct++
			}
		}
		if spread < 400*time.Millisecond || distinct < 10 {
			t.Errorf("chunks arrived over %v in %d separate bursts, want >= 400ms and >= 10 bursts (nginx or the gateway is buffering)", spread, distinct)
		}
	})

	t.Run("non-streaming through nginx reaches both replicas", func(t *testing.T) {
		for i := range 12 {
			c := postCompletion(t, nginx.URL, map[string]any{"model": testModel, "prompt": text(fmt.Sprintf("nginx-%d", i%3), 60), "max_tokens": 4})
			mustf(t, c.Status == http.StatusOK, "request %d: status %d: %s", i, c.Status, c.Body)
			mustf(t, c.worker() != "", "request %d: no x-kvgate-worker header through nginx", i)
		}
		for i, g := range gws {
			fams := scrape(t, g.MetricsURL())
			n := fams["kvgate_routing_decisions_total"].sum(nil)
			if n < 3 {
				t.Errorf("gateway %d made %v routing decisions, want >= 3 of 13 (round-robin)", i, n)
			}
		}
	})

	t.Run("Prometheus scraped the routing metrics and evaluates the rules", func(t *testing.T) {
		// Both replicas' routing counters, as the shipped "kvgate" job scraped them.
		var last string
		ok := harness.Eventually(45*time.Second, func() bool {
			res, raw := promQuery(t, prom.URL, `sum by (instance) (kvgate_routing_decisions_total{job="kvgate"})`)
			last = raw
			if len(res) != 2 {
				return false
			}
			for _, r := range res {
				if r.value <= 0 {
					return false
				}
			}
			return true
		})
		mustf(t, ok, "Prometheus never had kvgate_routing_decisions_total > 0 for both replicas; last answer: %s", last)

		ok = harness.Eventually(30*time.Second, func() bool {
			res, raw := promQuery(t, prom.URL, `up{job="engines"} == 1`)
			last = raw
			return len(res) == 2
		})
		mustf(t, ok, "engines job: want both simulators up; last answer: %s", last)

		// Recording rules from the shipped rules.yml, evaluated every second here.
		for _, q := range []string{"kvgate:routing_decisions:rate5m", "fleet:prefix_cache_hit_rate:ratio_rate5m", "kvgate:requests:rate5m"} {
			ok = harness.Eventually(45*time.Second, func() bool {
				res, raw := promQuery(t, prom.URL, q)
				last = raw
				return len(res) > 0
			})
			mustf(t, ok, "recording rule %s has no samples; last answer: %s", q, last)
		}
		var rules struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []struct {
						Name      string `json:"name"`
						Health    string `json:"health"`
						LastError string `json:"lastError"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		getJSON(t, prom.URL+"/api/v1/rules", &rules)
		mustf(t, len(rules.Data.Groups) >= 2, "got %d rule groups loaded, want the shipped ones", len(rules.Data.Groups))
		for _, g := range rules.Data.Groups {
			for _, r := range g.Rules {
				if r.Health == "err" {
					t.Errorf("rule %s/%s: %s", g.Name, r.Name, r.LastError)
				}
			}
		}
	})
	t.Run("the event-stream alert fires for a dead engine", func(t *testing.T) {
		sims[1].Kill()
		var last string
		ok := harness.Eventually(45*time.Second, func() bool {
			var alerts struct {
				Data struct {
					Alerts []struct {
						Labels map[string]string `json:"labels"`
						State  string            `json:"state"`
					} `json:"alerts"`
				} `json:"data"`
			}
			getJSON(t, prom.URL+"/api/v1/alerts", &alerts)
			b, _ := json.Marshal(alerts.Data.Alerts)
			last = string(b)
			replicas := map[string]bool{}
			for _, a := range alerts.Data.Alerts {
				if a.Labels["alertname"] == "KvgateEventStreamDown" && a.Labels["worker"] == sims[1].URL && (a.State == "pending" || a.State == "firing") {
					replicas[a.Labels["instance"]] = true
				}
			}
			return len(replicas) == 2
		})
		mustf(t, ok, "KvgateEventStreamDown not pending/firing for %s on both replicas; alerts: %s", sims[1].URL, last)
		// The fleet still has a healthy worker: requests through nginx keep working.
		c := postCompletion(t, nginx.URL, map[string]any{"model": testModel, "prompt": text("after-engine-death", 40), "max_tokens": 2})
		mustf(t, c.Status == http.StatusOK && c.worker() == sims[0].URL, "after the engine died: status %d worker %s, want 200 from %s", c.Status, c.worker(), sims[0].URL)
	})
}

type promSample struct {
	labels map[string]string
	value  float64
}

// promQuery runs an instant query and returns its vector (empty on any error, with the raw
// answer for the failure message).
func promQuery(t *testing.T, base, q string) ([]promSample, string) {
	t.Helper()
	resp, err := httpClient.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "success" {
		return nil, string(b)
	}
	var out []promSample
	for _, s := range r.Data.Result {
		var v float64
		if str, ok := s.Value[1].(string); ok {
			fmt.Sscan(str, &v)
		}
		out = append(out, promSample{s.Metric, v})
	}
	return out, string(b)
}
