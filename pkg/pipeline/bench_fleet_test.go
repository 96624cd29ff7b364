package pipeline

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kvgate/kvgate/internal/fleetsim"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// The fleet-scale routing benchmark (docs/scaling.md): a router with N event-fed workers
// whose index holds internal/fleetsim's full caches, fed through the gateway's decode path
// (each batch msgpack-encoded as an engine sends it, decoded by kvbridge and applied through
// the member's SinkConsumer).
var (
	fleetRouteBlocks = flag.Int("fleetroute.blocks", 12500, "fleet routing benchmark: cache capacity of each simulated engine, in blocks")
	fleetRouteRate   = flag.Float64("fleetroute.rate", 1500, "fleet routing benchmark: block events per second per worker applied while routing")
	fleetRouteSizes  = flag.String("fleetroute.workers", "64,256,1024", "fleet routing benchmark: comma-separated fleet sizes")
)

// fleetRouteSizeList parses -fleetroute.workers.
func fleetRouteSizeList(b *testing.B) []int {
	var out []int
	for _, s := range strings.Split(*fleetRouteSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("-fleetroute.workers: %q", s)
		}
		out = append(out, n)
	}
	return out
}

type fleetRouteFixture struct {
	pl       *Pipeline
	ms       []kvbridge.Consumer // each worker's events, as the --kv-listen collector delivers them
	f        *fleetsim.Fleet
	requests [][]uint32
	// feed's buffers: the encoded payload and the decoded batch.
	payload []byte
	batch   indexer.Batch
}

var fleetRouteFixtures struct {
	mu sync.Mutex
	n  int
	fx *fleetRouteFixture
}

// feed encodes bt, decodes it as the event path does and applies it to worker w's member.
func (fx *fleetRouteFixture) feed(b *testing.B, w int, bt *indexer.Batch) int {
	fx.payload = kvbridge.EncodeBatch(fx.payload[:0], bt, kvbridge.EncodeOptions{})
	if err := kvbridge.DecodeBatch(fx.payload, &fx.batch); err != nil {
		b.Error(err) // also called on the applier's goroutine
		return 0
	}
	fx.ms[w].Batch(0, &fx.batch)
	return fleetsim.BlockEvents(&fx.batch)
}

// fleetRouteSetup builds (once per size; one size at a time) a router (cache_aware, index,
// tree and pending, as cmd/gateway builds it) with n healthy event-fed workers and fills
// every worker's cache.
func fleetRouteSetup(b *testing.B, n int) *fleetRouteFixture {
	fleetRouteFixtures.mu.Lock()
	defer fleetRouteFixtures.mu.Unlock()
	if fleetRouteFixtures.n == n {
		return fleetRouteFixtures.fx
	}
	fleetRouteFixtures.n, fleetRouteFixtures.fx = 0, nil
	p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
	idx, _ := indexer.New(indexer.Config{})
	tree, _ := indexer.NewTree(indexer.TreeConfig{})
	pend, _ := indexer.NewPending(indexer.PendingConfig{})
	pl, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx, Tree: tree, Pending: pend}}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		w, err := pl.Fleet().AddWorker(worker.Spec{URL: "http://127.0.0.1:" + strconv.Itoa(10000+i)})
		if err != nil {
			b.Fatal(err)
		}
		w.SetHealth(true, "")
	}
	cfg := fleetsim.DefaultConfig(n)
	cfg.BlocksPerWorker = *fleetRouteBlocks
	f, err := fleetsim.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	fx := &fleetRouteFixture{pl: pl, f: f}
	for _, m := range pl.Fleet().Snapshot().Members() {
		// Fed as the --kv-listen collector feeds a worker: it is then scored from the index.
		fx.ms = append(fx.ms, pl.Fleet().TopicConsumer(strings.TrimPrefix(m.Worker().URL(), "http://")))
	}
	for w := range n {
		f.Fill(w, func(bt *indexer.Batch) { fx.feed(b, w, bt) })
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 1024 {
		req, _ := f.Request(nil, rng, 4096)
		fx.requests = append(fx.requests, req)
	}
	fleetRouteFixtures.n, fleetRouteFixtures.fx = n, fx
	return fx
}

