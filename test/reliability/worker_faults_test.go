//go:build e2e || reliability

package reliability

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// loadResult counts the outcomes of a background request loop.
type loadResult struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string  // first few failure descriptions
	lastFail   time.Time // when the last failure was seen
}

func (l *loadResult) fail(desc string) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastFail = time.Now()
	if len(l.failures) < 5 {
		l.failures = append(l.failures, desc)
	}
}

// backgroundLoad sends short non-streaming completions from conc goroutines until stop is
// closed (or at most maxPer requests each), and returns a wait function.
func backgroundLoad(gw string, conc, maxPer int, stop <-chan struct{}, res *loadResult) (wait func()) {
	var wg sync.WaitGroup
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range maxPer {
				select {
				case <-stop:
					return
				default:
				}
				b := fmt.Appendf(nil, `{"model":%q,"prompt":%q,"max_tokens":4}`, testModel, text(fmt.Sprintf("load-%d-%d", g, i), 40))
				ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
				r, err := do(ctx, http.MethodPost, gw+"/v1/completions", b, nil)
				cancel()
				switch {
				case err != nil:
					res.fail(err.Error())
				case r.Status != http.StatusOK:
					res.fail(fmt.Sprintf("status %d: %s", r.Status, r.Body))
				default:
					res.ok.Add(1)
				}
			}
		}()
	}
	return wg.Wait
}

