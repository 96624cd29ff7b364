//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// Prefill/decode disaggregation through the gateway binary with simulators in the prefill and
// decode roles (wire/pd.md): the pair's answer equals the aggregated engine's, the decode
// simulator caches the transferred blocks (and publishes them, so a follow-up whose history
// it holds runs whole there), and a prefill failure is bounded.

// pdFleet starts a prefill and a decode simulator of one transfer style (the prefill one with
// extra flags prefillArgs), an aggregated one to compare answers with, and a gateway over the
// pair.
func pdFleet(t *testing.T, transfer string, prefillArgs ...string) (gw *harness.Gateway, p, d, agg *harness.Sim) {
	l := newLauncher(t)
	ports, err := harness.FreeTCPPorts(1)
	if err != nil {
		t.Fatal(err)
	}
	pArgs := append([]string{"--pd-role", "prefill", "--pd-transfer", transfer, "--pd-bootstrap-port", fmt.Sprint(ports[0]), "--pd-wait", "5s"}, prefillArgs...)
	p = startSim(t, l, harness.SimOptions{Name: "prefill", Events: true, Args: pArgs})
	d = startSim(t, l, harness.SimOptions{Name: "decode", Events: true, Args: []string{"--pd-role", "decode", "--pd-transfer", transfer, "--pd-wait", "5s"}})
	agg = startSim(t, l, harness.SimOptions{Name: "aggregated"})
	gw = startGateway(t, l, harness.GatewayOptions{Name: "gateway",
		Workers: []string{p.WorkerSpec(true) + ",role=prefill,bootstrap_port=" + fmt.Sprint(ports[0]), d.WorkerSpec(true) + ",role=decode"},
		Args:    []string{"--pd-transfer", transfer, "--pd-min-uncached-tokens", "32", "--pd-timeout", "5s", "--health-interval", "250ms"}})
	return gw, p, d, agg
}

// completionText returns the choices' texts of a completion body.
func completionText(t *testing.T, body []byte) string {
	t.Helper()
	var r struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) == 0 {
		t.Fatalf("not a completion: %s", body)
	}
	return r.Choices[0].Text
}

// streamText joins the text of a completion stream's chunks.
func streamText(t *testing.T, events []sseEvent) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		if e.Data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(e.Data), &c); err != nil || c.Error != nil {
			t.Fatalf("bad chunk %s", e.Data)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Text)
		}
	}
	return b.String()
}

// cachedBlocks returns how many blocks a simulator's cache holds.
func cachedBlocks(t *testing.T, s *harness.Sim) int {
	var dc struct {
		Ranks []struct {
			Hashes []uint64 `json:"hashes"`
		} `json:"ranks"`
	}
	getJSON(t, s.URL+"/debug/cache", &dc)
	n := 0
	for _, r := range dc.Ranks {
		n += len(r.Hashes)
	}
	return n
}

// pdAnswer is a client's answer to one of postCompletions' requests.
type pdAnswer struct {
	status int // -1: the request failed
	body   string
	took   time.Duration
}

// postCompletions sends n completions of distinct 400-token prompts (named by tag) to the
// gateway at base at once, every second one streamed, and returns the channel their answers
// arrive on.
func postCompletions(base, tag string, n int) <-chan pdAnswer {
	answers := make(chan pdAnswer, n)
	for i := range n {
		body, _ := json.Marshal(map[string]any{"model": testModel, "prompt": text(fmt.Sprintf("%s-%d", tag, i), 400),
			"max_tokens": 4, "stream": i%2 == 1})
		go func() {
			start := time.Now()
			resp, err := httpClient.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				answers <- pdAnswer{status: -1, body: err.Error(), took: time.Since(start)}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- pdAnswer{status: resp.StatusCode, body: string(b), took: time.Since(start)}
		}()
	}
	return answers
}

// simRunning returns how many requests a simulator is running.
func simRunning(t *testing.T, s *harness.Sim) float64 {
	if f := scrape(t, s.MetricsURL())["vllm:num_requests_running"]; f != nil {
		return f.sum(nil)
	}
	return 0
}

