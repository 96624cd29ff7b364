//go:build e2e || reliability

package reliability

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// Late-joiner scenarios: engines with a small cache and a small replay buffer, so that a
// gateway starting after some traffic cannot rebuild its index from any replay window.
var (
	lateSimArgs  = []string{"--num-blocks", "300", "--kv-history", "8"}
	lateBridge   = []string{"--history", "16"}
	latePrompts  = 30 // per engine: ~450 blocks each, so each 300-block cache turns over
	latePromptSz = 150
)

func latePrompt(engine string, i int) string {
	return text(fmt.Sprintf("late-%s-%d", engine, i), latePromptSz)
}

// cursorOf returns a gateway's kvgate_kv_stream_cursor for worker u, rank 0.
func cursorOf(t *testing.T, gw *harness.Gateway, u string) float64 {
	t.Helper()
	return scrape(t, gw.MetricsURL()).sum("kvgate_kv_stream_cursor", map[string]string{"worker": u, "rank": "0"})
}

// routeView is what two replicas must agree on for one prompt: the blocks each worker is
// matched with, and the worker chosen when some worker matches.
type routeView struct {
	Matched map[string]int
	Worker  string
}

func viewRoute(t *testing.T, gw, prompt string) routeView {
	t.Helper()
	r := debugRoute(t, gw, prompt)
	v := routeView{Matched: map[string]int{}}
	best := 0
	for _, w := range r.Workers {
		v.Matched[w.URL] = w.MatchedEvents
		best = max(best, w.MatchedEvents)
	}
	if best > 0 && r.Decision != nil {
		// Without a match the pick is a load decision, which may differ between replicas.
		v.Worker = r.Decision.Worker
	}
	return v
}

// TestLateJoinerBehindBridge: two engines behind `kvbridge serve` sidecars; an early gateway
// follows them from the start. Traffic turns the engines' caches over until both the engines'
// replay buffers (8 batches) and the sidecars' histories (16) rolled over. A second gateway
// replica started then gets each sidecar's snapshot: from its first request its /debug/route
// equals the early replica's for every prompt (same matched blocks per worker, same worker),
// including prompts cached long before any replay window.
func TestLateJoinerBehindBridge(t *testing.T) {
	l := newLauncher(t)
	engines := []string{"a", "b"}
	var sims []*harness.Sim
	var specs []string
	for _, name := range engines {
		s := startSim(t, l, harness.SimOptions{Name: name, Events: true, TimeScale: simScale, Args: lateSimArgs})
		port := testutil.FreePort(t)
		startBridge(t, s, port, "bridge-"+name, lateBridge...)
		sims = append(sims, s)
		specs = append(specs, fmt.Sprintf("url=%s,kv_events=grpc://127.0.0.1:%d", s.URL, port))
	}
	early := startGateway(t, l, harness.GatewayOptions{Name: "early", Workers: specs})
	for i := range latePrompts {
		for j, s := range sims {
			warm(t, s, latePrompt(engines[j], i))
		}
	}
	for _, s := range sims {
		_, idx, real, ok := indexAgrees(t, early.AdminURL, s, 20*time.Second)
		mustf(t, ok, "early replica on %s: index %d blocks, engine %d", s.Name, idx, real)
		// The windows rolled over: more batches than the sidecar keeps (and the engine
		// replays), and blocks were evicted.
		mustf(t, cursorOf(t, early, s.URL) > 16, "%s: sidecar cursor %v, want past its history (16)", s.Name, cursorOf(t, early, s.URL))
		removed := scrape(t, early.MetricsURL()).sum("kvgate_kv_events_total", map[string]string{"worker": s.URL, "kind": "removed"})
		mustf(t, removed > 0, "%s: no block was ever removed: its cache (%d blocks) never turned over", s.Name, real)
	}

	startedAt := time.Now()
	late := startGateway(t, l, harness.GatewayOptions{Name: "late", Workers: specs})
	// Bounded wait for the streams to connect and deliver the snapshot: the late replica's
	// cursor reaches the early one's (no traffic flows meanwhile).
	connected, ok := poll(20*time.Second, func() bool {
		for _, s := range sims {
			if workers(t, late.AdminURL)[s.URL].EventStream != "up" || cursorOf(t, late, s.URL) < cursorOf(t, early, s.URL) {
				return false
			}
		}
		return true
	})
	mustf(t, ok, "late replica's streams did not catch up with the early one's cursors")

	oldest, matched, compared := -1, 0, 0
	for i := range latePrompts {
		for j := range sims {
			p := latePrompt(engines[j], i)
			want, got := viewRoute(t, early.AdminURL, p), viewRoute(t, late.AdminURL, p)
			compared++
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("prompt %s-%d: late replica %+v, early replica %+v", engines[j], i, got, want)
			}
			if m := want.Matched[sims[j].URL]; m > 0 {
				matched += m
				if oldest < 0 {
					oldest = i
				}
			}
		}
	}
	mustf(t, matched > 0 && oldest >= 0 && oldest < latePrompts/2,
		"early replica matched %d blocks, oldest matched prompt %d: nothing from before the windows to compare", matched, oldest)
	snaps := scrape(t, late.MetricsURL()).sum("kvgate_kv_snapshots_total", nil)
	mustf(t, snaps >= float64(len(sims)), "late replica counted %v snapshots, want %d", snaps, len(sims))
	gaps := scrape(t, late.MetricsURL()).sum("kvgate_kv_event_gaps_total", nil)
	mustf(t, gaps == 0, "late replica counted %v gaps, want 0", gaps)

	// Live batches continue the snapshot on the late replica.
	fresh := text("late-fresh", latePromptSz)
	warm(t, sims[0], fresh)
	_, ok = poll(20*time.Second, func() bool {
		return fmt.Sprint(viewRoute(t, early.AdminURL, fresh)) == fmt.Sprint(viewRoute(t, late.AdminURL, fresh)) &&
			viewRoute(t, late.AdminURL, fresh).Matched[sims[0].URL] > 0
	})
	mustf(t, ok, "a prompt cached after the late replica joined: late %+v, early %+v", viewRoute(t, late.AdminURL, fresh), viewRoute(t, early.AdminURL, fresh))
	report(t, "late_joiner_bridge", "connected_ms", ms(connected), "since_start_ms", ms(time.Since(startedAt)),
		"prompts_compared", compared, "matched_blocks", matched, "oldest_matched_prompt", oldest, "snapshots", snaps)
}

