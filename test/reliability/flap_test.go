//go:build e2e || reliability

package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

const (
	// flapPrefixes × flapPrefixWords words is the shared-prefix working set the flapping test
	// spreads over three workers: it fits their caches, so a prefix is copied only when a
	// request finds its worker down (or the gateway thinks it is).
	flapPrefixes    = 30
	flapPrefixWords = 300
	// flapLoadFor is how long the test sends requests while the worker flaps.
	flapLoadFor = 12 * time.Second
	// flapCopyBound bounds the blocks the flapping may copy, as a share of the blocks the
	// fleet holds at the end: issue 21's duplicate bound. Measured: none with this gateway;
	// 11–20% (three runs each) when a failed check took the serving worker out of rotation.
	flapCopyBound = 0.05
)

// fleetCache returns what the simulators really cache (GET /debug/cache): distinct blocks over
// the fleet, and (simulator, block) pairs. The simulators hash a block's chain the same way, so
// a block cached twice has one hash. Measured in the engines, not in the gateway's index: an
// index that forgot a worker's blocks would hide their copies.
func fleetCache(t *testing.T, sims []*harness.Sim) (distinct, held int) {
	t.Helper()
	seen := map[uint64]bool{}
	for _, s := range sims {
		var dc struct {
			Ranks []struct {
				Hashes []uint64 `json:"hashes"`
			} `json:"ranks"`
		}
		getJSON(t, s.URL+"/debug/cache", &dc)
		for _, r := range dc.Ranks {
			for _, h := range r.Hashes {
				held++
				seen[h] = true
			}
		}
	}
	return len(seen), held
}

// TestFlappingWorker: a worker whose health check fails every other second while it goes on
// serving (simworker --fault-health-flap 1s, checked every second) must not have its cached
// prefixes copied over the fleet (issue 21): while it answers requests, a failed check is
// checked again rather than taking it out of rotation (fleet: inconclusive), so its prefixes
// stay where they are cached. The test measures, in the simulators' caches, the blocks held by
// more than one worker before and after the flapping load.
func TestFlappingWorker(t *testing.T) {
	l := newLauncher(t)
	flapper := startSim(t, l, harness.SimOptions{Name: "flapper", Events: true, TimeScale: simScale, Args: []string{"--fault-health-flap", "1s"}})
	specs, sims := []string{flapper.WorkerSpec(true)}, []*harness.Sim{flapper}
	for i := range 2 {
		s := startSim(t, l, harness.SimOptions{Name: fmt.Sprintf("steady%d", i), Events: true, TimeScale: simScale})
		specs, sims = append(specs, s.WorkerSpec(true)), append(sims, s)
	}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: specs, Args: []string{"--health-interval", "1s", "--health-timeout", "300ms"}})
	prefix := func(i int) string { return text(fmt.Sprintf("flap-prefix-%d", i), flapPrefixWords) }
	// Each prefix once, one at a time: spread over the workers by load, one copy each.
	for i := range flapPrefixes {
		r := completion(t, gw.URL, map[string]any{"model": testModel, "prompt": prefix(i) + " first", "max_tokens": 2})
		mustf(t, r.Status == 200, "warm-up request %d: %d %s", i, r.Status, r.Body)
	}
	keys0, blocks0 := fleetCache(t, sims)
	mustf(t, keys0 > 0, "the fleet cached nothing in the warm-up")

	var (
		mu       sync.Mutex
		failed   int
		requests int
	)
	ctx, cancel := context.WithTimeout(context.Background(), flapLoadFor)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 21))
			for n := 0; ctx.Err() == nil; n++ {
				r := completion(t, gw.URL, map[string]any{"model": testModel, "prompt": fmt.Sprintf("%s q%d-%d", prefix(rng.IntN(flapPrefixes)), g, n), "max_tokens": 2})
				mu.Lock()
				requests++
				if r.Status != 200 {
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	<-ctx.Done()
	wg.Wait()
	// The gateway must have seen the flapper's checks fail, or the test tests nothing.
	var view struct {
		Workers []struct {
			URL      string `json:"url"`
			Healthy  bool   `json:"healthy"`
			Failures int    `json:"health_check_failures"`
		} `json:"workers"`
	}
	getJSON(t, gw.AdminURL+"/workers", &view)
	checksFailed := 0
	for _, w := range view.Workers {
		if w.URL == flapper.URL {
			checksFailed = w.Failures
		}
	}
	mustf(t, checksFailed >= 3, "the flapping worker failed %d health checks: the test tests nothing", checksFailed)
	mustf(t, failed == 0, "%d of %d requests failed while a worker's health flapped", failed, requests)

	keys, blocks := fleetCache(t, sims)
	copied := (blocks - keys) - (blocks0 - keys0)
	share := float64(copied) / float64(blocks)
	report(t, "flapping_worker", "requests", requests, "failed_checks", checksFailed, "distinct_blocks", keys, "held_blocks", blocks, "copied_blocks", copied,
		"copied_share", fmt.Sprintf("%.3f", share), "bound", flapCopyBound)
	mustf(t, share <= flapCopyBound, "the flapping worker's prefixes were copied: %d blocks (%.1f%% of the %d the fleet holds), bound %.0f%%",
		copied, 100*share, blocks, 100*flapCopyBound)
}
