package indexer_test

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

	"golang.org/x/sys/unix"

	"github.com/kvgate/kvgate/internal/fleetsim"
	"github.com/kvgate/kvgate/pkg/indexer"
)

// The fleet-scale benchmarks (docs/scaling.md): one index fed the event streams of 64, 256 and
// 1024 (-fleet.workers: 4096) H100-class engines (internal/fleetsim: full caches of
// -fleet.blocks blocks each, about 1500 block events per second per worker, stored and removed
// in batches of 16–64 blocks).
var (
	fleetBlocks  = flag.Int("fleet.blocks", 12500, "fleet benchmarks: cache capacity of each simulated engine, in blocks")
	fleetRate    = flag.Float64("fleet.rate", 1500, "fleet benchmarks: block events per second per worker while lookups run")
	fleetWorkers = flag.String("fleet.workers", "64,256,1024", "fleet benchmarks: comma-separated fleet sizes")
)

// fleetSizes parses -fleet.workers.
func fleetSizes(b *testing.B) []int {
	var out []int
	for _, s := range strings.Split(*fleetWorkers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("-fleet.workers: %q", s)
		}
		out = append(out, n)
	}
	return out
}

// threadCPU returns the calling thread's CPU time. With the goroutine locked to its thread, a
// difference of two readings is the CPU the code between them used, whatever else the machine
// runs: on a shared machine the wall time includes waiting for a core, this does not.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// quantileMicros returns the p-quantile of sorted durations in microseconds.
func quantileMicros(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(p*float64(len(sorted)-1))].Nanoseconds()) / 1e3
}

type fleetFixture struct {
	ix        *indexer.Index
	f         *fleetsim.Fleet
	perMember float64 // heap bytes per (worker, block) after the fill
	requests  [][]uint32
}

var fleetFixtures struct {
	mu sync.Mutex
	m  map[int]*fleetFixture
}

// fleetSetup builds (once per size) an index holding every worker's full cache.
func fleetSetup(b *testing.B, workers int) *fleetFixture {
	fleetFixtures.mu.Lock()
	defer fleetFixtures.mu.Unlock()
	if fx := fleetFixtures.m[workers]; fx != nil {
		return fx
	}
	// One fleet at a time: a 1024-worker fixture holds gigabytes.
	fleetFixtures.m = map[int]*fleetFixture{}
	cfg := fleetsim.DefaultConfig(workers)
	cfg.BlocksPerWorker = *fleetBlocks
	f, err := fleetsim.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix, err := indexer.New(indexer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for w := range workers {
		f.Fill(w, func(bt *indexer.Batch) { ix.Apply(indexer.WorkerID(w), bt.Events) })
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	fx := &fleetFixture{ix: ix, f: f, perMember: float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(ix.Memberships())}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 1024 {
		req, _ := f.Request(nil, rng, 4096)
		fx.requests = append(fx.requests, req)
	}
	fleetFixtures.m[workers] = fx
	return fx
}

// BenchmarkFleetApply applies steady-state batches round-robin over the workers. ns/op is per
// batch; ns/event is per block event (stored or removed); cores is the CPU the fleet's rate
// (-fleet.rate per worker) costs at that speed; B/member is the heap per (worker, block) of
// the full index.
func BenchmarkFleetApply(b *testing.B) {
	for _, n := range fleetSizes(b) {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			fx := fleetSetup(b, n)
			events := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w := i % n
				bt := fx.f.Next(w)
				events += fleetsim.BlockEvents(bt)
				fx.ix.Apply(indexer.WorkerID(w), bt.Events)
			}
			perEvent := float64(b.Elapsed().Nanoseconds()) / float64(events)
			b.ReportMetric(perEvent, "ns/event")
			b.ReportMetric(perEvent*float64(n)**fleetRate/1e9, "cores")
			b.ReportMetric(fx.perMember, "B/member")
			b.ReportMetric(float64(fx.ix.Memberships())/float64(n), "blocks/worker")
		})
	}
}

// BenchmarkFleetLookup times the lookup of a 4096-token request (hashing its 256 block keys and
// matching them) while another goroutine applies the fleet's events at -fleet.rate block
// events per second per worker. It reports the latency quantiles of the lookups and the apply
// rate reached (a machine too slow for the rate shows it there). The cpu- quantiles are the
// lookups' own CPU time (thread CPU clock), which other load on a shared machine does not
// inflate the way it inflates the wall-clock ones.
func BenchmarkFleetLookup(b *testing.B) {
	for _, n := range fleetSizes(b) {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			fx := fleetSetup(b, n)
			stop := make(chan struct{})
			var applied int
			var applyWall time.Duration
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				applied, applyWall = paceApply(fx, n, stop)
			}()
			keys := make([]uint64, 0, 256)
			dst := make([]indexer.WorkerMatch, 0, n)
			lat := make([]time.Duration, 0, b.N)
			cpu := make([]time.Duration, 0, b.N)
			runtime.LockOSThread() // for threadCPU
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := fx.requests[i%len(fx.requests)]
				t0, c0 := time.Now(), threadCPU()
				keys = indexer.AppendBlockKeys(keys[:0], req, 16, "")
				dst = fx.ix.Match(keys, dst)
				cpu = append(cpu, threadCPU()-c0)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			slices.Sort(cpu)
			b.ReportMetric(quantileMicros(lat, 0.5), "p50-µs")
			b.ReportMetric(quantileMicros(lat, 0.99), "p99-µs")
			b.ReportMetric(quantileMicros(lat, 0.999), "p99.9-µs")
			b.ReportMetric(quantileMicros(cpu, 0.99), "cpu-p99-µs")
			if applyWall > 0 {
				b.ReportMetric(float64(applied)/applyWall.Seconds()/float64(n), "events/s/worker")
			}
		})
	}
}

// paceApply applies the fleet's batches round-robin at rate block events per second per worker
// until stop is closed, and returns the block events applied and the time it ran.
func paceApply(fx *fleetFixture, n int, stop <-chan struct{}) (int, time.Duration) {
	const tick = time.Millisecond
	perTick := *fleetRate * float64(n) * tick.Seconds()
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	events, w := 0, 0
	for {
		select {
		case <-stop:
			return events, time.Since(start)
		case <-t.C:
		}
		// Catch up to the schedule: the rate is kept even if a tick was missed.
		due := int(perTick * float64(time.Since(start)) / float64(tick))
		for events < due {
			bt := fx.f.Next(w)
			events += fleetsim.BlockEvents(bt)
			fx.ix.Apply(indexer.WorkerID(w), bt.Events)
			w = (w + 1) % n
			select {
			case <-stop:
				return events, time.Since(start)
			default:
			}
		}
	}
}