func TestPDPairs(t *testing.T) {
	for _, transfer := range []string{"nixl", "sglang", "mooncake"} {
		t.Run(transfer, func(t *testing.T) {
			gw, p, d, agg := pdFleet(t, transfer)
			prompt := text("pd-"+transfer, 300)
			body := map[string]any{"model": testModel, "prompt": prompt, "max_tokens": 12, "seed": 7}

			c := postCompletion(t, gw.URL, body)
			mustf(t, c.Status == http.StatusOK, "pair: status %d: %s", c.Status, c.Body)
			want := postCompletion(t, agg.URL, body)
			if got, w := completionText(t, c.Body), completionText(t, want.Body); got != w {
				t.Errorf("pair answer %q, want the aggregated %q", got, w)
			}
			if c.Header.Get("X-Kvgate-Pd") != "pair" || c.Header.Get("X-Kvgate-Prefill-Worker") != p.URL || c.worker() != d.URL {
				t.Errorf("headers %v: want a pair with prefill %s and decode %s", c.Header, p.URL, d.URL)
			}
			mustf(t, cachedBlocks(t, d) >= 300/16-2, "decode simulator holds %d blocks, want the transferred prompt's", cachedBlocks(t, d))

			status, events := streamCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": prompt + " again, streamed", "max_tokens": 12, "seed": 7})
			_, wantEvents := streamCompletion(t, agg.URL, map[string]any{"model": testModel, "prompt": prompt + " again, streamed", "max_tokens": 12, "seed": 7})
			mustf(t, status == http.StatusOK, "stream: status %d", status)
			if got, w := streamText(t, events), streamText(t, wantEvents); got != w || got == "" {
				t.Errorf("streamed pair answer %q, want the aggregated %q", got, w)
			}

			// The official openai npm client, completions and chat, plain and streaming: the
			// same answers as from the aggregated engine.
			clientPrompt := text("pd-client-"+transfer, 120)
			var viaGW, direct nodeReport
			for _, r := range []struct {
				base string
				out  *nodeReport
			}{{gw.URL, &viaGW}, {agg.URL, &direct}} {
				stdout, _ := runNode(t, "client.mjs", r.base+"/v1", testModel, clientPrompt)
				if err := json.Unmarshal(stdout, r.out); err != nil {
					t.Fatalf("client.mjs output %q: %v", stdout, err)
				}
			}
			if viaGW.Nonstream.Text != direct.Nonstream.Text || viaGW.Stream.Text != direct.Stream.Text || viaGW.TokenIDs.Text != direct.TokenIDs.Text || viaGW.Stream.Text == "" {
				t.Errorf("openai client through the pair: %+v, want the aggregated answers %+v", viaGW, direct)
			}
			pairs := func() float64 {
				if f := scrape(t, gw.MetricsURL())["kvgate_pd_requests_total"]; f != nil {
					return f.sum(map[string]string{"outcome": "pair"})
				}
				return 0
			}
			before := pairs()
			chatGW, chatDirect := runChatClient(t, gw.URL, "plain"), runChatClient(t, agg.URL, "plain")
			// The first chat request is a pair; the second repeats its prompt, which the decode
			// worker then holds, so it runs whole there (NIXL; SGLang pairs every request).
			wantPairs := 1.0
			if transfer == "sglang" {
				wantPairs = 2
			}
			mustf(t, pairs() == before+wantPairs, "the two chat requests ran as %v pairs, want %v", pairs()-before, wantPairs)
			if deref(chatGW.Nonstream.Message.Content) != deref(chatDirect.Nonstream.Message.Content) || chatGW.Stream.Content != chatDirect.Stream.Content ||
				chatGW.Stream.Reasoning != chatDirect.Stream.Reasoning || chatGW.Nonstream.Worker != d.URL {
				t.Errorf("chat through the pair (worker %s): %+v, want the aggregated %+v", chatGW.Nonstream.Worker, chatGW, chatDirect)
			}

			// The decode worker's events put the prompt in the gateway's index: a follow-up
			// that adds a few tokens runs whole there, and so does a short prompt. An SGLang
			// decode-mode server serves only pairs, so there both stay pairs.
			whole, short := "decode_cached", "short_prompt"
			if transfer == "sglang" {
				whole, short = "pair", "pair"
			}
			follow := map[string]any{"model": testModel, "prompt": prompt + " ok", "max_tokens": 4}
			var last completion
			ok := harness.Eventually(20*time.Second, func() bool {
				last = postCompletion(t, gw.URL, follow)
				return last.Status == http.StatusOK && last.Header.Get("X-Kvgate-Pd") == whole
			})
			mustf(t, ok, "follow-up never ran as %s; last: %d %v %s", whole, last.Status, last.Header, last.Body)
			mustf(t, last.worker() == d.URL, "follow-up went to %s, want the decode worker", last.worker())
			s := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": "hello there", "max_tokens": 2})
			mustf(t, s.Status == http.StatusOK && s.Header.Get("X-Kvgate-Pd") == short, "short prompt: %d %v %s", s.Status, s.Header, s.Body)

			// Without the prefill simulator, a long prompt is still answered (whole on the
			// decode worker) or refused clearly, within the bound.
			mustf(t, p.Stop(harness.DefaultStopTimeout) == nil, "stopping the prefill simulator")
			start := time.Now()
			k := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": text("pd-after-"+transfer, 300), "max_tokens": 4})
			mustf(t, time.Since(start) < 10*time.Second, "took %v after the prefill simulator stopped", time.Since(start))
			mustf(t, k.Status == http.StatusOK || k.Status >= 500 && strings.Contains(string(k.Body), "prefill"),
				"after the prefill simulator stopped: %d %s", k.Status, k.Body)
		})
	}
}

