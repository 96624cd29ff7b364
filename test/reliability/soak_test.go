//go:build e2e || reliability

package reliability

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// soakHeapGrowth bounds the growth of the gateway's live heap (as its last GC marked it,
// go_gc_heap_live_bytes) from the end of the warm-up to the end of the run.
const soakHeapGrowth = 16 << 20

// TestSoak: streaming load at high concurrency for soakDuration (20 s with -tags e2e, 5 min
// with -tags reliability) over prefix-sharing prompts. No request may fail, the gateway's
// goroutines must not grow and its live heap must not grow by more than soakHeapGrowth between
// the end of the warm-up and the end of the run, and the p99 latency of the last quarter must
// stay close to the first quarter's.
func TestSoak(t *testing.T) {
	l := newLauncher(t)
	var specs []string
	for i := range 3 {
		s := startSim(t, l, harness.SimOptions{Name: fmt.Sprintf("sim%d", i), Events: true, TimeScale: 0.05})
		specs = append(specs, s.WorkerSpec(true))
	}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: specs})
	const conc = 48
	prefixes := make([]string, 16)
	for i := range prefixes {
		prefixes[i] = text(fmt.Sprintf("soak-system-%d", i), 180)
	}
	warmup := max(soakDuration/10, 3*time.Second)
	quarters := make([]latencies, 4)
	var ok, failed atomic.Int64
	var failMu sync.Mutex
	var failures []string
	start := time.Now()
	end := start.Add(warmup + soakDuration)
	var wg sync.WaitGroup
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
				body := map[string]any{"model": testModel, "max_tokens": 24,
					"prompt": prefixes[(g*7+i)%len(prefixes)] + fmt.Sprintf(" user %d question %d", g, i)}
				ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
				t0 := time.Now()
				r := stream(ctx, gw.URL, body, nil)
				d := time.Since(t0)
				cancel()
				if !r.done() {
					failed.Add(1)
					failMu.Lock()
					if len(failures) < 5 {
						failures = append(failures, fmt.Sprintf("status %d err %v error %q", r.Status, r.Err, r.errorEvent()))
					}
					failMu.Unlock()
					continue
				}
				ok.Add(1)
				if since := t0.Sub(start); since >= warmup {
					q := min(int(4*(since-warmup)/soakDuration), 3)
					quarters[q].add(d)
				}
			}
		}()
	}
	// Start-of-run sample, after the warm-up has filled connection pools and caches.
	warmTimer := time.NewTimer(warmup)
	<-warmTimer.C
	m0 := scrape(t, gw.MetricsURL())
	g0, h0 := m0.sum("go_goroutines", nil), m0.sum("go_memstats_heap_inuse_bytes", nil)
	live0 := m0.sum("go_gc_heap_live_bytes", nil)
	wg.Wait()
	client.CloseIdleConnections()
	// End sample once in-flight work has drained (poll, bounded).
	var g1, h1, live1 float64
	poll(10*time.Second, func() bool {
		m := scrape(t, gw.MetricsURL())
		g1, h1 = m.sum("go_goroutines", nil), m.sum("go_memstats_heap_inuse_bytes", nil)
		live1 = m.sum("go_gc_heap_live_bytes", nil)
		return m.sum("kvgate_worker_in_flight", nil) == 0 && g1 <= g0
	})
	p99 := make([]time.Duration, 4)
	for i := range quarters {
		p99[i], _ = quarters[i].pct(0.99)
	}
	p50, _ := quarters[3].pct(0.5)
	total := ok.Load() + failed.Load()
	mustf(t, failed.Load() == 0, "%d of %d streams failed: %v", failed.Load(), total, failures)
	mustf(t, ok.Load() > int64(conc), "only %d streams completed", ok.Load())
	mustf(t, g1 <= g0+20, "gateway goroutines grew from %.0f to %.0f", g0, g1)
	mustf(t, live0 > 0, "no live-heap sample after the warm-up (go_gc_heap_live_bytes %v): no GC ran?", live0)
	mustf(t, live1 <= live0+soakHeapGrowth, "gateway live heap after GC grew from %s to %s MiB, more than %s MiB", mib(live0), mib(live1), mib(soakHeapGrowth))
	mustf(t, p99[3] <= 2*p99[0]+100*time.Millisecond, "p99 drifted: first quarter %v, last %v", p99[0], p99[3])
	report(t, "soak", "duration_s", soakDuration.Seconds(), "concurrency", conc, "streams", total, "errors", failed.Load(),
		"rps", fmt.Sprintf("%.0f", float64(total)/time.Since(start).Seconds()),
		"goroutines_start", g0, "goroutines_end", g1, "live_heap_start_mib", mib(live0), "live_heap_end_mib", mib(live1),
		"heap_inuse_start_mib", mib(h0), "heap_inuse_end_mib", mib(h1),
		"p99_q1_ms", ms(p99[0]), "p99_q2_ms", ms(p99[1]), "p99_q3_ms", ms(p99[2]), "p99_q4_ms", ms(p99[3]), "p50_q4_ms", ms(p50))
}
