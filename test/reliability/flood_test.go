//go:build e2e || reliability

package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// floodPublisher binds a PUB on a free loopback port (no replay: lost batches cannot be
// repaired, so the gateway must clear and count).
func floodPublisher(t *testing.T) (*kvbridge.Publisher, string) {
	t.Helper()
	port := testutil.FreePort(t)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: ep, Mode: kvbridge.PubBind, HWM: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ep
}

// floodPayloads pre-encodes n distinct batches of one stored chain of blocks blocks each (16
// tokens per block), so the publisher only copies bytes and is far faster than the index.
func floodPayloads(n, blocks int, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([][]byte, n)
	for i := range out {
		toks := make([]uint32, blocks*16)
		for j := range toks {
			toks[j] = uint32(rng.IntN(150000))
		}
		hashes := make([]uint64, blocks)
		for j := range hashes {
			hashes[j] = rng.Uint64()
		}
		b := &indexer.Batch{Timestamp: 1, Events: []indexer.Event{{Kind: indexer.EventStored, Hashes: hashes, Tokens: toks, BlockSize: 16, Medium: "GPU"}}}
		out[i] = kvbridge.EncodeBatch(nil, b, kvbridge.EncodeOptions{})
	}
	return out
}

// latencies records client-side durations.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

// pct returns the q-quantile (0..1) and the count.
func (l *latencies) pct(q float64) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0, 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i], len(s)
}

// floodCompletionP99 bounds the completions' p99 during the flood (docs/reliability.md quotes
// 55 ms measured; the bound leaves room for a shared machine).
const floodCompletionP99 = time.Second