// TestLateJoinerZMQConvergence measures what a late replica sees when it reads the engine's
// ZMQ stream directly (no sidecar): only the engine's replay buffer, then live batches. The
// traffic after it joins is either all new prompts, or half new and half repeats of a hot set
// cached before it joined (cache hits publish nothing). After each stretch of traffic it
// reports the fraction of the early replica's matched blocks, over every prompt sent so far,
// that the late replica also matches (docs/reliability.md, "Late joiners"). It asserts only
// that the fraction starts below 1 (the replay buffer does not hold the cache) and never
// exceeds 1.
func TestLateJoinerZMQConvergence(t *testing.T) {
	for _, hot := range []int{0, 8} {
		t.Run(fmt.Sprintf("hot=%d", hot), func(t *testing.T) { testLateJoinerZMQ(t, hot) })
	}
}

func testLateJoinerZMQ(t *testing.T, hot int) {
	l := newLauncher(t)
	s := startSim(t, l, harness.SimOptions{Name: "sim", Events: true, TimeScale: simScale, Args: lateSimArgs})
	early := startGateway(t, l, harness.GatewayOptions{Name: "early", Workers: []string{s.WorkerSpec(true)}})
	var sent []string
	for i := range latePrompts {
		p := latePrompt("zmq", i)
		warm(t, s, p)
		sent = append(sent, p)
	}
	_, idx, real, ok := indexAgrees(t, early.AdminURL, s, 20*time.Second)
	mustf(t, ok, "early replica: index %d blocks, engine %d", idx, real)
	// The hot set is the last prompts warmed: they are the ones still cached.
	hotSet := sent[len(sent)-hot:]

	late := startGateway(t, l, harness.GatewayOptions{Name: "late", Workers: []string{s.WorkerSpec(true)}})
	_, ok = poll(20*time.Second, func() bool { return workers(t, late.AdminURL)[s.URL].EventStream == "up" })
	mustf(t, ok, "late replica's stream never came up")

	// fraction waits until both replicas applied the same batches, then measures.
	fraction := func() (float64, int) {
		_, ok := poll(10*time.Second, func() bool { return cursorOf(t, late, s.URL) == cursorOf(t, early, s.URL) })
		mustf(t, ok, "replicas' cursors did not meet")
		var both, want int
		for _, p := range sent {
			e, g := viewRoute(t, early.AdminURL, p).Matched[s.URL], viewRoute(t, late.AdminURL, p).Matched[s.URL]
			want += e
			both += min(e, g)
		}
		if want == 0 {
			return 1, 0
		}
		return float64(both) / float64(want), want
	}
	var points []any
	f0, blocks0 := fraction()
	mustf(t, f0 < 1, "the late replica matched %.2f of the early one's blocks right after joining: the replay buffer held the whole cache", f0)
	points = append(points, "hot", hot, "f_0ms", fmt.Sprintf("%.2f", f0), "early_blocks", blocks0)
	traffic := time.Duration(0)
	next := 0
	for _, until := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		start := time.Now()
		for traffic+time.Since(start) < until {
			if hot > 0 && next%2 == 0 {
				warm(t, s, hotSet[(next/2)%hot])
			} else {
				p := latePrompt("zmq-new", next)
				warm(t, s, p)
				sent = append(sent, p)
			}
			next++
		}
		traffic += time.Since(start)
		f, _ := fraction()
		mustf(t, f <= 1, "fraction %.2f above 1", f)
		points = append(points, fmt.Sprintf("f_%dms", until/time.Millisecond), fmt.Sprintf("%.2f", f))
	}
	points = append(points, "requests", next, "requests_per_s", fmt.Sprintf("%.0f", float64(next)/traffic.Seconds()))
	report(t, "late_joiner_zmq", points...)
}