// TestPDPrefillKilledMidRequest kills the prefill simulator while it computes the prefill legs
// of concurrent requests, plain and streamed: every client gets an answer (the request run
// whole on the decode worker) or a 503 naming the prefill stage (an SGLang pair cannot run
// whole; streamed: the error event), within the --pd-timeout bound, and no request is left in
// flight at the gateway.
func TestPDPrefillKilledMidRequest(t *testing.T) {
	for _, transfer := range []string{"nixl", "sglang", "mooncake"} {
		t.Run(transfer, func(t *testing.T) {
			// 400 prompt tokens at 10 ms each: every prefill leg takes about 4 s.
			gw, p, _, _ := pdFleet(t, transfer, "--prefill-per-token", "10ms")
			const n = 4
			answers := postCompletions(gw.URL, "pd-kill-"+transfer, n)
			running := func() float64 { return simRunning(t, p) }
			mustf(t, harness.Eventually(10*time.Second, func() bool { return running() >= 1 }), "the prefill simulator never started a leg")
			p.Kill()
			for range n {
				var a pdAnswer
				select {
				case a = <-answers:
				case <-time.After(30 * time.Second):
					t.Fatal("a client got no answer 30 s after the prefill simulator was killed")
				}
				t.Logf("answer after %v: %d %.160s", a.took, a.status, a.body)
				mustf(t, a.took < 15*time.Second, "answered after %v, past the 5 s prefill bound", a.took)
				ok := a.status == http.StatusOK && (strings.Contains(a.body, `"text"`) || strings.Contains(a.body, "data: [DONE]")) && !strings.Contains(a.body, `"error"`)
				failed := a.status == http.StatusServiceUnavailable && strings.Contains(a.body, "prefill stage: prefill worker "+p.URL+" failed") ||
					a.status == http.StatusOK && strings.Contains(a.body, `"error"`) && strings.Contains(a.body, "prefill stage: prefill worker "+p.URL+" failed")
				mustf(t, ok || failed, "after the prefill simulator was killed: %d %s", a.status, a.body)
			}
			inflight := func() float64 {
				if f := scrape(t, gw.MetricsURL())["kvgate_worker_in_flight"]; f != nil {
					return f.sum(nil)
				}
				return 0
			}
			mustf(t, harness.Eventually(10*time.Second, func() bool { return inflight() == 0 }), "%v requests still in flight at the gateway", inflight())
		})
	}
}

// TestPDTransferFailedRunsWhole: a NIXL prefill simulator whose blocks' lease ends before the
// decode simulator reads them (as when the prefill engine dies after computing) makes the
// decode simulator fail the pair (kv_load_failure_policy "fail"); the gateway runs the request
// whole on the decode worker, and the client's answer, plain and streamed, equals the
// aggregated engine's. Not Mooncake: its prefill simulator pushes at once to a decode engine
// already waiting, so an expired lease fails a Mooncake pair only when the decode leg asks
// late (pkg/router's TestPDConcurrentTransferFailedRunsWhole covers that path).
func TestPDTransferFailedRunsWhole(t *testing.T) {
	for _, transfer := range []string{"nixl"} {
		t.Run(transfer, func(t *testing.T) {
			gw, p, d, agg := pdFleet(t, transfer, "--pd-lease", "1ns")
			body := map[string]any{"model": testModel, "prompt": text("pd-lease-"+transfer, 300), "max_tokens": 12, "seed": 3}
			c := postCompletion(t, gw.URL, body)
			want := postCompletion(t, agg.URL, body)
			mustf(t, c.Status == http.StatusOK, "status %d: %s", c.Status, c.Body)
			if got, w := completionText(t, c.Body), completionText(t, want.Body); got != w {
				t.Errorf("answer %q, want the aggregated %q", got, w)
			}
			if c.Header.Get("X-Kvgate-Pd") != "transfer_failed" || c.Header.Get("X-Kvgate-Prefill-Worker") != p.URL || c.worker() != d.URL {
				t.Errorf("headers %v: want transfer_failed, prefill %s, decode %s", c.Header, p.URL, d.URL)
			}
			stream := map[string]any{"model": testModel, "prompt": text("pd-lease-stream-"+transfer, 300), "max_tokens": 12, "seed": 3}
			status, events := streamCompletion(t, gw.URL, stream)
			_, wantEvents := streamCompletion(t, agg.URL, stream)
			mustf(t, status == http.StatusOK, "stream: status %d", status)
			if got, w := streamText(t, events), streamText(t, wantEvents); got != w || got == "" {
				t.Errorf("streamed answer %q, want the aggregated %q", got, w)
			}
			f := scrape(t, gw.MetricsURL())["kvgate_pd_requests_total"]
			mustf(t, f != nil, "no kvgate_pd_requests_total")
			if got := f.sum(map[string]string{"outcome": "transfer_failed"}); got != 2 {
				t.Errorf("kvgate_pd_requests_total: %v transfer_failed (pair %v, decode_cached %v), want 2", got, f.sum(map[string]string{"outcome": "pair"}), f.sum(map[string]string{"outcome": "decode_cached"}))
			}
		})
	}
}

