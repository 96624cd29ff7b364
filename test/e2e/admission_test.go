//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// Issue 27's proof of the admission queue, through the built gateway and simulators: two
// simulators of 4 running sequences each (--max-running 4), a batch key flooding them with long
// prompts (about 800 tokens, 8 out) at 3× their capacity while an interactive key sends short
// requests (about 20 tokens, 4 out) one after another. An interactive request still waits for
// the next slot to free, about a batch request's duration over the fleet's 8 slots, which is
// what the margin over its unloaded TTFT has to cover.
//
//   - Without the queue (no --max-inflight-per-worker) the flood lands in the engines' own FCFS
//     queues and the interactive requests wait behind it.
//   - With it (--max-inflight-per-worker 4 --queue-max), the batch key's band 10 waits in the
//     gateway and each freed slot goes to the interactive key's band 0 first: its TTFT stays
//     near its unloaded value.
//   - Two batch keys of one band, one sending twice the concurrency of the other (both more
//     than their half of the fleet's 8 slots), share the slots fairly: the smaller gets about
//     half of the completions (FCFS would give it a third).
//
// No request is lost: every one ends with its [DONE].
func TestAdmissionUnderOverload(t *testing.T) {
	l := newLauncher(t)
	simArgs := []string{"--max-running", "4"}
	sims := []*harness.Sim{startSim(t, l, harness.SimOptions{TimeScale: 0.25, Args: simArgs}), startSim(t, l, harness.SimOptions{TimeScale: 0.25, Args: simArgs})}
	var workers []string
	for _, s := range sims {
		workers = append(workers, s.WorkerSpec(false))
	}
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("chat:sk-chat:priority=0\nbatch-a:sk-batch-a:priority=10\nbatch-b:sk-batch-b:priority=10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := startGateway(t, l, harness.GatewayOptions{Name: "noqueue", Workers: workers, Args: []string{"--api-key-file", keys}})
	queued := startGateway(t, l, harness.GatewayOptions{Name: "queue", Workers: workers,
		Args: []string{"--api-key-file", keys, "--max-inflight-per-worker", "4", "--queue-max", "256", "--queue-timeout", "60s"}})

	const samples = 20
	unloaded := interactiveTTFTs(t, queued.URL, samples)
	// Every load's prompts are its own (a tag per load): a prompt the engines cached in an
	// earlier load would let the cache-aware hand-off favour its key (a fairness load tagged
	// like the flood before it gave the flood's key 0.55 of the completions).
	measure := func(base, tag string) []time.Duration {
		flood := startKeyLoad(base, "sk-batch-a", tag, 24)
		// Measured in the steady flood, not while its first 24 requests arrive together.
		poll(t, 2*defaultTestTimeout, "the batch flood under way", func() bool { return len(flood.snapshot()) >= 24 })
		ttfts := interactiveTTFTs(t, base, samples)
		checkLoad(t, "batch flood on "+base, flood.wait())
		return ttfts
	}
	withoutQueue, withQueue := measure(plain.URL, "flood-noqueue"), measure(queued.URL, "flood-queue")
	u, n, q := quantile(unloaded, 0.5), quantile(withoutQueue, 0.5), quantile(withQueue, 0.5)
	n95, q95 := quantile(withoutQueue, 0.95), quantile(withQueue, 0.95)
	t.Logf("interactive TTFT p50 (p95): unloaded %v, batch flood without the queue %v (%v), with it %v (%v)", u, n, n95, q, q95)
	t.Logf("interactive TTFTs: unloaded %v; without the queue %v; with it %v", unloaded, withoutQueue, withQueue)
	// With the queue an interactive request waits for the next slot to free (a batch request's
	// duration over 8 slots, about 10 ms) and then shares an engine step with another
	// request's prefill chunk (about 25 ms at time scale 0.25): that, not the engine's queue,
	// is the allowance over the unloaded TTFT. The tail is compared with the flood's without
	// the queue only: on a shared machine single requests stall now and then.
	mustf(t, q <= u+80*time.Millisecond, "interactive TTFT p50 with the queue %v, want within 80 ms of its unloaded %v", q, u)
	mustf(t, n > 3*q, "interactive TTFT p50 without the queue %v, want over 3× the queue's %v (else the flood proved nothing)", n, q)
	mustf(t, n95 > 2*q95, "interactive TTFT p95 without the queue %v, want over 2× the queue's %v", n95, q95)

	// Fairness: a (16 streams) and b (8 streams) in one band, measured over the same window.
	a := startKeyLoad(queued.URL, "sk-batch-a", "fair-a", 16)
	b := startKeyLoad(queued.URL, "sk-batch-b", "fair-b", 8)
	poll(t, 2*defaultTestTimeout, "both batch keys completing requests", func() bool { return len(a.snapshot()) >= 24 && len(b.snapshot()) >= 12 })
	from := time.Now()
	// 300 completions. With prompts of their own the share was 0.50 in each of 3 runs; the
	// bound (±0.04) fails on a cache trade such as the one a reused tag caused (0.45–0.46), and
	// FCFS gives 0.33.
	poll(t, 2*defaultTestTimeout, "300 more completions", func() bool { return countSince(a.snapshot(), from)+countSince(b.snapshot(), from) >= 300 })
	to := time.Now()
	oa, ob := a.wait(), b.wait()
	checkLoad(t, "key a", oa)
	checkLoad(t, "key b", ob)
	na, nb := countBetween(oa, from, to), countBetween(ob, from, to)
	share := float64(nb) / float64(na+nb)
	t.Logf("equal band, concurrency 16 vs 8: completions a %d, b %d: b's share %.2f (fair 0.50, FCFS about 0.33)", na, nb, share)
	mustf(t, share >= 0.46 && share <= 0.54, "key b's share of the completions %.2f, want 0.5 ± 0.04 (FCFS: 0.33)", share)

	m := scrape(t, queued.MetricsURL())
	if f := m["kvgate_queue_requests_total"]; f == nil || f.sum(map[string]string{"priority": "10", "outcome": "admitted"}) == 0 || f.sum(map[string]string{"outcome": "timeout"}) != 0 {
		t.Errorf("kvgate_queue_requests_total: want band 10 admitted through the queue and no timeouts")
	}
	if f := m["kvgate_queue_wait_seconds"]; f == nil {
		t.Errorf("kvgate_queue_wait_seconds missing")
	}
}

// keyLoad streams long batch completions with one client key from conc goroutines until
// stopped, recording each outcome (like streamLoad, whose goroutines never call t).
type keyLoad struct {
	streamLoad
}

func startKeyLoad(base, key, tag string, conc int) *keyLoad {
	l := &keyLoad{streamLoad{stop: make(chan struct{})}}
	client := &http.Client{Timeout: 2 * defaultTestTimeout}
	for g := range conc {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				o := outcome{start: time.Now()}
				// Unique from the first token: this load measures fairness, and prompts that
				// share cached blocks would let the cache-aware hand-off trade some of it
				// (bounded by the queue's skip limit).
				_, o.err = streamTTFT(client, base, key, fmt.Sprintf("%d%03d ", i, g)+text(fmt.Sprintf("batch %s %d %d", tag, g, i), 600), 8)
				o.end = time.Now()
				l.record(o)
			}
		}()
	}
	return l
}

