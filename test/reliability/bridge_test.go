//go:build e2e || reliability

package reliability

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// startBridge runs `kvbridge serve` in front of s's ZMQ feed on port, with extra flags, and
// waits until it listens.
func startBridge(t *testing.T, s *harness.Sim, port int, name string, extra ...string) *harness.Process {
	t.Helper()
	args := append([]string{"serve", "--zmq", s.KVEvents, "--replay", s.Replay,
		"--runtime", "vllm", "--listen", fmt.Sprintf("127.0.0.1:%d", port)}, extra...)
	p, err := harness.Start(harness.Command{Name: name, Path: bins.Kvbridge, Args: args}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, p)
	ok := harness.Eventually(startTimeout, func() bool {
		done, _ := p.Exited()
		return done || strings.Contains(p.LogTail(4000), "kvbridge: listening on")
	})
	if done, err := p.Exited(); done || !ok {
		t.Fatalf("kvbridge serve did not start (exited %v: %v):\n%s", done, err, p.LogTail(3000))
	}
	return p
}

// TestBridgeRestart: the gateway reads a worker's events through a `kvbridge serve` sidecar
// (grpc kv_events). The sidecar is killed while the engine keeps caching, then restarted on the
// same port: it rebuilds its history from the engine's replay buffer, the gateway's client
// reconnects with its cursor, and the index ends equal to the engine's real cache, including
// what was cached while the bridge was down.
func TestBridgeRestart(t *testing.T) {
	l := newLauncher(t)
	s := startSim(t, l, harness.SimOptions{Name: "sim", Events: true, TimeScale: simScale})
	port := testutil.FreePort(t)
	br := startBridge(t, s, port, "bridge")
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway",
		Workers: []string{fmt.Sprintf("url=%s,kv_events=grpc://127.0.0.1:%d", s.URL, port)}})
	for i := range 5 {
		warm(t, s, text(fmt.Sprintf("bridge-before-%d", i), 150))
	}
	_, idx, real, ok := indexAgrees(t, gw.AdminURL, s, 20*time.Second)
	mustf(t, ok, "through the bridge: index %d blocks, engine %d", idx, real)
	resetsBefore := scrape(t, gw.MetricsURL()).sum("kvgate_kv_worker_resets_total", map[string]string{"worker": s.URL})

	br.Kill()
	killedAt := time.Now()
	var state string
	detect, ok := poll(10*time.Second, func() bool { state = workers(t, gw.AdminURL)[s.URL].EventStream; return state != "up" })
	mustf(t, ok, "gateway still reports the event stream up after the bridge died")
	detect = time.Since(killedAt)
	// The engine keeps working while the bridge is down.
	for i := range 5 {
		warm(t, s, text(fmt.Sprintf("bridge-during-%d", i), 150))
	}
	restartedAt := time.Now()
	startBridge(t, s, port, "bridge-restarted")
	took, idx, real, ok := indexAgrees(t, gw.AdminURL, s, 30*time.Second)
	mustf(t, ok, "after the bridge restart: index %d blocks, engine %d; want equal", idx, real)
	// Live batches flow again through the restarted bridge.
	warm(t, s, text("bridge-after", 150))
	_, idx, real, ok = indexAgrees(t, gw.AdminURL, s, 20*time.Second)
	mustf(t, ok, "live after the bridge restart: index %d blocks, engine %d", idx, real)
	resets := scrape(t, gw.MetricsURL()).sum("kvgate_kv_worker_resets_total", map[string]string{"worker": s.URL}) - resetsBefore
	report(t, "bridge_restart", "stream_down_detect_ms", ms(detect), "down_state", state, "resynced_after_restart_ms", ms(took),
		"since_bridge_restart_ms", ms(time.Since(restartedAt)), "index_blocks", idx, "engine_blocks", real, "worker_resets", resets, "lost_blocks", real-idx)
}