// TestEventFlood: a publisher sends pre-encoded batches as fast as ZMQ takes them, far faster
// than the gateway's decoder and index. The gateway's memory stays bounded (index capped by
// --index-max-blocks, receive queue and HWM bounded), every batch is accounted for (sent =
// applied + skipped, where the skipped ones are those dropped from the full queue plus those
// lost in transit at the HWM, each seen as part of a gap), and routing lookups and
// completions stay fast meanwhile.
func TestEventFlood(t *testing.T) {
	l := newLauncher(t)
	s := startSim(t, l, harness.SimOptions{Name: "sim", TimeScale: simScale})
	pub, ep := floodPublisher(t)
	const maxBlocks = 50000
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{"url=" + s.URL + ",kv_events=" + ep},
		Args: []string{"--index-max-blocks", fmt.Sprint(maxBlocks)}})
	base := scrape(t, gw.MetricsURL())
	heap0 := base.sum("go_memstats_heap_inuse_bytes", nil)
	rss0 := base.sum("process_resident_memory_bytes", nil)

	payloads := floodPayloads(4096, 16, 1)
	applied := func() float64 {
		return scrape(t, gw.MetricsURL()).sum("kvgate_kv_event_batches_total", map[string]string{"worker": s.URL, "outcome": "applied"})
	}
	// Warm-up: one batch at a time until one is applied, so the subscription is in place
	// before the flood and the first applied seq is known (batches a PUB sends before a SUB's
	// subscription reaches it are lost without a trace).
	var first uint64
	next := uint64(0)
	_, ok := poll(10*time.Second, func() bool {
		if err := pub.SendRaw(nil, kvbridge.AppendSeq(nil, next), payloads[next%uint64(len(payloads))]); err != nil {
			t.Fatal(err)
		}
		next++
		if _, ok := poll(200*time.Millisecond, func() bool { return applied() >= 1 }); !ok {
			return false
		}
		m := scrape(t, gw.MetricsURL())
		n := m.sum("kvgate_kv_event_batches_total", map[string]string{"worker": s.URL, "outcome": "applied"})
		first = uint64(m.sum("kvgate_kv_stream_cursor", map[string]string{"worker": s.URL})) + 1 - uint64(n)
		return true
	})
	mustf(t, ok, "no warm-up batch applied before the flood")
	var sent atomic.Uint64
	stop := make(chan struct{})
	pubDone := make(chan error, 1)
	go func() {
		// Producer goroutine: bounded in count and time.
		deadline := time.Now().Add(floodDuration)
		seq := make([]byte, 0, 8)
		for i := next; i < 20_000_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				pubDone <- nil
				return
			default:
			}
			seq = kvbridge.AppendSeq(seq[:0], i)
			if err := pub.SendRaw(nil, seq, payloads[i%uint64(len(payloads))]); err != nil {
				pubDone <- err
				return
			}
			sent.Add(1)
		}
		pubDone <- nil
	}()
	defer func() {
		select {
		case <-pubDone:
		default:
			close(stop)
			<-pubDone
		}
	}()

	// Meanwhile: /debug/route lookups and real completions, and memory samples.
	var lookups, reqs latencies
	var heapMax, rssMax float64
	failed := 0
	prompt := text("flood-lookup", 200)
	loopDeadline := time.Now().Add(floodDuration + 30*time.Second)
	for i := 0; i < 100000 && time.Now().Before(loopDeadline); i++ {
		select {
		case err := <-pubDone:
			pubDone <- err
			i = 1 << 30 // publisher finished: leave the loop
			continue
		default:
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		r, err := do(ctx, http.MethodGet, gw.AdminURL+"/debug/route?prompt="+url.QueryEscape(prompt), nil, nil)
		cancel()
		mustf(t, err == nil && r.Status == http.StatusOK, "/debug/route during the flood: %v %d", err, r.Status)
		lookups.add(time.Since(start))
		if i%5 == 0 {
			start = time.Now()
			c := completion(t, gw.URL, map[string]any{"model": testModel, "prompt": text(fmt.Sprintf("flood-req-%d", i), 40), "max_tokens": 2})
			if c.Status != http.StatusOK {
				failed++
			}
			reqs.add(time.Since(start))
			m := scrape(t, gw.MetricsURL())
			heapMax = max(heapMax, m.sum("go_memstats_heap_inuse_bytes", nil))
			rssMax = max(rssMax, m.sum("process_resident_memory_bytes", nil))
		}
	}
	mustf(t, (<-pubDone) == nil, "flood publisher failed")
	pubDone <- nil
	n := next + sent.Load() // sequence numbers 0..n-1 were sent

	// Quiescent: the counters stop moving; then one marker batch (the next sequence number)
	// must be applied, so the stream survived the flood.
	var nApplied, dropped, skipped, other, gaps, resets float64
	var idx int
	counters := func() [5]float64 {
		m := scrape(t, gw.MetricsURL())
		w := map[string]string{"worker": s.URL}
		nApplied = m.sum("kvgate_kv_event_batches_total", map[string]string{"worker": s.URL, "outcome": "applied"})
		dropped = m.sum("kvgate_kv_event_batches_total", map[string]string{"worker": s.URL, "outcome": "dropped"})
		other = m.sum("kvgate_kv_event_batches_total", w) - nApplied - dropped // duplicate, replayed, malformed
		skipped = m.sum("kvgate_kv_event_batches_skipped_total", w)
		gaps = m.sum("kvgate_kv_event_gaps_total", w)
		resets = m.sum("kvgate_kv_worker_resets_total", w)
		heapMax = max(heapMax, m.sum("go_memstats_heap_inuse_bytes", nil))
		rssMax = max(rssMax, m.sum("process_resident_memory_bytes", nil))
		return [5]float64{nApplied, dropped, skipped, gaps, resets}
	}
	prev, stable := counters(), 0
	drainT, ok := poll(60*time.Second, func() bool {
		cur := counters()
		if cur == prev {
			stable++
		} else {
			stable = 0
		}
		prev = cur
		return stable >= 10 // ~200 ms without change
	})
	mustf(t, ok, "gateway never caught up with the flood (applied %v of %d)", nApplied, n)
	marker := kvbridge.AppendSeq(nil, n)
	if err := pub.SendRaw(nil, marker, payloads[0]); err != nil {
		t.Fatal(err)
	}
	_, ok = poll(10*time.Second, func() bool {
		return uint64(scrape(t, gw.MetricsURL()).sum("kvgate_kv_stream_cursor", map[string]string{"worker": s.URL})) == n
	})
	mustf(t, ok, "marker batch %d after the flood not applied: the stream did not survive", n)
	counters()
	idx = workers(t, gw.AdminURL)[s.URL].IndexBlocks
	end := scrape(t, gw.MetricsURL())
	heapEnd := end.sum("go_memstats_heap_inuse_bytes", nil)
	lp50, nl := lookups.pct(0.5)
	lp99, _ := lookups.pct(0.99)
	rp99, nr := reqs.pct(0.99)
	gwLookup99 := end.quantile("kvgate_lookup_duration_seconds", 0.99)

	mustf(t, idx <= maxBlocks, "index holds %d blocks, above --index-max-blocks %d", idx, maxBlocks)
	mustf(t, float64(n) > nApplied, "the publisher (%d batches) was not faster than the index (%v applied): no flood", n, nApplied)
	mustf(t, dropped > 0 || gaps > 0, "%d sent, %v applied, but no drop or gap counted", n, nApplied)
	// Reconciliation: every sequence number from the first applied one to the marker was
	// either applied or skipped by a gap; every batch dropped from the queue is one of the
	// skipped (the rest were lost in transit, at the HWM).
	mustf(t, other == 0, "%v batches with another outcome (duplicate, replayed, malformed), want 0 in this flood", other)
	mustf(t, float64(n+1-first) == nApplied+skipped, "sent %d from seq %d (marker included), applied %v + skipped %v = %v: not reconciled",
		n+1-first, first, nApplied, skipped, nApplied+skipped)
	mustf(t, skipped >= dropped, "skipped %v < dropped %v: a dropped batch was not seen as part of a gap", skipped, dropped)
	mustf(t, rp99 <= floodCompletionP99, "completion p99 %v during the flood, want ≤ %v", rp99, floodCompletionP99)
	mustf(t, heapMax < 512<<20, "gateway heap peaked at %.0f MiB during the flood", heapMax/(1<<20))
	mustf(t, rssMax < 1<<30, "gateway RSS peaked at %.0f MiB during the flood", rssMax/(1<<20))
	mustf(t, failed == 0, "%d of %d completions failed during the flood", failed, nr)
	mustf(t, lp99 < time.Second, "/debug/route p99 %v during the flood", lp99)
	report(t, "event_flood", "duration_s", floodDuration.Seconds(), "sent", n+1, "first_applied_seq", first, "applied", nApplied, "skipped", skipped,
		"dropped", dropped, "lost_in_transit", skipped-dropped, "reconciled", float64(n+1-first) == nApplied+skipped, "gaps", gaps, "resets", resets,
		"drain_after_flood_ms", ms(drainT), "index_blocks", idx, "index_cap", maxBlocks, "heap_start_mib", mib(heap0), "heap_max_mib", mib(heapMax), "heap_end_mib", mib(heapEnd),
		"rss_start_mib", mib(rss0), "rss_max_mib", mib(rssMax), "debug_route_p50_ms", fmt.Sprintf("%.2f", float64(lp50.Microseconds())/1000),
		"debug_route_p99_ms", fmt.Sprintf("%.2f", float64(lp99.Microseconds())/1000), "lookups", nl,
		"gateway_lookup_p99_le_us", fmt.Sprintf("%.0f", gwLookup99*1e6), "completions", nr, "completion_p99_ms", ms(rp99), "lost", failed)
}

func mib(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }
