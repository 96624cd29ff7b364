package kvbridge

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/internal/fleetsim"
	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/pkg/indexer"
)

// The fleet benchmarks of the gateway's event path (docs/scaling.md): N ZMQSources, as the
// gateway runs one per event-fed worker, feed a real index through SinkConsumer, with real
// metrics, from N publishers of internal/fleetsim's streams. The publishers run in a child
// process (this test binary re-executed as TestZMQFleetPublisherProcess), so the CPU the
// benchmarks read from getrusage is the subscribing side's alone: libzmq's I/O thread, the
// readers, the consumers, msgpack decoding, metrics and the index.
var (
	zmqFleetSizes  = flag.String("zmqfleet.workers", "64,256", "ZMQ fleet benchmarks: comma-separated fleet sizes")
	zmqFleetBlocks = flag.Int("zmqfleet.blocks", 12500, "ZMQ fleet benchmarks: cache capacity of each simulated engine, in blocks")
	zmqFleetRate   = flag.Float64("zmqfleet.rate", 1500, "ZMQ fleet benchmarks: block events per second per worker in the steady state")
)

const zmqFleetChildEnv = "KVBRIDGE_ZMQFLEET_CHILD"

// zmqFleet is one fleet size's fixture: the child publishing process, and the sources.
type zmqFleet struct {
	n      int
	child  *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	ix     *indexer.Index
	srcs   []*ZMQSource
	counts []atomic.Uint64 // batches delivered per worker
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// fleetConsumer counts the batches it delivers into the sink.
type fleetConsumer struct {
	SinkConsumer
	n *atomic.Uint64
}

func (c *fleetConsumer) Batch(rank int, b *indexer.Batch) bool {
	c.n.Add(1)
	return c.SinkConsumer.Batch(rank, b)
}

var zmqFleetFixture struct {
	mu sync.Mutex
	f  *zmqFleet
}

// startZMQFleet starts (once per size; one size at a time) the child publishers and N
// sources, waits until every stream delivers, and fills every cache.
func startZMQFleet(b *testing.B, n int) *zmqFleet {
	zmqFleetFixture.mu.Lock()
	defer zmqFleetFixture.mu.Unlock()
	if f := zmqFleetFixture.f; f != nil && f.n == n {
		return f
	} else if f != nil {
		f.stop(b)
		zmqFleetFixture.f = nil
	}
	if err := SetSocketLimit(SocketsPerRank*n + 64); err != nil {
		b.Fatal(err)
	}
	ports, err := harness.FreeTCPPorts(n)
	if err != nil {
		b.Fatal(err)
	}
	portList := make([]string, n)
	for i, p := range ports {
		portList[i] = strconv.Itoa(p)
	}
	f := &zmqFleet{n: n, counts: make([]atomic.Uint64, n)}
	f.child = exec.Command(os.Args[0], "-test.run=^TestZMQFleetPublisherProcess$", "-test.count=1")
	f.child.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%s", zmqFleetChildEnv, *zmqFleetBlocks, strings.Join(portList, ",")))
	f.child.Stderr = os.Stderr
	if f.in, err = f.child.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := f.child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	f.out = bufio.NewReader(stdout)
	if err := f.child.Start(); err != nil {
		b.Fatal(err)
	}
	f.expect(b, "ready")
	if f.ix, err = indexer.New(indexer.Config{}); err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for w := range n {
		c := &fleetConsumer{SinkConsumer: SinkConsumer{Sink: f.ix, IDs: []indexer.WorkerID{indexer.WorkerID(w)}}, n: &f.counts[w]}
		src, err := NewZMQSource(ZMQConfig{Worker: "w" + strconv.Itoa(w), Endpoint: tcpEP(ports[w])}, c, nil, m)
		if err != nil {
			b.Fatal(err)
		}
		f.srcs = append(f.srcs, src)
		f.wg.Add(1)
		go func() { defer f.wg.Done(); _ = src.Run(ctx) }()
	}
	// Past the slow joiner: probe (an empty batch per worker) until every stream delivered one.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(time.Minute)
	for w := 0; w < n; {
		if f.counts[w].Load() > 0 {
			w++
			continue
		}
		if time.Now().After(deadline) {
			b.Fatalf("worker %d's stream never delivered", w)
		}
		f.command(b, "probe")
		<-tick.C
	}
	filled := f.command(b, "fill")
	f.wait(b, filled)
	zmqFleetFixture.f = f
	return f
}

// command sends one line to the child and returns the batches its answer reports.
func (f *zmqFleet) command(b *testing.B, cmd string) uint64 {
	if _, err := io.WriteString(f.in, cmd+"\n"); err != nil {
		b.Fatal(err)
	}
	line := f.expect(b, "ok")
	v, err := strconv.ParseUint(strings.TrimPrefix(line, "ok "), 10, 64)
	if err != nil {
		b.Fatalf("child answered %q", line)
	}
	return v
}

func (f *zmqFleet) expect(b *testing.B, prefix string) string {
	line, err := f.out.ReadString('\n')
	if err != nil {
		b.Fatalf("child: %v", err)
	}
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, prefix) {
		b.Fatalf("child said %q, want %s", line, prefix)
	}
	return line
}

