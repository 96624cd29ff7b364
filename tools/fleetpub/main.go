// Command fleetpub measures one gateway process fed the KV-event streams of a large synthetic
// fleet (docs/scaling.md): it binds one ZMQ publisher per simulated engine (internal/fleetsim:
// H100-class caches, about 1500 block events per second per worker in batches of 16–64) and
// serves each engine's /health and /v1/completions from a tiny in-process HTTP worker, starts
// `gateway` with every worker (through internal/harness), fills every cache, encodes the
// steady state's messages ahead of time (so that publishing costs a send per frame and the
// publisher leaves the cores to the gateway), measures the gateway idle for -idle, then
// publishes the steady-state streams at -rate for -duration while sending 4096-token
// completions, and reports the gateway's CPU (its own process_cpu_seconds_total, not the
// machine's), its live heap per (worker, block) and its lookup latency:
//
//	go run ./tools/fleetpub -workers 1024 -duration 30s
//
// The last line is machine-readable: SCALING workers=N ... (see report).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kvgate/kvgate/internal/fleetsim"
	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

type options struct {
	workers, blocks   int
	rate              float64
	duration, idle    time.Duration
	fillRate          float64
	bin, tokenizer    string
	logDir            string
	requestsPerSecond float64
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	leak := harness.CheckNoSurvivors(sctx)
	cancel()
	if errors.Is(err, flag.ErrHelp) {
		err = nil
	}
	if err = errors.Join(err, leak); err != nil {
		fmt.Fprintln(os.Stderr, "fleetpub:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("fleetpub", flag.ContinueOnError)
	fs.IntVar(&o.workers, "workers", 1024, "simulated engines")
	fs.IntVar(&o.blocks, "blocks", 12500, "cache capacity of each engine, in blocks of 16 tokens")
	fs.Float64Var(&o.rate, "rate", 1500, "block events (stored + removed) per second per engine in the steady state")
	fs.Float64Var(&o.fillRate, "fill-rate", 1e6, "block events per second while filling the caches")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "steady-state measurement")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "idle measurement before it (health checks and scrapes, no events)")
	fs.Float64Var(&o.requestsPerSecond, "requests", 20, "4096-token completions per second sent to the gateway during the measurement")
	fs.StringVar(&o.bin, "bin", "bin", "directory holding the gateway binary (make build)")
	fs.StringVar(&o.tokenizer, "tokenizer", ".cache/tokenizers/qwen3/tokenizer.json", "tokenizer.json for the gateway")
	fs.StringVar(&o.logDir, "logs", "", "directory for the gateway's log (default: a temp dir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := fleetsim.DefaultConfig(o.workers)
	cfg.BlocksPerWorker = o.blocks
	fleet, err := fleetsim.New(cfg)
	if err != nil {
		return err
	}
	if o.logDir == "" {
		if o.logDir, err = os.MkdirTemp("", "kvgate-fleetpub"); err != nil {
			return err
		}
		defer os.RemoveAll(o.logDir)
	} else if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		return err
	}

	// One publisher (a PUB socket) and one HTTP worker per engine.
	if err := kvbridge.SetSocketLimit(o.workers + 64); err != nil {
		return err
	}
	pubs := make([]*kvbridge.Publisher, o.workers)
	specs := make([]string, o.workers)
	ports, err := harness.FreeTCPPorts(2 * o.workers)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(fakeWorker), ReadHeaderTimeout: 10 * time.Second}
	var serveWG sync.WaitGroup
	defer func() { _ = srv.Close(); serveWG.Wait() }()
	for w := range o.workers {
		ep := fmt.Sprintf("tcp://127.0.0.1:%d", ports[2*w])
		p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: ep, Mode: kvbridge.PubBind, History: 1})
		if err != nil {
			return err
		}
		defer p.Close()
		pubs[w] = p
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[2*w+1]))
		if err != nil {
			return err
		}
		serveWG.Add(1)
		go func() { defer serveWG.Done(); _ = srv.Serve(ln) }()
		specs[w] = fmt.Sprintf("url=http://127.0.0.1:%d,kv_events=%s,block_size=16", ports[2*w+1], ep)
	}
	tok, err := filepath.Abs(o.tokenizer)
	if err != nil {
		return err
	}
	l := &harness.Launcher{Bin: harness.Binaries{Gateway: filepath.Join(o.bin, "gateway")}, Tokenizer: tok, Model: "fleet", LogDir: o.logDir, StartTimeout: 5 * time.Minute}
	fmt.Fprintf(stdout, "fleetpub: %d engines bound; starting the gateway\n", o.workers)
	gw, err := l.StartGateway(ctx, harness.GatewayOptions{Name: "gateway", Workers: specs})
	if err != nil {
		return err
	}
	defer func() { _ = gw.Stop(harness.DefaultStopTimeout) }()
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	base, err := scrape(ctx, client, gw.MetricsURL())
	if err != nil {
		return err
	}

	// Fill every cache, round-robin so that no stream bursts.
	start := time.Now()
	sent := 0
	pace := newPacer(o.fillRate)
	var perr error
	publish := func(w int) func(*indexer.Batch) {
		return func(b *indexer.Batch) {
			sent += fleetsim.BlockEvents(b)
			if _, err := pubs[w].Publish(b); err != nil && perr == nil {
				perr = err
			}
		}
	}
	for w := range o.workers {
		fleet.Prefixes(w, publish(w))
	}
	for full := 0; full < o.workers && ctx.Err() == nil; {
		full = 0
		for w := range o.workers {
			if fleet.Full(w) {
				full++
				continue
			}
			publish(w)(fleet.Next(w))
			pace.wait(sent)
		}
	}
	if perr != nil {
		return perr
	}
	m, err := waitApplied(ctx, client, gw.MetricsURL())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fleetpub: filled %d block events in %s; index holds %.0f (worker, block) memberships; skipped batches %.0f\n",
		sent, time.Since(start).Round(time.Millisecond), m.sum("kvgate_index_blocks"), m.sum("kvgate_kv_event_batches_skipped_total"))

	// Requests share a live chain of some worker; generated now, while nothing else uses the fleet.
	rng := rand.New(rand.NewPCG(9, 9))
	var reqs [][]byte
	for range 256 {
		t, _ := fleet.Request(nil, rng, 4096)
		body, _ := json.Marshal(map[string]any{"model": "fleet", "prompt": t, "max_tokens": 1})
		reqs = append(reqs, body)
	}

	// The steady state's messages are encoded now, before the measurement: publishing them
	// then costs three sends each, so the publisher leaves the cores to the gateway.
	t0 := time.Now()
	steady := encodeSteady(fleet, pubs, int(o.rate*float64(o.workers)*o.duration.Seconds()*1.02))
	fmt.Fprintf(stdout, "fleetpub: encoded %d steady-state messages (%.0f MiB) in %s\n",
		len(steady.msgs), float64(steady.bytes)/(1<<20), time.Since(t0).Round(time.Millisecond))

	idle0, err := scrape(ctx, client, gw.MetricsURL())
	if err != nil {
		return err
	}
	if err := sleepCtx(ctx, o.idle); err != nil {
		return err
	}
	idle1, err := scrape(ctx, client, gw.MetricsURL())
	if err != nil {
		return err
	}

	// Steady state: the streams at o.rate per engine, and completions at o.requestsPerSecond.
	g, gctx := errgroup.WithContext(ctx)
	steadyStart := time.Now()
	var steadyEvents int
	g.Go(func() error {
		n, err := publishSteady(gctx, steady, pubs, o.rate*float64(o.workers), o.duration)
		steadyEvents = n
		return err
	})
	var lat []time.Duration
	g.Go(func() error {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.requestsPerSecond))
		defer t.Stop()
		for i := 0; time.Since(steadyStart) < o.duration; i++ {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
			t0 := time.Now()
			resp, err := client.Post(gw.URL+"/v1/completions", "application/json", bytes.NewReader(reqs[i%len(reqs)]))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("completion: status %d", resp.StatusCode)
			}
			lat = append(lat, time.Since(t0))
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	steadyWall := time.Since(steadyStart)
	end, err := waitApplied(ctx, client, gw.MetricsURL())
	if err != nil {
		return err
	}
	return report(stdout, o, base, idle0, idle1, end, steadyEvents, steadyWall, lat)
}