// TestPDPrefillKilledRetried kills one of two prefill simulators while it computes the prefill
// legs of concurrent requests, plain and streamed: no client sees the failure. Each pair on the
// killed worker runs again on the other one (an SGLang or Mooncake pair with a fresh room or
// transfer id, its first decode leg ended), and every answer comes within the bound.
func TestPDPrefillKilledRetried(t *testing.T) {
	for _, transfer := range []string{"nixl", "sglang", "mooncake"} {
		t.Run(transfer, func(t *testing.T) {
			l := newLauncher(t)
			ports, err := harness.FreeTCPPorts(2)
			if err != nil {
				t.Fatal(err)
			}
			var prefills []*harness.Sim
			var specs []string
			for i, port := range ports {
				// 400 prompt tokens at 4 ms each: every prefill leg takes about 1.6 s, and the
				// simulator computes one at a time, so the survivor's legs take up to 6.4 s: the
				// bounds are set above that.
				p := startSim(t, l, harness.SimOptions{Name: fmt.Sprint("prefill-", i), Events: true, Args: []string{"--pd-role", "prefill",
					"--pd-transfer", transfer, "--pd-bootstrap-port", fmt.Sprint(port), "--pd-wait", "20s", "--prefill-per-token", "4ms"}})
				prefills = append(prefills, p)
				specs = append(specs, p.WorkerSpec(true)+",role=prefill,bootstrap_port="+fmt.Sprint(port))
			}
			d := startSim(t, l, harness.SimOptions{Name: "decode", Events: true, Args: []string{"--pd-role", "decode", "--pd-transfer", transfer, "--pd-wait", "20s"}})
			gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: append(specs, d.WorkerSpec(true)+",role=decode"),
				Args: []string{"--pd-transfer", transfer, "--pd-min-uncached-tokens", "32", "--pd-timeout", "15s", "--health-interval", "250ms"}})
			const n = 4
			answers := postCompletions(gw.URL, "pd-retry-"+transfer, n)
			mustf(t, harness.Eventually(10*time.Second, func() bool { return simRunning(t, prefills[0]) >= 1 && simRunning(t, prefills[1]) >= 1 }),
				"the prefill legs did not reach both prefill simulators")
			prefills[0].Kill()
			for range n {
				var a pdAnswer
				select {
				case a = <-answers:
				case <-time.After(40 * time.Second):
					t.Fatal("a client got no answer 40 s after a prefill simulator was killed")
				}
				t.Logf("answer after %v: %d %.160s", a.took, a.status, a.body)
				mustf(t, a.took < 30*time.Second, "answered after %v", a.took)
				mustf(t, a.status == http.StatusOK && (strings.Contains(a.body, `"text"`) || strings.Contains(a.body, "data: [DONE]")) && !strings.Contains(a.body, `"error"`),
					"after one prefill simulator was killed: %d %s", a.status, a.body)
			}
			m := scrape(t, gw.MetricsURL())
			retries, outcomes := m["kvgate_pd_prefill_retries_total"], m["kvgate_pd_requests_total"]
			mustf(t, retries != nil && retries.sum(nil) >= 1, "no prefill leg was retried")
			mustf(t, outcomes != nil && outcomes.sum(map[string]string{"outcome": "pair"}) == n, "outcomes %v: want every request a pair", outcomes)
		})
	}
}
