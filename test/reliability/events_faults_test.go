//go:build e2e || reliability

package reliability

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// indexAgrees polls until the gateway's index holds exactly the blocks the simulator really
// caches (GET /workers index_blocks against the simulator's /debug/cache) and returns the
// counts; ok is false when they still differ at the deadline.
func indexAgrees(t *testing.T, gw string, s *harness.Sim, d time.Duration) (took time.Duration, idx, real int, ok bool) {
	took, ok = poll(d, func() bool {
		idx, real = workers(t, gw)[s.URL].IndexBlocks, simBlocks(t, s)
		return idx == real && real > 0
	})
	return took, idx, real, ok
}

// TestEngineRestart: an engine restarts (sequence numbers from 0, empty cache) without the
// health check noticing. The gateway sees the sequence restart on the engine's first batch,
// clears that worker and takes the new batches, so its index equals the new, empty-then-warm
// cache and requests for the old prefix stop matching there.
func TestEngineRestart(t *testing.T) {
	l := newLauncher(t)
	a := startSim(t, l, harness.SimOptions{Name: "a", Events: true, TimeScale: simScale})
	b := startSim(t, l, harness.SimOptions{Name: "b", Events: true, TimeScale: simScale})
	// A slow health check, so the event stream alone has to notice the restart.
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{a.WorkerSpec(true), b.WorkerSpec(true)},
		Args: []string{"--health-interval", "1m"}})
	old := text("engine-restart-old", 300)
	warm(t, a, old)
	_, idx, real, ok := indexAgrees(t, gw.AdminURL, a, 20*time.Second)
	mustf(t, ok, "before the restart: index %d blocks, engine %d", idx, real)
	mustf(t, debugRoute(t, gw.AdminURL, old).matchedEvents(a.URL) > 0, "old prefix not matched on a before the restart")
	resetsBefore := scrape(t, gw.MetricsURL()).sum("kvgate_kv_worker_resets_total", map[string]string{"worker": a.URL})

	a.Kill()
	restartedAt := time.Now()
	a2 := restartSim(t, l, a, "a-restarted")
	ready := time.Since(restartedAt)
	// One engine step = one event batch.
	fresh := text("engine-restart-new", 120)
	warm(t, a2, fresh)
	batchAt := time.Now()
	var matchedOld int
	detect, ok := poll(20*time.Second, func() bool {
		matchedOld = debugRoute(t, gw.AdminURL, old).matchedEvents(a2.URL)
		return matchedOld == 0 && workers(t, gw.AdminURL)[a2.URL].IndexBlocks == simBlocks(t, a2)
	})
	mustf(t, ok, "after the engine restart and one batch: old prefix still matches %d blocks on it (index %d, engine %d)",
		matchedOld, workers(t, gw.AdminURL)[a2.URL].IndexBlocks, simBlocks(t, a2))
	resets := scrape(t, gw.MetricsURL()).sum("kvgate_kv_worker_resets_total", map[string]string{"worker": a.URL}) - resetsBefore
	mustf(t, resets >= 1, "no worker reset counted for the restarted engine")
	// A request for the old prefix is now routed without a cache hit on the restarted engine.
	r := completion(t, gw.URL, map[string]any{"model": testModel, "prompt": old + " again", "max_tokens": 2})
	mustf(t, r.Status == http.StatusOK, "request after the restart: %d %s", r.Status, r.Body)
	mustf(t, !(r.worker() == a2.URL && r.Header.Get("X-Kvgate-Route-Reason") == "cache_hit"),
		"old prefix still routed to the restarted engine as a cache hit")
	report(t, "engine_restart", "engine_ready_ms", ms(ready), "cleared_after_first_batch_ms", ms(detect),
		"since_restart_ms", ms(time.Since(restartedAt)-time.Since(batchAt)+detect), "resets", resets, "old_prefix_matched_after", matchedOld,
		"request_status", r.Status, "request_worker_is_restarted", r.worker() == a2.URL, "request_reason", r.Header.Get("X-Kvgate-Route-Reason"))
}