// TestWorkerKilled: SIGKILL a simulator mid-stream (under load) and another one while idle.
// In-flight streams end with an OpenAI error event; no client request fails once the health
// check has noticed (the gateway also retries requests refused before the first byte); the
// dead worker's blocks leave the index; restarted on the same ports, it is used again.
func TestWorkerKilled(t *testing.T) {
	top := t // processes started in subtests live as long as the whole test
	l := newLauncher(t)
	sims := map[string]*harness.Sim{}
	var specs []string
	for i := range 3 {
		s := startSim(t, l, harness.SimOptions{Name: fmt.Sprintf("sim%d", i), Events: true, TimeScale: simScale})
		sims[s.URL] = s
		specs = append(specs, s.WorkerSpec(true))
	}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: specs, Args: fastHealth})

	t.Run("mid-stream", func(t *testing.T) {
		stop := make(chan struct{})
		var load loadResult
		wait := backgroundLoad(gw.URL, 4, 2000, stop, &load)
		stopLoad := sync.OnceFunc(func() { close(stop); wait() })
		defer stopLoad()

		var killedAt time.Time
		var victim *harness.Sim
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		defer cancel()
		sr := stream(ctx, gw.URL, map[string]any{"model": testModel, "prompt": text("victim-stream", 300), "max_tokens": 1500}, func(w string) {
			victim = sims[w]
			killedAt = time.Now()
			victim.Kill()
		})
		endedAfter := time.Since(killedAt)
		mustf(t, victim != nil, "stream never started: status %d %v %q", sr.Status, sr.Err, sr.Events)
		// The stream must end with one OpenAI-shaped error event, not hang or end silently.
		ev := sr.errorEvent()
		mustf(t, ev != "", "stream from a killed worker: got %d events ending %q (err %v), want an error event", len(sr.Events), sr.Events[len(sr.Events)-1], sr.Err)
		typ, code, _, _ := apiErr([]byte(ev))

		detect, ok := poll(10*time.Second, func() bool { return !workers(t, gw.AdminURL)[victim.URL].Healthy })
		mustf(t, ok, "gateway never marked %s unhealthy", victim.URL)
		detect = time.Since(killedAt) // measured from the kill, not from the poll start
		detectedAt := time.Now()
		var blocks int
		clearT, ok := poll(10*time.Second, func() bool { blocks = workers(t, gw.AdminURL)[victim.URL].IndexBlocks; return blocks == 0 })
		mustf(t, ok, "killed worker %s still has %d blocks in the index", victim.URL, blocks)

		// Load keeps going for a while after detection: none of it may fail.
		okBefore := load.ok.Load()
		_, ok = poll(20*time.Second, func() bool { return load.ok.Load() >= okBefore+40 })
		mustf(t, ok, "load stalled after the kill: %d ok, %d failed %v", load.ok.Load(), load.failed.Load(), load.failures)
		load.mu.Lock()
		lostAfter := 0
		if load.lastFail.After(detectedAt) {
			lostAfter = int(load.failed.Load())
		}
		failures := append([]string(nil), load.failures...)
		load.mu.Unlock()
		mustf(t, lostAfter == 0, "requests failed after the health check noticed the kill: %d (%v)", lostAfter, failures)
		// The load stops here: under load the policy may pick the least-loaded worker over a
		// cache hit (imbalance), which would make the reuse check below depend on timing.
		stopLoad()

		// Restart on the same ports: the gateway must use it again.
		restartedAt := time.Now()
		back := restartSim(top, l, victim, victim.Name+"-restarted")
		fresh := text("after-restart-"+victim.Name, 200)
		warm(t, back, fresh)
		sims[back.URL] = back
		// The health check sees it again, and its event stream reconnects: the index learns the
		// restarted engine's cache.
		upAgain, ok := poll(10*time.Second, func() bool { return workers(t, gw.AdminURL)[back.URL].Healthy })
		mustf(t, ok, "restarted worker never marked healthy")
		upAgain = time.Since(restartedAt)
		_, idx, real, ok := indexAgrees(t, gw.AdminURL, back, 20*time.Second)
		mustf(t, ok, "restarted worker: index %d blocks, engine %d (stream %q)", idx, real, workers(t, gw.AdminURL)[back.URL].EventStream)
		// A prefix only the restarted worker holds must be routed there. Each attempt uses a new
		// prefix, so one misrouted attempt (which caches the prompt elsewhere) cannot decide
		// the next.
		var got string
		attempt := 0
		recover, ok := poll(20*time.Second, func() bool {
			p := fresh
			if attempt > 0 {
				p = text(fmt.Sprintf("after-restart-%s-%d", victim.Name, attempt), 200)
				warm(t, back, p)
				_, _, _, _ = indexAgrees(t, gw.AdminURL, back, 10*time.Second)
			}
			attempt++
			r := completion(t, gw.URL, map[string]any{"model": testModel, "prompt": p + " again", "max_tokens": 2})
			got = r.worker()
			if got != back.URL {
				t.Logf("reuse attempt %d went to %s (reason %s, matched %s)", attempt, got, r.Header.Get("X-Kvgate-Route-Reason"), r.Header.Get("X-Kvgate-Matched-Blocks"))
			}
			return r.Status == http.StatusOK && got == back.URL
		})
		mustf(t, ok, "restarted worker never used again: last request went to %s; /debug/route: %+v", got, debugRoute(t, gw.AdminURL, fresh+" again"))
		_ = restartedAt
		report(t, "worker_killed_mid_stream", "stream_error_type", typ, "stream_error_code", code,
			"stream_end_ms", ms(endedAfter), "detect_ms", ms(detect), "index_cleared_after_detect_ms", ms(clearT),
			"healthy_again_ms", ms(upAgain), "recover_ms", ms(time.Since(restartedAt)), "reuse_poll_ms", ms(recover),
			"reuse_attempts", attempt, "load_ok", load.ok.Load(), "load_failed_total", load.failed.Load(), "lost_after_detect", lostAfter)
	})

	t.Run("mid-idle", func(t *testing.T) {
		// Pick a worker with blocks in the index and no requests.
		var victim *harness.Sim
		for u, s := range sims {
			if ok, _ := s.Exited(); !ok && workers(t, gw.AdminURL)[u].Healthy {
				victim = s
				break
			}
		}
		mustf(t, victim != nil, "no live worker left")
		idle := text("idle-victim", 200)
		warm(t, victim, idle)
		_, ok := poll(10*time.Second, func() bool { return workers(t, gw.AdminURL)[victim.URL].IndexBlocks > 0 })
		mustf(t, ok, "index never learned %s's blocks", victim.URL)

		killedAt := time.Now()
		victim.Kill()
		// Requests for the victim's cached prefix, sent at once: the gateway routes them there
		// until the health check notices, so they must be retried elsewhere, not failed.
		lost := 0
		n := 0
		var detect time.Duration
		for n < 200 && time.Since(killedAt) < 20*time.Second {
			r := completion(t, gw.URL, map[string]any{"model": testModel, "prompt": idle + fmt.Sprintf(" q%d", n), "max_tokens": 2})
			n++
			if r.Status != http.StatusOK {
				lost++
				t.Logf("request %d after killing %s: %d %s (served by %q)", n, victim.URL, r.Status, r.Body, r.worker())
			}
			if detect == 0 && !workers(t, gw.AdminURL)[victim.URL].Healthy {
				detect = time.Since(killedAt)
			}
			if detect > 0 && n >= 20 {
				break
			}
		}
		mustf(t, detect > 0, "gateway never marked the idle victim unhealthy")
		var blocks int
		clearT, ok := poll(10*time.Second, func() bool { blocks = workers(t, gw.AdminURL)[victim.URL].IndexBlocks; return blocks == 0 })
		mustf(t, ok, "killed idle worker still has %d blocks in the index", blocks)
		mustf(t, lost == 0, "%d of %d requests failed after an idle worker was killed", lost, n)

		restartedAt := time.Now()
		back := restartSim(top, l, victim, victim.Name+"-restarted")
		fresh := text("after-idle-restart", 200)
		warm(t, back, fresh)
		sims[back.URL] = back
		_, ok = poll(10*time.Second, func() bool { return workers(t, gw.AdminURL)[back.URL].Healthy })
		mustf(t, ok, "restarted idle worker never marked healthy")
		_, idx, real, ok := indexAgrees(t, gw.AdminURL, back, 20*time.Second)
		mustf(t, ok, "restarted idle worker: index %d blocks, engine %d (stream %q)", idx, real, workers(t, gw.AdminURL)[back.URL].EventStream)
		_, ok = poll(20*time.Second, func() bool {
			r := completion(t, gw.URL, map[string]any{"model": testModel, "prompt": fresh + " again", "max_tokens": 2})
			return r.Status == http.StatusOK && r.worker() == back.URL
		})
		mustf(t, ok, "restarted idle worker never used again; /debug/route: %+v", debugRoute(t, gw.AdminURL, fresh+" again"))
		report(t, "worker_killed_idle", "requests", n, "lost", lost, "detect_ms", ms(detect),
			"index_cleared_after_detect_ms", ms(clearT), "recover_ms", ms(time.Since(restartedAt)))
	})
}