// delivered returns the batches delivered over the fleet.
func (f *zmqFleet) delivered() uint64 {
	var t uint64
	for i := range f.counts {
		t += f.counts[i].Load()
	}
	return t
}

// wait waits until the sources delivered target batches in all.
func (f *zmqFleet) wait(b *testing.B, target uint64) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Minute)
	for f.delivered() < target {
		if time.Now().After(deadline) {
			b.Fatalf("delivered %d of %d batches", f.delivered(), target)
		}
		<-tick.C
	}
}

func (f *zmqFleet) stop(b *testing.B) {
	_, _ = io.WriteString(f.in, "quit\n")
	f.in.Close()
	if err := f.child.Wait(); err != nil {
		b.Errorf("child: %v", err)
	}
	f.cancel()
	f.wg.Wait()
}

// cpuTime returns the process's user plus system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func zmqFleetSizeList(b *testing.B) []int {
	var out []int
	for _, s := range strings.Split(*zmqFleetSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("-zmqfleet.workers: %q", s)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkZMQFleet measures the subscribing side of N event-fed workers at the fleet's
// steady rate (-zmqfleet.rate block events per second per worker; each op is one batch of
// about 78 block events, published by the child at the fleet's total rate), and while idle
// (connected streams with nothing published; each op is 10 ms). steady reports the CPU per
// block event and the cores at the rate; idle the cores and the CPU per stream per second.
func BenchmarkZMQFleet(b *testing.B) {
	defer func() {
		zmqFleetFixture.mu.Lock()
		if f := zmqFleetFixture.f; f != nil {
			f.stop(b)
			zmqFleetFixture.f = nil
		}
		zmqFleetFixture.mu.Unlock()
	}()
	for _, n := range zmqFleetSizeList(b) {
		b.Run(fmt.Sprintf("workers=%d/steady", n), func(b *testing.B) {
			f := startZMQFleet(b, n)
			b.ResetTimer()
			start := f.delivered()
			c0, t0 := cpuTime(b), time.Now()
			events := f.command(b, fmt.Sprintf("steady %d %g", b.N, *zmqFleetRate*float64(n)))
			f.wait(b, start+uint64(b.N))
			cpu, wall := cpuTime(b)-c0, time.Since(t0)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
			b.ReportMetric(float64(events)/wall.Seconds()/float64(n), "events/s/worker")
		})
		b.Run(fmt.Sprintf("workers=%d/idle", n), func(b *testing.B) {
			startZMQFleet(b, n)
			time.Sleep(100 * time.Millisecond) // let the steady state's last batches settle
			b.ResetTimer()
			c0, t0 := cpuTime(b), time.Now()
			time.Sleep(time.Duration(b.N) * 10 * time.Millisecond)
			cpu, wall := cpuTime(b)-c0, time.Since(t0)
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
			b.ReportMetric(float64(cpu.Microseconds())/wall.Seconds()/float64(n), "cpu-µs/stream/s")
		})
	}
}

// TestZMQFleetPublisherProcess is BenchmarkZMQFleet's child: it binds N publishers of a
// fleetsim fleet and answers the parent's commands on stdin, one line each: "probe" (one
// empty batch per worker), "fill" (every cache to capacity), "steady B RATE" (B batches
// round-robin at RATE block events per second in all), "quit". Each answer is "ok N": the
// batches, or for steady the block events, published. Skipped unless run as the child.
func TestZMQFleetPublisherProcess(t *testing.T) {
	env := os.Getenv(zmqFleetChildEnv)
	if env == "" {
		t.Skip("the child process of BenchmarkZMQFleet")
	}
	f := strings.Split(env, ",")
	blocks, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	n := len(f) - 1
	ports := make([]int, n)
	for i := range ports {
		if ports[i], err = strconv.Atoi(f[1+i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := SetSocketLimit(n + 64); err != nil {
		t.Fatal(err)
	}
	cfg := fleetsim.DefaultConfig(n)
	cfg.BlocksPerWorker = blocks
	fleet, err := fleetsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pubs := make([]*Publisher, n)
	for w := range pubs {
		if pubs[w], err = NewPublisher(PublisherConfig{Endpoint: tcpEP(ports[w]), Mode: PubBind, History: 1}); err != nil {
			t.Fatal(err)
		}
		defer pubs[w].Close()
	}
	out := bufio.NewWriter(os.Stdout)
	answer := func(v int) {
		fmt.Fprintf(out, "ok %d\n", v)
		out.Flush()
	}
	fmt.Fprintln(out, "ready")
	out.Flush()
	publish := func(w int, bt *indexer.Batch) {
		if _, err := pubs[w].Publish(bt); err != nil {
			t.Fatal(err)
		}
	}
	empty := &indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventRemoved, Medium: indexer.MediumGPU}}}
	in := bufio.NewScanner(os.Stdin)
	w := 0
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 1 && f[0] == "probe":
			for w := range n {
				publish(w, empty)
			}
			answer(n)
		case len(f) == 1 && f[0] == "fill":
			sent := 0
			pace := newTestPacer(1e6)
			events := 0
			for w := range n {
				fleet.Prefixes(w, func(bt *indexer.Batch) { publish(w, bt); sent++ })
			}
			for full := 0; full < n; {
				full = 0
				for w := range n {
					if fleet.Full(w) {
						full++
						continue
					}
					bt := fleet.Next(w)
					events += fleetsim.BlockEvents(bt)
					publish(w, bt)
					sent++
					pace.wait(events)
				}
			}
			answer(sent)
		case len(f) == 3 && f[0] == "steady":
			batches, err1 := strconv.Atoi(f[1])
			rate, err2 := strconv.ParseFloat(f[2], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("bad command %q", in.Text())
			}
			pace := newTestPacer(rate)
			events := 0
			for range batches {
				bt := fleet.Next(w)
				events += fleetsim.BlockEvents(bt)
				publish(w, bt)
				w = (w + 1) % n
				pace.wait(events)
			}
			answer(events)
		case len(f) == 1 && f[0] == "quit":
			return
		default:
			t.Fatalf("bad command %q", in.Text())
		}
	}
}

// testPacer keeps a producer at rate events per second from its creation.
type testPacer struct {
	start time.Time
	rate  float64
}

func newTestPacer(rate float64) *testPacer { return &testPacer{start: time.Now(), rate: rate} }

// wait sleeps while n events are ahead of the schedule (in steps of at least a millisecond).
func (p *testPacer) wait(n int) {
	if ahead := time.Duration(float64(n)/p.rate*float64(time.Second)) - time.Since(p.start); ahead > time.Millisecond {
		time.Sleep(ahead)
	}
}
