//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestReplicasAgree: two gateway replicas on the same engines' event streams hold the same
// index, so they score every worker alike (the claim that makes replicas interchangeable
// behind nginx, docs/operations.md §1). The caches are small enough that the traffic evicts
// blocks, so removals must reach both replicas too; the second replica starts after the
// traffic and must rebuild what it missed from the engines' replay buffers. Once the streams
// settle, /debug/route on both reports the same matched blocks per worker for every probe
// prompt, and some probes match something (so the comparison is not between two empty
// indexes).
func TestReplicasAgree(t *testing.T) {
	l := newLauncher(t)
	var sims []*harness.Sim
	var specs []string
	for i := range 3 {
		// 300 blocks of 16 tokens per engine: the 36 prompts below (~25 blocks each) do not fit.
		s := startSim(t, l, harness.SimOptions{Name: fmt.Sprintf("sim%d", i), Events: true, TimeScale: 0.05, Args: []string{"--num-blocks", "300"}})
		sims = append(sims, s)
		specs = append(specs, s.WorkerSpec(true))
	}
	a := startGateway(t, l, harness.GatewayOptions{Name: "gateway-a", Workers: specs})

	var probes []string
	for i := range 36 {
		p := text(fmt.Sprintf("replica-probe-%d", i), 400)
		probes = append(probes, p)
		base := a.URL
		if i%3 == 0 {
			base = sims[i%len(sims)].URL // some cached behind the gateways' backs
		}
		c := postCompletion(t, base, map[string]any{"model": testModel, "prompt": p + " first", "max_tokens": 2})
		mustf(t, c.Status == http.StatusOK, "warming prompt %d via %s: status %d: %s", i, base, c.Status, c.Body)
	}
	b := startGateway(t, l, harness.GatewayOptions{Name: "gateway-b", Workers: specs})

	// matched returns, per probe, the matched blocks from events of each worker on gw.
	matched := func(gw string) [][]int {
		out := make([][]int, len(probes))
		for i, p := range probes {
			r := debugRoute(t, gw, p+" probe")
			row := make([]int, len(sims))
			for _, w := range r.Workers {
				for k, s := range sims {
					if w.URL == s.URL {
						row[k] = w.MatchedEvents
					}
				}
			}
			out[i] = row
		}
		return out
	}
	var ma, mb [][]int
	ok := harness.Eventually(20*time.Second, func() bool {
		ma, mb = matched(a.AdminURL), matched(b.AdminURL)
		return slices.EqualFunc(ma, mb, slices.Equal[[]int])
	})
	if !ok {
		var diffs []string
		for i := range probes {
			if !slices.Equal(ma[i], mb[i]) {
				diffs = append(diffs, fmt.Sprintf("probe %d: a %v, b %v", i, ma[i], mb[i]))
			}
		}
		t.Fatalf("the replicas disagree after 20 s on %d of %d probes (matched blocks per worker):\n%s", len(diffs), len(probes), strings.Join(diffs, "\n"))
	}
	hits, total := 0, 0
	for _, row := range ma {
		for _, m := range row {
			total += m
			if m > 0 {
				hits++
				break
			}
		}
	}
	mustf(t, hits >= len(probes)/4, "only %d of %d probes match any worker (%d blocks in all): the comparison says little", hits, len(probes), total)
	mustf(t, hits < len(probes), "all %d probes still match: the caches were meant to evict some", len(probes))
	t.Logf("replicas agree on %d probes × %d workers; %d probes match some worker (%d blocks in all)", len(probes), len(sims), hits, total)
}
