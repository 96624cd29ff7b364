//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// Prefill/decode pairs of grpc:// workers through the gateway binary: simulators in the
// prefill and decode roles serving SMG's engine gRPC (vLLM NIXL: kv_transfer_params_json and
// the GenerateComplete hand-off; SGLang: disaggregated_params rooms) give the aggregated
// engine's answers to the official openai client, the decode simulator caches the transferred
// blocks (its cached tokens and events show them), and a stopped prefill simulator gives the
// documented outcome within the bound.

// grpcPDFleet starts a prefill and a decode simulator over gRPC for runtime and transfer (vllm:
// NIXL or Mooncake in kv_transfer_params_json; sglang and tokenspeed: bootstrap rooms, SGLang's int32 disaggregated_params and TokenSpeed's
// int64 kv_bootstrap_info), an aggregated HTTP simulator to compare answers with, and a
// gateway over the pair's grpc:// endpoints.
func grpcPDFleet(t *testing.T, runtime, transfer string) (gw *harness.Gateway, p, d, agg *harness.Sim, purl, durl string) {
	l := newLauncher(t)
	ports, err := harness.FreeTCPPorts(3)
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"--pd-transfer", transfer, "--pd-wait", "5s", "--runtime", runtime}
	p = startSim(t, l, harness.SimOptions{Name: "grpc-prefill", Args: append([]string{"--pd-role", "prefill", "--grpc-port", fmt.Sprint(ports[0]),
		"--pd-bootstrap-port", fmt.Sprint(ports[2])}, common...)})
	d = startSim(t, l, harness.SimOptions{Name: "grpc-decode", Args: append([]string{"--pd-role", "decode", "--grpc-port", fmt.Sprint(ports[1])}, common...)})
	agg = startSim(t, l, harness.SimOptions{Name: "aggregated"})
	purl, durl = fmt.Sprintf("grpc://127.0.0.1:%d", ports[0]), fmt.Sprintf("grpc://127.0.0.1:%d", ports[1])
	gw = startGateway(t, l, harness.GatewayOptions{Name: "gateway",
		Workers: []string{"url=" + purl + ",runtime=" + runtime + ",role=prefill,bootstrap_port=" + fmt.Sprint(ports[2]),
			"url=" + durl + ",runtime=" + runtime + ",role=decode"},
		Args: []string{"--pd-min-uncached-tokens", "32", "--pd-timeout", "5s", "--health-interval", "250ms", "--pd-transfer", transfer}})
	return gw, p, d, agg, purl, durl
}