// interactiveTTFTs sends n short streaming completions with the interactive key, one after
// another, and returns their times to the first token.
func interactiveTTFTs(t *testing.T, base string, n int) []time.Duration {
	t.Helper()
	client := &http.Client{Timeout: 2 * defaultTestTimeout}
	var out []time.Duration
	for i := range n {
		d, err := streamTTFT(client, base, "sk-chat", text(fmt.Sprintf("chat %d %d", i, time.Now().UnixNano()), 12), 4)
		if err != "" {
			t.Fatalf("interactive request %d: %s", i, err)
		}
		out = append(out, d)
	}
	return out
}

// streamTTFT streams one completion with key and returns the time to its first token, or
// what went wrong ("" when it ended with [DONE] and no error event).
func streamTTFT(client *http.Client, base, key, prompt string, maxTokens int) (time.Duration, string) {
	b, _ := json.Marshal(map[string]any{"model": testModel, "prompt": prompt, "max_tokens": maxTokens, "stream": true})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var sb strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
		return 0, fmt.Sprintf("status %d: %s", resp.StatusCode, sb.String())
	}
	var ttft time.Duration
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
		case data == "[DONE]":
			done = true
		case strings.HasPrefix(data, `{"error"`):
			return 0, "error event: " + data
		case ttft == 0:
			ttft = time.Since(start)
		}
	}
	if !done {
		return 0, "stream ended without [DONE]"
	}
	return ttft, ""
}

func checkLoad(t *testing.T, what string, os []outcome) {
	t.Helper()
	if len(os) == 0 {
		t.Errorf("%s: no request completed", what)
	}
	if f := failures(os); len(f) > 0 {
		t.Errorf("%s: %d of %d requests failed, first: %s", what, len(f), len(os), f[0])
	}
}

// quantile returns the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

func countSince(os []outcome, from time.Time) int { return countBetween(os, from, time.Now()) }

func countBetween(os []outcome, from, to time.Time) int {
	n := 0
	for _, o := range os {
		if o.err == "" && !o.end.Before(from) && !o.end.After(to) {
			n++
		}
	}
	return n
}
