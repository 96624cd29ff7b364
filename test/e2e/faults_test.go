//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestEventStreamFaults exercises the event path against real publisher faults: batches lost on
// the PUB are detected as gaps and repaired from the engine's replay endpoint, an engine that
// restarts (empty cache, sequence from 0) is reconnected and its old blocks leave the index, and
// SIGTERM lets an in-flight stream finish before the gateway exits cleanly.
func TestEventStreamFaults(t *testing.T) {
	l := newLauncher(t)
	lossy := startSim(t, l, harness.SimOptions{Name: "lossy", Events: true, Args: []string{"--fault-drop-every", "3"}})
	steady := startSim(t, l, harness.SimOptions{Name: "steady", Events: true})
	gw := startGateway(t, l, harness.GatewayOptions{
		Name:    "gateway",
		Workers: []string{lossy.WorkerSpec(true), steady.WorkerSpec(true)},
		Args:    []string{"--health-interval", "250ms", "--health-timeout", "250ms"},
	})

	// matchedEvents returns how many blocks of prompt the index holds for worker url, and how
	// many blocks the prompt has.
	matchedEvents := func(prompt, url string) (int, int) {
		r := debugRoute(t, gw.AdminURL, prompt)
		for _, w := range r.Workers {
			if w.URL == url {
				return w.MatchedEvents, r.RequestBlocks
			}
		}
		return -1, r.RequestBlocks
	}
	warm := func(s *harness.Sim, prompt string) {
		t.Helper()
		c := postCompletion(t, s.URL, map[string]any{"model": testModel, "prompt": prompt, "max_tokens": 2})
		mustf(t, c.Status == http.StatusOK, "warming %s: status %d: %s", s.Name, c.Status, c.Body)
	}

	t.Run("lost batches are replayed into the index", func(t *testing.T) {
		var prompts []string
		for i := range 6 {
			p := text(fmt.Sprintf("lossy-%d", i), 250)
			prompts = append(prompts, p)
			warm(lossy, p)
		}
		// One more step so a drop of the last prompt's batch is followed by a batch that shows the gap.
		warm(lossy, text("lossy-tail", 40))
		for i, p := range prompts {
			var got, want int
			ok := harness.Eventually(20*time.Second, func() bool {
				got, want = matchedEvents(p+" more", lossy.URL)
				return want > 0 && got >= want-1
			})
			mustf(t, ok, "prompt %d: index holds %d of %d blocks for the lossy worker, want all (gaps not repaired)", i, got, want)
		}
		fams := scrape(t, gw.MetricsURL())
		gaps := fams["kvgate_kv_event_gaps_total"].sum(map[string]string{"worker": lossy.URL})
		replays := fams["kvgate_kv_replay_requests_total"].sum(map[string]string{"worker": lossy.URL, "result": "ok"})
		mustf(t, gaps >= 1 && replays >= 1, "lossy worker: got %v gaps and %v successful replays, want both >= 1 (every 3rd batch was dropped)", gaps, replays)
	})

	t.Run("a restarted engine is reconnected and its old blocks leave the index", func(t *testing.T) {
		old := text("before-restart", 250)
		warm(steady, old)
		ok := harness.Eventually(20*time.Second, func() bool { got, want := matchedEvents(old, steady.URL); return want > 0 && got >= want-1 })
		mustf(t, ok, "the index never learned the steady worker's blocks")

		steady.Kill()
		restarted := startSim(t, l, harness.SimOptions{Name: "steady-restarted", Events: true,
			Port: steady.Port, EventsPort: portOf(t, steady.KVEvents), ReplayPort: portOf(t, steady.Replay)})
		fresh := text("after-restart", 250)
		warm(restarted, fresh)
		var gotOld, gotFresh, want int
		ok = harness.Eventually(30*time.Second, func() bool {
			gotFresh, want = matchedEvents(fresh, restarted.URL)
			gotOld, _ = matchedEvents(old, restarted.URL)
			return want > 0 && gotFresh >= want-1 && gotOld == 0
		})
		mustf(t, ok, "after the restart: index holds %d of %d blocks of the new prompt and %d of the old one, want all and none", gotFresh, want, gotOld)
		c := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": fresh + " routed", "max_tokens": 2})
		mustf(t, c.Status == http.StatusOK && c.worker() == restarted.URL, "request for the new prefix: status %d worker %s, want 200 from %s", c.Status, c.worker(), restarted.URL)
	})

	t.Run("SIGTERM drains an in-flight stream and exits cleanly", func(t *testing.T) {
		drain := startGateway(t, l, harness.GatewayOptions{Name: "gateway-drain", Workers: []string{lossy.WorkerSpec(true)}})
		body, _ := json.Marshal(map[string]any{"model": testModel, "prompt": text("drain", 50), "max_tokens": 80, "stream": true})
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, drain.URL+"/v1/completions", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var events []string
		signalled := false
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			events = append(events, data)
			if !signalled {
				// The stream has started: ask the gateway to stop now.
				if err := drain.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				signalled = true
			}
		}
		mustf(t, len(events) > 2 && events[len(events)-1] == "[DONE]", "stream after SIGTERM: got %d events ending %q, want a complete stream ending [DONE]", len(events), events[len(events)-1])
		mustf(t, !strings.Contains(strings.Join(events, "\n"), `"error"`), "stream after SIGTERM carried an error event")
		select {
		case <-drain.Done():
		case <-time.After(defaultTestTimeout):
			t.Fatal("gateway still running after SIGTERM and a drained stream")
		}
		_, werr := drain.Exited()
		mustf(t, werr == nil, "gateway exit after SIGTERM: got %v, want status 0", werr)
	})
}

// portOf returns the port of a tcp://host:port endpoint.
func portOf(t *testing.T, endpoint string) int {
	t.Helper()
	i := strings.LastIndexByte(endpoint, ':')
	var p int
	if _, err := fmt.Sscan(endpoint[i+1:], &p); err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	return p
}