// TestLostEventBatches: two engines drop every 3rd event batch on their PUB. The gateway
// detects each gap; with a replay endpoint it fetches the missed batches and its index equals
// the engine's cache exactly; without one it clears the worker and continues, never holding a
// block the engine does not have (and counting the resets).
func TestLostEventBatches(t *testing.T) {
	l := newLauncher(t)
	drop := []string{"--fault-drop-every", "3"}
	withReplay := startSim(t, l, harness.SimOptions{Name: "replay", Events: true, TimeScale: simScale, Args: drop})
	noReplay := startSim(t, l, harness.SimOptions{Name: "noreplay", Events: true, TimeScale: simScale, Args: drop})
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway",
		Workers: []string{withReplay.WorkerSpec(true), "url=" + noReplay.URL + ",kv_events=" + noReplay.KVEvents}})
	const prompts = 24
	start := time.Now()
	for i := range prompts {
		warm(t, withReplay, text(fmt.Sprintf("lost-r-%d", i), 200))
		warm(t, noReplay, text(fmt.Sprintf("lost-n-%d", i), 200))
	}
	// The last batch may itself be a dropped one: a final step makes its gap visible.
	warm(t, withReplay, text("lost-tail-r", 40))
	warm(t, noReplay, text("lost-tail-n", 40))
	sent := time.Since(start)

	took, idx, real, ok := indexAgrees(t, gw.AdminURL, withReplay, 20*time.Second)
	mustf(t, ok, "with replay: index holds %d blocks, engine %d; want equal once quiescent", idx, real)
	fams := scrape(t, gw.MetricsURL())
	gaps := fams.sum("kvgate_kv_event_gaps_total", map[string]string{"worker": withReplay.URL})
	replays := fams.sum("kvgate_kv_replay_requests_total", map[string]string{"worker": withReplay.URL, "result": "ok"})
	mustf(t, gaps >= prompts/3 && replays >= 1, "with replay: %v gaps, %v successful replays; want >= %d gaps and >= 1 replay", gaps, replays, prompts/3)
	report(t, "lost_batches_replay", "gaps", gaps, "replays_ok", replays,
		"index_blocks", idx, "engine_blocks", real, "converged_after_last_batch_ms", ms(took), "warm_ms", ms(sent))

	// Without replay the index may hold fewer blocks than the engine, never more, and each gap
	// clears the worker (counted).
	var nidx, nreal int
	var nresets float64
	_, ok = poll(20*time.Second, func() bool {
		f := scrape(t, gw.MetricsURL())
		nresets = f.sum("kvgate_kv_worker_resets_total", map[string]string{"worker": noReplay.URL})
		nidx, nreal = workers(t, gw.AdminURL)[noReplay.URL].IndexBlocks, simBlocks(t, noReplay)
		return nresets >= 1 && nidx <= nreal && nidx > 0
	})
	mustf(t, ok, "without replay: index %d blocks, engine %d, %v resets; want resets >= 1 and index <= engine", nidx, nreal, nresets)
	// The most recent prompt survives the last clear only if no gap followed it; the tail
	// prompt's batch is the newest, so a fresh request for it routes by events or not at all —
	// but never to a block the engine lacks (index <= engine checked above).
	ngaps := scrape(t, gw.MetricsURL()).sum("kvgate_kv_event_gaps_total", map[string]string{"worker": noReplay.URL})
	report(t, "lost_batches_no_replay", "gaps", ngaps, "resets", nresets, "index_blocks", nidx, "engine_blocks", nreal)
}

// TestGatewayRestartRebuildsIndex: a new gateway process rebuilds its index from the engines'
// replay buffers: the matched blocks of a known prompt are the same before and after.
func TestGatewayRestartRebuildsIndex(t *testing.T) {
	l := newLauncher(t)
	a := startSim(t, l, harness.SimOptions{Name: "a", Events: true, TimeScale: simScale})
	b := startSim(t, l, harness.SimOptions{Name: "b", Events: true, TimeScale: simScale})
	specs := []string{a.WorkerSpec(true), b.WorkerSpec(true)}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway1", Workers: specs})
	pa, pb := text("rebuild-a", 300), text("rebuild-b", 200)
	warm(t, a, pa)
	warm(t, b, pb)
	for _, s := range []*harness.Sim{a, b} {
		_, idx, real, ok := indexAgrees(t, gw.AdminURL, s, 20*time.Second)
		mustf(t, ok, "first gateway: %s index %d blocks, engine %d", s.Name, idx, real)
	}
	before := map[string]int{}
	for _, p := range []string{pa, pb} {
		r := debugRoute(t, gw.AdminURL, p)
		before[p+a.URL], before[p+b.URL] = r.matchedEvents(a.URL), r.matchedEvents(b.URL)
	}
	mustf(t, before[pa+a.URL] > 0 && before[pb+b.URL] > 0, "nothing matched before the restart: %v", before)
	if err := gw.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	startedAt := time.Now()
	gw2 := startGateway(t, l, harness.GatewayOptions{Name: "gateway2", Workers: specs})
	ready := time.Since(startedAt)
	var after map[string]int
	took, ok := poll(20*time.Second, func() bool {
		after = map[string]int{}
		for _, p := range []string{pa, pb} {
			r := debugRoute(t, gw2.AdminURL, p)
			after[p+a.URL], after[p+b.URL] = r.matchedEvents(a.URL), r.matchedEvents(b.URL)
		}
		for k, v := range before {
			if after[k] != v {
				return false
			}
		}
		return true
	})
	mustf(t, ok, "restarted gateway: matched blocks %v, want %v", after, before)
	report(t, "gateway_restart_replay", "matched_a", before[pa+a.URL], "matched_b", before[pb+b.URL],
		"gateway_ready_ms", ms(ready), "rebuilt_after_ready_ms", ms(took), "rebuilt_ms", ms(ready+took))
}
