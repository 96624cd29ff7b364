package fleetpub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sync/errgroup"

	"github.com/kvgate/kvgate/internal/fleetsim"
	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// Options are one measurement's settings; DefaultOptions gives tools/fleetpub's defaults.
type Options struct {
	Workers int // simulated engines
	Blocks  int // cache capacity of each engine, in blocks of 16 tokens
	// Rate is the block events (stored + removed) per second per engine in the steady state;
	// FillRate is the whole fleet's while the caches fill.
	Rate, FillRate float64
	// Duration is the steady-state measurement, Idle the idle one before it (health checks
	// and scrapes, no events).
	Duration, Idle time.Duration
	// RequestsPerSecond is the 4096-token completions sent to the gateway while events flow.
	RequestsPerSecond float64
	Bin               string // directory holding the gateway binary (make build)
	Tokenizer         string // tokenizer.json for the gateway
	LogDir            string // directory for the gateway's log ("" = a temp dir, removed afterwards)
	// History is each engine's replay buffer, in batches (publisherHistory by default).
	History int
	// Faults, when its Duration is set, adds a fault phase after the steady state (faults.go).
	Faults Faults
	// ProfileDir, when set, keeps the gateway's heap profile at each heap measurement there
	// (base, filled, steady, faults .pb.gz; go tool pprof -diff_base compares two), and its CPU
	// profile over the steady state as steady.cpu.pb.gz.
	ProfileDir string
}

// DefaultOptions are the defaults of tools/fleetpub's flags: no fault phase.
func DefaultOptions() Options {
	return Options{Workers: 1024, Blocks: 12500, Rate: 1500, FillRate: 1e6, Duration: 30 * time.Second, Idle: 10 * time.Second,
		RequestsPerSecond: 20, History: publisherHistory, Bin: "bin", Tokenizer: ".cache/tokenizers/qwen3/tokenizer.json", Faults: DefaultFaults()}
}

// Report is one run's result. CPU is the gateway's own process_cpu_seconds_total, memory its
// go_gc_heap_live_bytes (the heap its last GC found live), lookup its
// kvgate_lookup_duration_seconds histogram (its native buckets where the gateway keeps them,
// else its classic ones, interpolated inside a bucket), completion the
// client's latency.
type Report struct {
	Workers, Blocks int
	Rate            float64
	IdleCores       float64 // the gateway idle: health checks and scrapes, no events
	Steady          Phase
	// Faults is the fault phase; nil without one.
	Faults *FaultPhase
}

// Phase is what one measured phase cost and how the gateway routed meanwhile.
type Phase struct {
	AchievedRate             float64 // block events per second per engine actually published
	Cores                    float64 // gateway CPU over the phase
	HeapMiB                  float64 // live heap over the ready, empty gateway, at the phase's end
	Memberships              float64 // (worker, block) pairs in the index at the phase's end
	BytesPerMember           float64
	LookupP50us, LookupP99us float64
	// LookupP99ClassicUs is the p99 from the classic buckets alone (2.5× apart), as fleetpub
	// measured it before the gateway kept native buckets; LookupNative is set when the two
	// quantiles above come from the native buckets (9% apart).
	LookupP99ClassicUs               float64
	LookupNative                     bool
	CompletionP50ms, CompletionP99ms float64
	Completions, Failed              int // completions answered 200, and those that were not (or failed)
	SkippedBatches                   float64
}

