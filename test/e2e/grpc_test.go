//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestGRPCWorkersAndBridge covers the other two event paths with real processes: grpc://
// workers (the simulator's SMG vLLM service) whose KV events arrive over SubscribeKvEvents on
// the same connection, a grpc:// worker whose servicer answers UNIMPLEMENTED (scored from the
// approximate tree), and an http:// worker whose ZMQ events reach the gateway through a
// `kvbridge serve` sidecar (kv_events=grpc://bridge).
func TestGRPCWorkersAndBridge(t *testing.T) {
	l := newLauncher(t)
	grpcPorts := testutil.FreePorts(t, 3)
	withEvents := startSim(t, l, harness.SimOptions{Name: "grpc-events", Args: []string{"--grpc-port", fmt.Sprint(grpcPorts[0]), "--runtime", "vllm"}})
	startSim(t, l, harness.SimOptions{Name: "grpc-unimplemented", Args: []string{"--grpc-port", fmt.Sprint(grpcPorts[1]), "--runtime", "vllm", "--no-grpc-kv-events"}})
	bridged := startSim(t, l, harness.SimOptions{Name: "bridged", Events: true})

	bridgeAddr := fmt.Sprintf("127.0.0.1:%d", grpcPorts[2])
	bridge := testutil.Start(t, "kvbridge", bins.Kvbridge, "serve", "--zmq", bridged.KVEvents, "--replay", bridged.Replay,
		"--runtime", "vllm", "--listen", bridgeAddr)
	ok := harness.Eventually(startTimeout, func() bool {
		exited, _ := bridge.Exited()
		return exited || strings.Contains(bridge.LogTail(4000), "listening on")
	})
	exited, _ := bridge.Exited()
	mustf(t, ok && !exited, "kvbridge serve did not start:\n%s", bridge.LogTail(3000))

	grpcURL := func(port int) string { return fmt.Sprintf("grpc://127.0.0.1:%d", port) }
	gw := startGateway(t, l, harness.GatewayOptions{
		Name: "gateway",
		Workers: []string{
			"url=" + grpcURL(grpcPorts[0]) + ",runtime=vllm",
			"url=" + grpcURL(grpcPorts[1]) + ",runtime=vllm",
			"url=" + bridged.URL + ",kv_events=grpc://" + bridgeAddr,
		},
	})

	var view workersView
	ok = harness.Eventually(20*time.Second, func() bool {
		getJSON(t, gw.AdminURL+"/workers", &view)
		states := map[string]string{}
		for _, w := range view.Workers {
			states[w.URL] = w.EventStream
		}
		return states[grpcURL(grpcPorts[0])] == "up" && states[grpcURL(grpcPorts[1])] == "unavailable" && states[bridged.URL] == "up"
	})
	mustf(t, ok, "event streams: got %+v, want up (gRPC), unavailable (UNIMPLEMENTED), up (kvbridge)", view.Workers)

	// Cache a prefix on each event-fed worker by sending to it directly (its HTTP port), then
	// check that the gateway learned it from that worker's gRPC stream and routes there.
	for _, c := range []struct {
		name, direct, routed string
	}{
		{"SubscribeKvEvents on the worker's connection", withEvents.URL, grpcURL(grpcPorts[0])},
		{"ZMQ through the kvbridge sidecar", bridged.URL, bridged.URL},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := text("grpc-"+c.routed, 300)
			w := postCompletion(t, c.direct, map[string]any{"model": testModel, "prompt": prefix + " warm", "max_tokens": 1})
			mustf(t, w.Status == http.StatusOK, "warming: status %d: %s", w.Status, w.Body)
			var r routeExplanation
			ok := harness.Eventually(20*time.Second, func() bool {
				r = debugRoute(t, gw.AdminURL, prefix+" asked")
				return r.Decision.Worker == c.routed && r.Decision.Reason == "cache_hit"
			})
			mustf(t, ok, "/debug/route never chose %s with cache_hit; last: %+v", c.routed, r)
			got := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": prefix + " asked", "max_tokens": 6})
			mustf(t, got.Status == http.StatusOK, "status %d: %s", got.Status, got.Body)
			if got.worker() != c.routed || got.matched() < r.RequestBlocks-2 {
				t.Errorf("went to %s with %d matched blocks, want %s with about %d", got.worker(), got.matched(), c.routed, r.RequestBlocks)
			}
		})
	}

	t.Run("streaming from a grpc worker", func(t *testing.T) {
		// A prefix on the UNIMPLEMENTED worker's tree: the first request teaches the
		// tree, the repeat must be scored from it.
		var prefix string
		for k := range 40 {
			p := text(fmt.Sprintf("grpc-tree-%d", k), 200)
			c := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": p, "max_tokens": 2})
			mustf(t, c.Status == http.StatusOK, "status %d: %s", c.Status, c.Body)
			if c.worker() == grpcURL(grpcPorts[1]) {
				prefix = p
				break
			}
		}
		mustf(t, prefix != "", "no fresh prefix was routed to the UNIMPLEMENTED worker in 40 tries")
		r := debugRoute(t, gw.AdminURL, prefix+" again")
		for _, w := range r.Workers {
			if w.URL == grpcURL(grpcPorts[1]) && (w.ScoredFrom != "tree" || w.MatchedTree < r.RequestBlocks-2) {
				t.Errorf("UNIMPLEMENTED worker: scored from %q with %d tree blocks of %d, want the tree with nearly all", w.ScoredFrom, w.MatchedTree, r.RequestBlocks)
			}
		}
		status, events := streamCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": prefix + " again", "max_tokens": 12,
			"stream_options": map[string]any{"include_usage": true}})
		mustf(t, status == http.StatusOK, "stream status %d", status)
		mustf(t, len(events) >= 8 && events[len(events)-1].Data == "[DONE]", "got %d events ending %q, want a token stream ending [DONE]", len(events), events[len(events)-1].Data)
		all := ""
		for _, e := range events {
			all += e.Data
		}
		mustf(t, strings.Contains(all, `"finish_reason":"length"`) && strings.Contains(all, `"completion_tokens":12`), "stream lacks finish_reason length or usage of 12 tokens: %s", all)
	})
}