// steadyMsgs are pre-encoded steady-state messages, round-robin over the engines.
type steadyMsgs struct {
	msgs  []steadyMsg
	bytes int
}

// steadyMsg is one engine's next message: its sequence frame and payload, and its block events.
type steadyMsg struct {
	w            int
	events       int
	seq, payload []byte
}

// encodeSteady encodes the fleet's next batches, round-robin over the engines, until they hold
// events block events, with each engine's sequence numbers continuing its publisher's.
func encodeSteady(fleet *fleetsim.Fleet, pubs []*kvbridge.Publisher, events int) steadyMsgs {
	next := make([]uint64, len(pubs))
	for w, p := range pubs {
		next[w] = p.NextSeq()
	}
	var out steadyMsgs
	for w, n := 0, 0; n < events; w = (w + 1) % len(pubs) {
		b := *fleet.Next(w)
		b.DPRank, b.HasDPRank = 0, true // as Publish does for rank 0
		m := steadyMsg{w: w, events: fleetsim.BlockEvents(&b), seq: kvbridge.AppendSeq(nil, next[w]),
			payload: kvbridge.EncodeBatch(nil, &b, kvbridge.EncodeOptions{})}
		next[w]++
		n += m.events
		out.bytes += len(m.payload)
		out.msgs = append(out.msgs, m)
	}
	return out
}