// Run measures one gateway fed by o.Workers engines, writes its progress and report to
// stdout, and returns the report.
func Run(ctx context.Context, o Options, stdout io.Writer) (*Report, error) {
	if o.Workers < 1 || o.Blocks < 1 || o.History < 1 || o.Rate <= 0 || o.FillRate <= 0 || o.RequestsPerSecond <= 0 || o.Duration <= 0 || o.Idle <= 0 {
		return nil, fmt.Errorf("fleetpub: workers, blocks, rates and durations must be positive: %+v", o)
	}
	if err := o.Faults.validate(); err != nil {
		return nil, err
	}
	cfg := fleetsim.DefaultConfig(o.Workers)
	cfg.BlocksPerWorker = o.Blocks
	fleet, err := fleetsim.New(cfg)
	if err != nil {
		return nil, err
	}
	if o.LogDir == "" {
		if o.LogDir, err = os.MkdirTemp("", "kvgate-fleetpub"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(o.LogDir)
	} else if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		return nil, err
	}

	// One publisher (a PUB and a replay ROUTER, as vLLM's) and one HTTP worker per engine.
	if err := kvbridge.SetSocketLimit(2*o.Workers + 64); err != nil {
		return nil, err
	}
	pubs := make([]*kvbridge.Publisher, o.Workers)
	pctx, stopPubs := context.WithCancel(ctx)
	var pubWG sync.WaitGroup
	defer func() {
		stopPubs()
		pubWG.Wait() // Close only after Run returned
		for _, p := range pubs {
			if p != nil {
				_ = p.Close()
			}
		}
	}()
	specs := make([]string, o.Workers)
	ports, err := harness.FreeTCPPorts(3 * o.Workers)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(fakeWorker), ReadHeaderTimeout: 10 * time.Second}
	var serveWG sync.WaitGroup
	defer func() { _ = srv.Close(); serveWG.Wait() }()
	for w := range o.Workers {
		ep, rep := fmt.Sprintf("tcp://127.0.0.1:%d", ports[3*w]), fmt.Sprintf("tcp://127.0.0.1:%d", ports[3*w+2])
		p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: ep, Replay: rep, Mode: kvbridge.PubBind, History: o.History})
		if err != nil {
			return nil, err
		}
		pubs[w] = p
		pubWG.Add(1)
		go func() { defer pubWG.Done(); _ = p.Run(pctx) }()
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[3*w+1]))
		if err != nil {
			return nil, err
		}
		serveWG.Add(1)
		go func() { defer serveWG.Done(); _ = srv.Serve(ln) }()
		specs[w] = fmt.Sprintf("url=http://127.0.0.1:%d,kv_events=%s,replay=%s,block_size=16", ports[3*w+1], ep, rep)
	}
	tok, err := filepath.Abs(o.Tokenizer)
	if err != nil {
		return nil, err
	}
	l := &harness.Launcher{Bin: harness.Binaries{Gateway: filepath.Join(o.Bin, "gateway")}, Tokenizer: tok, Model: "fleet", LogDir: o.LogDir, StartTimeout: 5 * time.Minute}
	fmt.Fprintf(stdout, "fleetpub: %d engines bound; starting the gateway\n", o.Workers)
	gw, err := l.StartGateway(ctx, harness.GatewayOptions{Name: "gateway", Workers: specs, Args: []string{"--pprof"}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = gw.Stop(harness.DefaultStopTimeout) }()
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	mURL := gw.MetricsURL()
	if err := settleHeap(ctx, client, gw.AdminURL, o.ProfileDir, "base"); err != nil {
		return nil, err
	}
	base, err := scrape(ctx, client, mURL)
	if err != nil {
		return nil, err
	}

	// Fill every cache, round-robin so that no stream bursts.
	start := time.Now()
	sent := 0
	pace := newPacer(o.FillRate)
	var perr error
	publish := func(w int) func(*indexer.Batch) {
		return func(b *indexer.Batch) {
			sent += fleetsim.BlockEvents(b)
			if _, err := pubs[w].Publish(b); err != nil && perr == nil {
				perr = err
			}
		}
	}
	for w := range o.Workers {
		fleet.Prefixes(w, publish(w))
	}
	for full := 0; full < o.Workers && ctx.Err() == nil; {
		full = 0
		for w := range o.Workers {
			if fleet.Full(w) {
				full++
				continue
			}
			publish(w)(fleet.Next(w))
			pace.wait(sent)
		}
	}
	if perr != nil {
		return nil, perr
	}
	m, err := waitApplied(ctx, client, mURL, gw.AdminURL, o.ProfileDir, "filled")
	if err != nil {
		return nil, err
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

	// The messages of both phases are encoded now, before the measurements: publishing them
	// then costs three sends each, so the publisher leaves the cores to the gateway.
	t0 := time.Now()
	perPhase := func(d time.Duration) int { return int(o.Rate * float64(o.Workers) * d.Seconds() * 1.02) }
	steady := encodeSteady(fleet, o.Workers, perPhase(o.Duration))
	var faulty steadyMsgs
	if o.Faults.Duration > 0 {
		faulty = encodeSteady(fleet, o.Workers, perPhase(o.Faults.Duration))
	}
	fmt.Fprintf(stdout, "fleetpub: encoded %d messages (%.0f MiB) in %s\n",
		len(steady.msgs)+len(faulty.msgs), float64(steady.bytes+faulty.bytes)/(1<<20), time.Since(t0).Round(time.Millisecond))

	idle0, err := scrape(ctx, client, mURL)
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, o.Idle); err != nil {
		return nil, err
	}
	idle1, err := scrape(ctx, client, mURL)
	if err != nil {
		return nil, err
	}
	rep := &Report{Workers: o.Workers, Blocks: o.Blocks, Rate: o.Rate,
		IdleCores: (idle1.sum("process_cpu_seconds_total") - idle0.sum("process_cpu_seconds_total")) / o.Idle.Seconds()}

	// Steady state: the streams at o.Rate per engine, and completions at o.RequestsPerSecond.
	ph := phaseRun{o: o, client: client, gwURL: gw.URL, reqs: reqs, msgs: steady, pubs: pubs, admin: gw.AdminURL}
	if o.ProfileDir != "" {
		ph.cpuProfile = filepath.Join(o.ProfileDir, "steady.cpu.pb.gz")
	}
	if err := ph.run(ctx, o.Duration); err != nil {
		return nil, err
	}
	if err := ph.failed(); err != nil {
		return nil, err
	}
	end, err := waitApplied(ctx, client, mURL, gw.AdminURL, o.ProfileDir, "steady")
	if err != nil {
		return nil, err
	}
	rep.Steady = ph.report(o, base, idle1, end)
	writeSteady(stdout, rep)
	if o.Faults.Duration == 0 {
		return rep, nil
	}
	fr, err := runFaults(ctx, o, &ph, faulty, base, end, mURL, gw.AdminURL, stdout)
	if err != nil {
		return nil, err
	}
	rep.Faults = fr
	return rep, nil
}

// phaseRun publishes one phase's messages and sends completions meanwhile.
type phaseRun struct {
	o      Options
	client *http.Client
	gwURL  string
	reqs   [][]byte
	msgs   steadyMsgs
	pubs   []*kvbridge.Publisher
	// send publishes one message (nil: always, on pubs); the fault phase's drops the
	// messages of engines that are down. It reports whether the message went out.
	send func(m *steadyMsg) (bool, error)
	// cpuProfile, when set, is where the gateway's CPU profile over the phase is kept (its
	// admin listener's /debug/pprof/profile, --pprof).
	admin, cpuProfile string

	// results of the last run
	events int
	wall   time.Duration
	lat    []time.Duration
	errs   []error
}

// run publishes the messages at o.Rate per engine for d (or until they run out) while sending
// completions; a completion that fails is recorded in errs, not returned.
func (ph *phaseRun) run(ctx context.Context, d time.Duration) error {
	ph.events, ph.lat, ph.errs = 0, nil, nil
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	g.Go(func() error {
		pace := newPacer(ph.o.Rate * float64(ph.o.Workers))
		offered := 0
		for i := range ph.msgs.msgs {
			m := &ph.msgs.msgs[i]
			if time.Since(start) >= d || gctx.Err() != nil {
				break
			}
			ok := true
			var err error
			if ph.send != nil {
				ok, err = ph.send(m)
			} else {
				_, err = ph.pubs[m.w].PublishPayload(m.payload, false)
			}
			if err != nil {
				return err
			}
			if ok {
				ph.events += m.events
			}
			offered += m.events
			pace.wait(offered)
		}
		return nil
	})
	g.Go(func() error {
		t := time.NewTicker(time.Duration(float64(time.Second) / ph.o.RequestsPerSecond))
		defer t.Stop()
		for i := 0; time.Since(start) < d; i++ {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
			if lat, err := ph.complete(gctx, ph.reqs[i%len(ph.reqs)]); err != nil {
				ph.errs = append(ph.errs, err)
			} else {
				ph.lat = append(ph.lat, lat)
			}
		}
		return nil
	})
	if ph.cpuProfile != "" {
		g.Go(func() error { return ph.profileCPU(gctx, d) })
	}
	err := g.Wait()
	ph.wall = time.Since(start)
	return err
}

// profileCPU keeps the gateway's CPU profile over the phase's whole seconds, less the last one
// (so that it ends while the events still flow).
func (ph *phaseRun) profileCPU(ctx context.Context, d time.Duration) error {
	secs := max(int(d.Seconds())-1, 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", ph.admin, secs), nil)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fleetpub: the gateway's CPU profile: %w", err)
	}
	defer resp.Body.Close()
	prof, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return fmt.Errorf("fleetpub: the gateway's CPU profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fleetpub: the gateway's CPU profile: %s", resp.Status)
	}
	return os.WriteFile(ph.cpuProfile, prof, 0o644)
}

func (ph *phaseRun) complete(ctx context.Context, body []byte) (time.Duration, error) {
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ph.gwURL+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ph.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("completion: status %d", resp.StatusCode)
	}
	return time.Since(t0), nil
}

// failed returns the phase's first failed completion, if any.
func (ph *phaseRun) failed() error {
	if len(ph.errs) == 0 {
		return nil
	}
	return fmt.Errorf("fleetpub: %d of %d completions failed, the first: %w", len(ph.errs), len(ph.errs)+len(ph.lat), ph.errs[0])
}

// report is the phase between the scrapes before and end (base is the ready, empty gateway).
func (ph *phaseRun) report(o Options, base, before, end metrics) Phase {
	members := end.sum("kvgate_index_blocks")
	live := end.sum("go_gc_heap_live_bytes") - base.sum("go_gc_heap_live_bytes")
	lat := append([]time.Duration(nil), ph.lat...)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return math.NaN()
		}
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	return Phase{
		AchievedRate:       float64(ph.events) / ph.wall.Seconds() / float64(o.Workers),
		Cores:              (end.sum("process_cpu_seconds_total") - before.sum("process_cpu_seconds_total")) / ph.wall.Seconds(),
		HeapMiB:            live / (1 << 20),
		Memberships:        members,
		BytesPerMember:     live / math.Max(members, 1),
		LookupP50us:        lookupQuantile(before, end, 0.5) * 1e6,
		LookupP99us:        lookupQuantile(before, end, 0.99) * 1e6,
		LookupP99ClassicUs: quantileFromBuckets(before.buckets, end.buckets, 0.99) * 1e6,
		LookupNative:       end.native.counts != nil,
		CompletionP50ms:    q(0.5),
		CompletionP99ms:    q(0.99),
		Completions:        len(ph.lat),
		Failed:             len(ph.errs),
		SkippedBatches:     end.sum("kvgate_kv_event_batches_skipped_total") - before.sum("kvgate_kv_event_batches_skipped_total"),
	}
}

func writeSteady(w io.Writer, r *Report) {
	s := r.Steady
	fmt.Fprintf(w, "fleetpub: %d engines at %.0f block events/s each (%.0f reached): gateway CPU %.2f cores (%.2f idle), live heap grew %.0f MiB for %.0f memberships (%.1f B each), lookup p50 %.0f µs p99 %.0f µs (%s; classic buckets: p99 %.0f µs), completion p50 %.2f ms p99 %.2f ms (client), %d completions, %.0f batches skipped\n",
		r.Workers, r.Rate, s.AchievedRate, s.Cores, r.IdleCores, s.HeapMiB, s.Memberships, s.BytesPerMember, s.LookupP50us, s.LookupP99us, histKind(s.LookupNative), s.LookupP99ClassicUs, s.CompletionP50ms, s.CompletionP99ms, s.Completions, s.SkippedBatches)
	fmt.Fprintf(w, "SCALING workers=%d blocks_per_worker=%d rate=%.0f achieved_rate=%.0f gateway_cpu_cores=%.3f idle_cpu_cores=%.3f index_heap_mib=%.0f memberships=%.0f bytes_per_member=%.1f lookup_p50_us=%.0f lookup_p99_us=%.0f lookup_native=%t lookup_p99_classic_us=%.0f completion_p99_ms=%.2f completions=%d skipped_batches=%.0f\n",
		r.Workers, r.Blocks, r.Rate, s.AchievedRate, s.Cores, r.IdleCores, s.HeapMiB, s.Memberships, s.BytesPerMember, s.LookupP50us, s.LookupP99us, s.LookupNative, s.LookupP99ClassicUs, s.CompletionP99ms, s.Completions, s.SkippedBatches)
}

// publisherHistory is the default of each engine's replay buffer, in batches: about 27 s of its steady state
// (19 batches a second), more than an H100-class cache takes to turn over (17 s), so that a
// rebuild from replay is complete. vLLM keeps 10,000 by default. The history shares the
// pre-encoded payloads, so it costs this process next to nothing.
const publisherHistory = 512

// steadyMsgs are pre-encoded messages, round-robin over the engines.
type steadyMsgs struct {
	msgs  []steadyMsg
	bytes int
}

// steadyMsg is one engine's next message: its payload and its block events.
type steadyMsg struct {
	w       int
	events  int
	payload []byte
}

// encodeSteady encodes the fleet's next batches, round-robin over its n engines, until they
// hold events block events.
func encodeSteady(fleet *fleetsim.Fleet, n, events int) steadyMsgs {
	var out steadyMsgs
	for w, sum := 0, 0; sum < events; w = (w + 1) % n {
		b := *fleet.Next(w)
		b.DPRank, b.HasDPRank = 0, true // as Publish does for rank 0
		m := steadyMsg{w: w, events: fleetsim.BlockEvents(&b), payload: kvbridge.EncodeBatch(nil, &b, kvbridge.EncodeOptions{})}
		sum += m.events
		out.bytes += len(m.payload)
		out.msgs = append(out.msgs, m)
	}
	return out
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

// metrics is a scrape: family name → summed value, the lookup histogram, and the stream
// counters summed by their reason or result ("family/reason").
type metrics struct {
	sums    map[string]float64
	by      map[string]float64
	buckets map[float64]float64 // kvgate_lookup_duration_seconds: classic le → cumulative count
	native  nativeHist          // and its native buckets, when the gateway keeps them
}

func (m metrics) sum(name string) float64 { return m.sums[name] }

// lookupFamily is the histogram the lookup quantiles are read from.
const lookupFamily = "kvgate_lookup_duration_seconds"

// scrape reads url's metrics in the protobuf exposition, the one that carries native
// histograms; a histogram's _bucket, _sum and _count are summed under those names, as in the
// text format.
func scrape(ctx context.Context, client *http.Client, url string) (metrics, error) {
	m := metrics{sums: map[string]float64{}, by: map[string]float64{}, buckets: map[float64]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return m, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := client.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); errors.Is(err, io.EOF) {
			return m, nil
		} else if err != nil {
			return m, fmt.Errorf("fleetpub: scrape %s: %w", url, err)
		}
		m.add(&mf)
	}
}

// add sums one family into m.
func (m *metrics) add(mf *dto.MetricFamily) {
	name := mf.GetName()
	for _, x := range mf.GetMetric() {
		switch {
		case x.Counter != nil:
			m.sums[name] += x.Counter.GetValue()
		case x.Gauge != nil:
			m.sums[name] += x.Gauge.GetValue()
		case x.Untyped != nil:
			m.sums[name] += x.Untyped.GetValue()
		case x.Histogram != nil:
			h := x.Histogram
			m.sums[name+"_count"] += float64(h.GetSampleCount())
			m.sums[name+"_sum"] += h.GetSampleSum()
			if name == lookupFamily {
				for _, b := range h.GetBucket() {
					m.buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
				m.buckets[math.Inf(1)] += float64(h.GetSampleCount())
				m.native.add(h)
			}
		}
		if name == "kvgate_kv_worker_resets_total" || name == "kvgate_kv_replay_requests_total" {
			for _, l := range x.GetLabel() {
				if l.GetName() == "reason" || l.GetName() == "result" {
					m.by[name+"/"+l.GetValue()] += x.GetCounter().GetValue()
				}
			}
		}
	}
}

// nativeHist is a native histogram's positive buckets (index → count) at one schema, and its
// zero bucket. Schema s puts bucket i at (2^((i-1)/2^s), 2^(i/2^s)].
type nativeHist struct {
	schema    int32
	zero      float64 // observations ≤ zeroLimit
	zeroLimit float64
	counts    map[int]float64
}

// add adds h's native buckets, if it has any (a gateway from before they were kept has none).
func (n *nativeHist) add(h *dto.Histogram) {
	if len(h.GetPositiveSpan()) == 0 && h.GetZeroCount() == 0 {
		return
	}
	if n.counts == nil {
		n.counts, n.schema = map[int]float64{}, h.GetSchema()
	}
	n.zero += float64(h.GetZeroCount())
	n.zeroLimit = h.GetZeroThreshold()
	i, d, count := 0, 0, int64(0)
	for _, sp := range h.GetPositiveSpan() {
		i += int(sp.GetOffset())
		for range sp.GetLength() {
			count += h.GetPositiveDelta()[d] // counts are delta-encoded across all spans
			n.counts[i] += float64(count)
			i, d = i+1, d+1
		}
	}
}

// lookupQuantile is the lookup's q-quantile between two scrapes, in seconds: from the native
// buckets when both scrapes have them, else from the classic ones.
func lookupQuantile(before, end metrics, q float64) float64 {
	if v := nativeQuantile(before.native, end.native, q); !math.IsNaN(v) {
		return v
	}
	return quantileFromBuckets(before.buckets, end.buckets, q)
}

func histKind(native bool) string {
	if native {
		return "native histogram"
	}
	return "classic histogram"
}

// nativeQuantile returns the q-quantile of the observations between two scrapes of a native
// histogram, in seconds, interpolated geometrically inside its bucket (the bucket's width, 9%
// at the gateway's factor, bounds the error); NaN when either scrape has no native buckets or
// their schemas differ.
func nativeQuantile(before, after nativeHist, q float64) float64 {
	if after.counts == nil || before.counts != nil && before.schema != after.schema {
		return math.NaN()
	}
	idx := make([]int, 0, len(after.counts))
	total := after.zero - before.zero
	for i, c := range after.counts {
		idx = append(idx, i)
		total += c - before.counts[i]
	}
	if total <= 0 {
		return math.NaN()
	}
	sort.Ints(idx)
	rank, below := q*total, after.zero-before.zero
	if rank <= below {
		return after.zeroLimit
	}
	width := math.Exp2(math.Exp2(-float64(after.schema)))
	for _, i := range idx {
		n := after.counts[i] - before.counts[i]
		if n > 0 && below+n >= rank {
			hi := math.Pow(width, float64(i))
			return hi / width * math.Pow(width, (rank-below)/n)
		}
		below += n
	}
	return math.Pow(width, float64(idx[len(idx)-1]))
}

// waitApplied scrapes until the applied batch counter stops moving (the gateway has drained
// its queues), settles the gateway's heap (settleHeap: the profile kept as name) and returns a
// scrape taken after.
func waitApplied(ctx context.Context, client *http.Client, url, admin, dir, name string) (metrics, error) {
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
			if err := settleHeap(ctx, client, admin, dir, name); err != nil {
				return last, err
			}
			return scrape(ctx, client, url)
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return last, err
		}
	}
	return last, errors.New("fleetpub: the gateway never caught up with the streams")
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

// settleHeap runs a garbage collection in the gateway (GET /debug/pprof/heap?gc=1 on its admin
// listener, --pprof), so that the next scrape's go_gc_heap_live_bytes is the heap live now, not
// at whichever collection last ran (possibly during a burst of replays, counting its buffers as
// live); with dir set, the heap profile is kept there as name.pb.gz.
func settleHeap(ctx context.Context, client *http.Client, admin, dir, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fleetpub: the gateway's heap profile: %w", err)
	}
	defer resp.Body.Close()
	prof, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return fmt.Errorf("fleetpub: the gateway's heap profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fleetpub: the gateway's heap profile: %s", resp.Status)
	}
	if dir == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, name+".pb.gz"), prof, 0o644)
}