// BenchmarkFleetRoute times one routing decision for a 4096-token request that shares a live
// chain of some worker (eligible workers, hashing 256 block keys, the index, pending and tree
// lookups for every candidate, the cache_aware pick and its load) among N event-fed workers,
// while another goroutine applies every worker's events at -fleetroute.rate block events per
// second through the decode path. It reports the latency quantiles of the decisions, their own
// CPU time (cpu-p50/p99: the thread CPU clock, which a shared machine's other load does not
// inflate as it does the wall clock), the p99 of one batch's decode and apply on the applier
// (apply-p99: a bound on how long a decision can wait for the index's write lock), and the
// rate the applier reached. At 4096 workers one applier cannot hold 1500 events/s/worker on
// this machine, so the rate reached says what the decision was measured against.
func BenchmarkFleetRoute(b *testing.B) {
	for _, n := range fleetRouteSizeList(b) {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			fx := fleetRouteSetup(b, n)
			stop := make(chan struct{})
			var applied int
			var applyWall time.Duration
			var applyLat []time.Duration
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				applied, applyWall, applyLat = fx.paceApply(b, n, stop)
			}()
			s := new(routeScratch)
			var dec Decision
			c := &Call{Req: engine.Request{Tokens: make([][]uint32, 1)}}
			lat := make([]time.Duration, 0, b.N)
			cpu := make([]time.Duration, 0, b.N)
			runtime.LockOSThread() // for routeThreadCPU
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0, c0 := time.Now(), routeThreadCPU()
				c.Req.Tokens[0] = fx.requests[i%len(fx.requests)]
				fx.pl.Resolve(c, "m")
				if aerr := fx.pl.route(s, &dec, c, nil, legWhole); aerr != nil {
					b.Fatal(aerr)
				}
				cpu = append(cpu, routeThreadCPU()-c0)
				lat = append(lat, time.Since(t0))
				dec.pick.Done() // the request ends: release the load the pick took
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			q := func(d []time.Duration, p float64) float64 {
				if len(d) == 0 {
					return 0
				}
				slices.Sort(d)
				return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) / 1e3
			}
			b.ReportMetric(q(lat, 0.5), "p50-µs")
			b.ReportMetric(q(lat, 0.99), "p99-µs")
			b.ReportMetric(q(cpu, 0.5), "cpu-p50-µs")
			b.ReportMetric(q(cpu, 0.99), "cpu-p99-µs")
			b.ReportMetric(q(applyLat, 0.99), "apply-p99-µs")
			if applyWall > 0 {
				b.ReportMetric(float64(applied)/applyWall.Seconds()/float64(n), "events/s/worker")
			}
		})
	}
}

// paceApply feeds the fleet's batches round-robin at -fleetroute.rate block events per second
// per worker until stop is closed, and returns the block events applied, the time it ran and
// the wall time of each batch's decode and apply.
func (fx *fleetRouteFixture) paceApply(b *testing.B, n int, stop <-chan struct{}) (int, time.Duration, []time.Duration) {
	const tick = time.Millisecond
	perTick := *fleetRouteRate * float64(n) * tick.Seconds()
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	events, w := 0, 0
	var lat []time.Duration
	for {
		select {
		case <-stop:
			return events, time.Since(start), lat
		case <-t.C:
		}
		due := int(perTick * float64(time.Since(start)) / float64(tick))
		for events < due {
			bt := fx.f.Next(w)
			t0 := time.Now()
			events += fx.feed(b, w, bt)
			lat = append(lat, time.Since(t0))
			w = (w + 1) % n
			select {
			case <-stop:
				return events, time.Since(start), lat
			default:
			}
		}
	}
}

// routeThreadCPU returns the calling thread's CPU time (see BenchmarkFleetRoute); the caller
// locks its goroutine to the thread.
func routeThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