// publishSteady sends the pre-encoded messages at rate block events per second for d (or until
// they run out) and returns the block events sent.
func publishSteady(ctx context.Context, s steadyMsgs, pubs []*kvbridge.Publisher, rate float64, d time.Duration) (int, error) {
	pace := newPacer(rate)
	start, n := time.Now(), 0
	topic := []byte{}
	for _, m := range s.msgs {
		if time.Since(start) >= d || ctx.Err() != nil {
			break
		}
		if err := pubs[m.w].SendRaw(topic, m.seq, m.payload); err != nil {
			return n, err
		}
		n += m.events
		pace.wait(n)
	}
	return n, nil
}

// fakeWorker answers what the gateway asks an engine: health, models, a one-token completion.
func fakeWorker(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/health":
		_, _ = io.WriteString(w, `{}`)
	case "/v1/models":
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fleet","object":"model"}]}`)
	case "/v1/completions":
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"id":"c","object":"text_completion","model":"fleet","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":4096,"completion_tokens":1,"total_tokens":4097}}`)
	default:
		http.NotFound(w, r)
	}
}

// pacer keeps a producer at rate events per second from its creation.
type pacer struct {
	start time.Time
	rate  float64
}

func newPacer(rate float64) *pacer { return &pacer{start: time.Now(), rate: rate} }

// wait sleeps while n events are ahead of the schedule (in steps of at least a millisecond).
func (p *pacer) wait(n int) {
	ahead := time.Duration(float64(n)/p.rate*float64(time.Second)) - time.Since(p.start)
	if ahead > time.Millisecond {
		time.Sleep(ahead)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// metrics is a scrape: family name → summed value, and the lookup histogram's buckets.
type metrics struct {
	sums    map[string]float64
	buckets map[float64]float64 // kvgate_lookup_duration_seconds: le → cumulative count
}

func (m metrics) sum(name string) float64 { return m.sums[name] }

func scrape(ctx context.Context, client *http.Client, url string) (metrics, error) {
	m := metrics{sums: map[string]float64{}, buckets: map[float64]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return m, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		m.sums[name] += v
		if name == "kvgate_lookup_duration_seconds_bucket" {
			if _, le, ok := strings.Cut(labels, `le="`); ok {
				le, _, _ = strings.Cut(le, `"`)
				if f, err := strconv.ParseFloat(le, 64); err == nil {
					m.buckets[f] = v
				}
			}
		}
	}
	return m, nil
}