// cachedTokens returns a completion body's usage.prompt_tokens_details.cached_tokens.
func cachedTokens(t *testing.T, body []byte) int {
	t.Helper()
	var r struct {
		Usage usage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Usage.PromptTokensDetails == nil {
		return 0
	}
	return r.Usage.PromptTokensDetails.CachedTokens
}

func TestPDGRPCPairs(t *testing.T) {
	for _, mode := range []struct{ runtime, transfer string }{
		{"vllm", "nixl"}, {"vllm", "mooncake"}, {"sglang", "sglang"}, {"tokenspeed", "sglang"},
	} {
		runtime, transfer := mode.runtime, mode.transfer
		t.Run(runtime+"-"+transfer, func(t *testing.T) {
			gw, p, d, agg, purl, durl := grpcPDFleet(t, runtime, transfer)
			pdCount := func(outcome string) float64 {
				if f := scrape(t, gw.MetricsURL())["kvgate_pd_requests_total"]; f != nil {
					return f.sum(map[string]string{"outcome": outcome})
				}
				return 0
			}

			// The official openai npm client, plain and streamed: the aggregated engine's
			// answers, through pairs whose two legs ran on the two gRPC simulators.
			prompt := text("pd-grpc-"+runtime, 300)
			var viaGW, direct nodeReport
			for _, r := range []struct {
				base string
				out  *nodeReport
			}{{gw.URL, &viaGW}, {agg.URL, &direct}} {
				stdout, _ := runNode(t, "client.mjs", r.base+"/v1", testModel, prompt)
				if err := json.Unmarshal(stdout, r.out); err != nil {
					t.Fatalf("client.mjs output %q: %v", stdout, err)
				}
			}
			if viaGW.Nonstream.Text != direct.Nonstream.Text || viaGW.Stream.Text != direct.Stream.Text || viaGW.Stream.Text == "" {
				t.Errorf("openai client through the gRPC pair: %+v, want the aggregated answers %+v", viaGW, direct)
			}
			mustf(t, pdCount("pair") >= 1, "no request ran as a pair (outcomes: %v)", scrape(t, gw.MetricsURL())["kvgate_pd_requests_total"])

			// A pair's headers name both legs' workers; the decode simulator received the
			// prompt's blocks (its cache and the prefill's handed-off KV).
			// No seed: SGLang's gRPC SamplingParams has none, so both engines seed from the prompt.
			body := map[string]any{"model": testModel, "prompt": text("pd-grpc-raw-"+runtime, 300), "max_tokens": 8}
			c := postCompletion(t, gw.URL, body)
			mustf(t, c.Status == http.StatusOK, "pair: status %d: %s", c.Status, c.Body)
			if c.Header.Get("X-Kvgate-Pd") != "pair" || c.Header.Get("X-Kvgate-Prefill-Worker") != purl || c.worker() != durl {
				t.Errorf("headers %v: want a pair with prefill %s and decode %s", c.Header, purl, durl)
			}
			want := postCompletion(t, agg.URL, body)
			if got, w := completionText(t, c.Body), completionText(t, want.Body); got != w {
				t.Errorf("pair answer %q, want the aggregated %q", got, w)
			}
			// The decode simulator read the prefill's KV: the prefill leg succeeded there and
			// its blocks are released (NIXL: by the decode's read, else held for the 30 s
			// lease; SGLang: the decode registered for the room within the 5 s wait).
			metric := func(s *harness.Sim, name string) float64 {
				if f := scrape(t, s.MetricsURL())[name]; f != nil {
					return f.sum(nil)
				}
				return 0
			}
			mustf(t, harness.Eventually(3*time.Second, func() bool {
				return metric(p, "vllm:kv_cache_usage_perc") == 0 && metric(p, "vllm:request_success_total") >= 1
			}), "prefill simulator: KV usage %v, %v requests done; want its blocks read and released, its leg done",
				metric(p, "vllm:kv_cache_usage_perc"), metric(p, "vllm:request_success_total"))
			mustf(t, cachedTokens(t, c.Body) == 0, "the first pair of a prompt reports %d cached tokens, want 0 (nothing was cached before the transfer)", cachedTokens(t, c.Body))
			mustf(t, cachedBlocks(t, d) >= 300/16-2, "decode simulator holds %d blocks, want the transferred prompt's", cachedBlocks(t, d))

			// The same prompt again: the decode simulator finds the transferred blocks in its
			// cache (usage cached_tokens), whether it runs whole there (NIXL: its gRPC events
			// put them in the gateway's index) or as a pair (SGLang and TokenSpeed pair every request).
			wantOutcome := "decode_cached"
			if transfer == "sglang" {
				wantOutcome = "pair"
			}
			var again completion
			ok := harness.Eventually(20*time.Second, func() bool {
				again = postCompletion(t, gw.URL, body)
				return again.Status == http.StatusOK && again.Header.Get("X-Kvgate-Pd") == wantOutcome
			})
			mustf(t, ok, "the repeat never ran as %s; last: %d %v %s", wantOutcome, again.Status, again.Header, again.Body)
			mustf(t, again.worker() == durl && cachedTokens(t, again.Body) >= 300-16-1,
				"repeat on %s with %d cached tokens, want the decode worker holding the transferred prompt", again.worker(), cachedTokens(t, again.Body))
			if got, w := completionText(t, again.Body), completionText(t, want.Body); got != w {
				t.Errorf("repeat answer %q, want the aggregated %q", got, w)
			}

			// Streamed through the gateway directly too.
			sbody := map[string]any{"model": testModel, "prompt": text("pd-grpc-stream-"+runtime, 300), "max_tokens": 12}
			status, events := streamCompletion(t, gw.URL, sbody)
			_, wantEvents := streamCompletion(t, agg.URL, sbody)
			mustf(t, status == http.StatusOK, "stream: status %d", status)
			if got, w := streamText(t, events), streamText(t, wantEvents); got != w || got == "" {
				t.Errorf("streamed pair answer %q, want the aggregated %q", got, w)
			}

			// Without the prefill simulator, a long prompt gets the documented outcome within
			// the bound: NIXL and Mooncake run it whole on the decode worker (prefill_failed, or
			// no_prefill_worker once the prefill worker is marked down); an SGLang or TokenSpeed decode-mode
			// worker serves only pairs, so the client gets a 503 naming the prefill stage.
			mustf(t, p.Stop(harness.DefaultStopTimeout) == nil, "stopping the prefill simulator")
			start := time.Now()
			k := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": text("pd-grpc-after-"+runtime, 300), "max_tokens": 4})
			mustf(t, time.Since(start) < 10*time.Second, "took %v after the prefill simulator stopped", time.Since(start))
			outcome := k.Header.Get("X-Kvgate-Pd")
			switch transfer {
			case "nixl":
				mustf(t, k.Status == http.StatusOK && k.worker() == durl && (outcome == "prefill_failed" || outcome == "no_prefill_worker"),
					"after the prefill simulator stopped: %d %v %s, want 200 whole on the decode worker", k.Status, k.Header, k.Body)
			case "mooncake":
				// Concurrent legs: a prefill leg that fails ends the waiting decode leg, and
				// with no other prefill worker the request runs whole on the (vLLM) decode
				// worker, as it does once the prefill worker is down or its bootstrap server
				// cannot be asked.
				mustf(t, k.Status == http.StatusOK && k.worker() == durl &&
					(outcome == "prefill_failed" || outcome == "no_prefill_worker" || outcome == "bootstrap_query_failed"),
					"after the prefill simulator stopped: %d %v %s, want 200 whole on the decode worker", k.Status, k.Header, k.Body)
			default:
				mustf(t, k.Status == http.StatusServiceUnavailable && strings.Contains(string(k.Body), "prefill"),
					"after the prefill simulator stopped: %d %v %s, want 503 naming the prefill stage", k.Status, k.Header, k.Body)
			}
		})
	}
}
