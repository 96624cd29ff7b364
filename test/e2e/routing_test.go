//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/metricnames"
)

// TestRoutingFollowsKVEvents runs the gateway binary against three simulator processes: sim0
// and sim1 publish KV events over ZMQ (with replay), sim2 is configured without events. It
// shows that a long prefix cached on a worker (learned only from that worker's events) routes
// there, that the worker without events is scored from the approximate tree, and that killing
// a worker takes it out without failing new requests once the health check notices.
func TestRoutingFollowsKVEvents(t *testing.T) {
	l := newLauncher(t)
	sims := []*harness.Sim{
		startSim(t, l, harness.SimOptions{Name: "sim0", Events: true}),
		startSim(t, l, harness.SimOptions{Name: "sim1", Events: true}),
		startSim(t, l, harness.SimOptions{Name: "sim2"}),
	}
	gw := startGateway(t, l, harness.GatewayOptions{
		Name:    "gateway",
		Workers: []string{sims[0].WorkerSpec(true), sims[1].WorkerSpec(true), sims[2].WorkerSpec(false)},
		Policy:  "cache_aware",
		Args:    []string{"--health-interval", "250ms", "--health-timeout", "250ms", "--log-level", "debug"},
	})

	var workers workersView
	getJSON(t, gw.AdminURL+"/workers", &workers)
	fed := map[string]bool{}
	for _, w := range workers.Workers {
		fed[w.URL] = w.EventFed
	}
	mustf(t, len(workers.Workers) == 3, "got %d workers, want 3", len(workers.Workers))
	mustf(t, !fed[sims[2].URL], "sim2 (no kv_events) is event-fed: %+v", workers)

	// A prefix cached on a worker by a request sent straight to it: the gateway can only know
	// from that worker's KV events.
	prefixes := []string{text("events-a", 400), text("events-b", 400)}
	for i, p := range prefixes {
		c := postCompletion(t, sims[i].URL, map[string]any{"model": testModel, "prompt": p + " warm", "max_tokens": 1})
		mustf(t, c.Status == http.StatusOK, "warming sim%d: status %d: %s", i, c.Status, c.Body)
	}

	t.Run("a long prefix goes to the worker whose events published it", func(t *testing.T) {
		for i, p := range prefixes {
			var r routeExplanation
			ok := harness.Eventually(20*time.Second, func() bool {
				r = debugRoute(t, gw.AdminURL, p+" question one")
				return r.Decision.Worker == sims[i].URL && r.Decision.Reason == "cache_hit"
			})
			mustf(t, ok, "prefix %d: /debug/route never chose sim%d (%s) with cache_hit from its events; last: %+v", i, i, sims[i].URL, r)
			for _, w := range r.Workers {
				if w.URL == sims[i].URL && (w.MatchedEvents < r.RequestBlocks-2 || !w.EventFed) {
					t.Errorf("prefix %d: sim%d matched %d of %d blocks from events (event_fed %v), want nearly all", i, i, w.MatchedEvents, r.RequestBlocks, w.EventFed)
				}
			}
			for q := range 3 {
				c := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": fmt.Sprintf("%s question %d", p, q), "max_tokens": 4})
				mustf(t, c.Status == http.StatusOK, "status %d: %s", c.Status, c.Body)
				if c.worker() != sims[i].URL || c.matched() < r.RequestBlocks-2 {
					t.Errorf("prefix %d request %d: went to %s with %d matched blocks, want %s with about %d", i, q, c.worker(), c.matched(), sims[i].URL, r.RequestBlocks)
				}
			}
		}
	})

	t.Run("the worker without events is scored from the approximate tree", func(t *testing.T) {
		// With no match anywhere the policy picks the least-loaded worker, ties at random, so
		// send fresh prefixes until one lands on sim2; (2/3)^40 makes a miss negligible.
		var prefix string
		for k := range 40 {
			p := text(fmt.Sprintf("tree-%d", k), 300)
			c := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": p + " first", "max_tokens": 2})
			mustf(t, c.Status == http.StatusOK, "status %d: %s", c.Status, c.Body)
			if c.worker() == sims[2].URL {
				prefix = p
				break
			}
		}
		mustf(t, prefix != "", "no fresh prefix was routed to sim2 in 40 tries")
		r := debugRoute(t, gw.AdminURL, prefix+" second")
		var tree int
		for _, w := range r.Workers {
			if w.URL == sims[2].URL {
				tree = w.MatchedTree
				if w.EventFed || w.ScoredFrom != "tree" {
					t.Errorf("sim2: got event_fed %v scored_from %q, want false and tree", w.EventFed, w.ScoredFrom)
				}
			}
		}
		mustf(t, tree >= r.RequestBlocks-2, "sim2 tree match: got %d of %d blocks, want nearly all", tree, r.RequestBlocks)
		c := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": prefix + " second", "max_tokens": 2})
		mustf(t, c.Status == http.StatusOK, "status %d: %s", c.Status, c.Body)
		if c.worker() != sims[2].URL || c.matched() < r.RequestBlocks-2 {
			t.Errorf("repeat: went to %s with %d matched blocks, want sim2 (%s) with about %d", c.worker(), c.matched(), sims[2].URL, r.RequestBlocks)
		}
	})

	t.Run("live metrics are the ones the source registers", func(t *testing.T) {
		exported, _, err := metricnames.Source(repoRoot, "pkg", "cmd")
		if err != nil {
			t.Fatal(err)
		}
		gwFams := scrape(t, gw.MetricsURL())
		simFams := scrape(t, sims[0].MetricsURL())
		var unknown []string
		for _, fams := range []map[string]*metricFamily{gwFams, simFams} {
			for name := range fams {
				if (strings.HasPrefix(name, "kvgate_") || strings.HasPrefix(name, "vllm:")) && !exported[name] {
					unknown = append(unknown, name)
				}
			}
		}
		sort.Strings(unknown)
		if len(unknown) > 0 {
			t.Errorf("served but not found by metricnames.Source (the static dashboard check would miss them): %v", unknown)
		}
		for _, want := range []string{"kvgate_routing_decisions_total", "kvgate_matched_blocks", "kvgate_time_to_first_token_seconds",
			"kvgate_requests_total", "kvgate_worker_healthy", "kvgate_index_blocks", "kvgate_worker_event_stream_state"} {
			mustf(t, gwFams[want] != nil, "gateway does not serve %s", want)
		}
		mustf(t, gwFams["kvgate_routing_decisions_total"].sum(map[string]string{"reason": "cache_hit"}) >= 6,
			"kvgate_routing_decisions_total{reason=cache_hit}: want >= 6")
		for _, want := range []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_requests_running",
			"vllm:num_requests_waiting", "vllm:time_to_first_token_seconds"} {
			mustf(t, simFams[want] != nil, "simulator does not serve %s", want)
		}
		mustf(t, simFams["vllm:prefix_cache_hits_total"].sum(nil) > 0, "sim0 reports no prefix cache hits after repeated prefixes")
	})

	t.Run("a killed worker is taken out without failing new requests", func(t *testing.T) {
		sims[0].Kill()
		ok := harness.Eventually(20*time.Second, func() bool {
			var w workersView
			getJSON(t, gw.AdminURL+"/workers", &w)
			for _, x := range w.Workers {
				if x.URL == sims[0].URL {
					return !x.Healthy
				}
			}
			return true // removed altogether is fine too
		})
		mustf(t, ok, "the gateway still reports the killed sim0 healthy after 20s")
		var got []string
		for q := range 12 {
			// Half of them carry the prefix that lived on sim0.
			p := prefixes[0]
			if q%2 == 1 {
				p = text(fmt.Sprintf("after-kill-%d", q), 200)
			}
			c := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": fmt.Sprintf("%s again %d", p, q), "max_tokens": 3})
			if c.Status != http.StatusOK {
				t.Errorf("request %d after the kill: status %d: %s", q, c.Status, c.Body)
			}
			got = append(got, c.worker())
		}
		if slices.Contains(got, sims[0].URL) {
			t.Errorf("requests after the kill went to %v, which includes the dead sim0", got)
		}
	})
}