// waitApplied scrapes until the applied batch counter stops moving (the gateway has drained
// its queues) and returns the last scrape.
func waitApplied(ctx context.Context, client *http.Client, url string) (metrics, error) {
	var last metrics
	prev, stable := -1.0, 0
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
		m, err := scrape(ctx, client, url)
		if err != nil {
			return m, err
		}
		cur := m.sum("kvgate_kv_event_batches_total")
		if cur == prev {
			stable++
		} else {
			stable = 0
		}
		prev, last = cur, m
		if stable >= 3 {
			return last, nil
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return last, err
		}
	}
	return last, errors.New("the gateway never caught up with the streams")
}

// quantileFromBuckets interpolates the q-quantile of the observations between two scrapes of
// a cumulative histogram, in seconds.
func quantileFromBuckets(before, after map[float64]float64, q float64) float64 {
	var les []float64
	for le := range after {
		les = append(les, le)
	}
	sort.Float64s(les)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return math.NaN()
	}
	rank, lo, below := q*total, 0.0, 0.0
	for _, le := range les {
		n := after[le] - before[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return lo
			}
			return lo + (le-lo)*(rank-below)/math.Max(n-below, 1)
		}
		lo, below = le, n
	}
	return lo
}

func report(w io.Writer, o options, base, idle0, idle1, end metrics, events int, wall time.Duration, lat []time.Duration) error {
	idleCPU := (idle1.sum("process_cpu_seconds_total") - idle0.sum("process_cpu_seconds_total")) / o.idle.Seconds()
	cpu := (end.sum("process_cpu_seconds_total") - idle1.sum("process_cpu_seconds_total")) / wall.Seconds()
	members := end.sum("kvgate_index_blocks")
	// The index's share: the live heap's growth from the ready, empty gateway.
	live := end.sum("go_gc_heap_live_bytes") - base.sum("go_gc_heap_live_bytes")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return math.NaN()
		}
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	p50 := quantileFromBuckets(idle1.buckets, end.buckets, 0.5) * 1e6
	p99 := quantileFromBuckets(idle1.buckets, end.buckets, 0.99) * 1e6
	achieved := float64(events) / wall.Seconds() / float64(o.workers)
	skipped := end.sum("kvgate_kv_event_batches_skipped_total")
	fmt.Fprintf(w, "fleetpub: %d engines at %.0f block events/s each (%.0f reached): gateway CPU %.2f cores (%.2f idle), live heap grew %.0f MiB for %.0f memberships (%.1f B each), lookup p50 %.0f µs p99 %.0f µs (histogram), completion p50 %.2f ms p99 %.2f ms (client), %d completions, %.0f batches skipped\n",
		o.workers, o.rate, achieved, cpu, idleCPU, live/(1<<20), members, live/members, p50, p99, q(0.5), q(0.99), len(lat), skipped)
	fmt.Fprintf(w, "SCALING workers=%d blocks_per_worker=%d rate=%.0f achieved_rate=%.0f gateway_cpu_cores=%.3f idle_cpu_cores=%.3f index_heap_mib=%.0f memberships=%.0f bytes_per_member=%.1f lookup_p50_us=%.0f lookup_p99_us=%.0f completion_p99_ms=%.2f completions=%d skipped_batches=%.0f\n",
		o.workers, o.blocks, o.rate, achieved, cpu, idleCPU, live/(1<<20), members, live/members, p50, p99, q(0.99), len(lat), skipped)
	return nil
}
