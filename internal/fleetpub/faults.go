package fleetpub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// Faults is the fault phase: after the steady state, the streams go on at the same rate for
// Duration while the links between some engines and the gateway go away and come back, as when
// a host's network flaps or a partition heals. An engine whose link is down goes on publishing
// (its batches are numbered and kept in its replay buffer) but its PUB socket is closed, so its
// subscriber sees the disconnect and loses those batches; when the link comes back (a new PUB
// bound on the same endpoint) the subscriber reconnects, sees the gap and repairs it by
// replay. A partition does that to every engine at once: every subscriber reconnects and asks
// for replay together.
type Faults struct {
	// Duration is the fault phase's length; 0 means no fault phase.
	Duration time.Duration
	// FlapFraction of the engines (0.1: one in ten) flap for the whole phase: each is down for
	// FlapDown of every FlapPeriod, staggered so that they do not flap together.
	FlapFraction         float64
	FlapPeriod, FlapDown time.Duration
	// PartitionFor > 0 takes every publisher down at once for PartitionFor, PartitionAt into the
	// phase: when it ends, every subscriber reconnects at once (the burst).
	PartitionAt, PartitionFor time.Duration
	// RecoverWithin bounds the wait, after the phase, for every stream to be up again.
	RecoverWithin time.Duration
}

// DefaultFaults are tools/fleetpub's defaults: no fault phase; when one is asked for, one
// engine in ten down for 1 s of every 4 s, and a 3 s partition of all 5 s into it.
func DefaultFaults() Faults {
	return Faults{FlapFraction: 0.1, FlapPeriod: 4 * time.Second, FlapDown: time.Second,
		PartitionAt: 5 * time.Second, PartitionFor: 3 * time.Second, RecoverWithin: time.Minute}
}

func (f Faults) validate() error {
	if f.Duration == 0 {
		return nil
	}
	switch {
	case f.Duration < 0, f.FlapFraction < 0, f.FlapFraction > 1, f.PartitionAt < 0, f.PartitionFor < 0, f.RecoverWithin <= 0:
		return fmt.Errorf("fleetpub: fault phase: durations must be positive and the flap fraction in [0, 1]: %+v", f)
	case f.FlapFraction > 0 && (f.FlapPeriod <= 0 || f.FlapDown <= 0 || f.FlapDown >= f.FlapPeriod):
		return fmt.Errorf("fleetpub: fault phase: flapping needs 0 < flap down %s < flap period %s", f.FlapDown, f.FlapPeriod)
	case f.PartitionFor > 0 && f.PartitionAt+f.PartitionFor > f.Duration:
		return fmt.Errorf("fleetpub: fault phase: the partition (%s from %s) must end within the phase (%s)", f.PartitionFor, f.PartitionAt, f.Duration)
	}
	return nil
}

// FaultPhase is the fault phase's result: what it cost and how the gateway routed (Phase),
// what was done to the links, what the gateway counted, and how it recovered.
type FaultPhase struct {
	Phase
	Flapping int // engines whose link flapped
	// Downs and Ups count links taken down and brought back; UpRetries the times a link could
	// not come back at once (its old socket still held the port).
	Downs, Ups, UpRetries int
	// MinStreamsUp is the fewest streams the gateway reported up (kvgate_kv_stream_up) in
	// the scrapes taken every 250 ms during the phase: the partition shows here.
	MinStreamsUp float64
	// Gaps, Replays and Resets are the gateway's kvgate_kv_event_gaps_total,
	// kvgate_kv_replay_requests_total and kvgate_kv_worker_resets_total over the phase (a gap
	// that replay cannot repair resets the worker).
	Gaps, Replays, Resets float64
	// ByReason splits Replays by result and Resets by reason ("replays/ok", "resets/gap").
	ByReason map[string]float64
	// RecoveredIn is the time from the phase's end (every link up again) until the gateway
	// reported every stream up.
	RecoveredIn time.Duration
	// MembershipsBefore is the index's (worker, block) pairs at the end of the steady state
	// (Memberships, at the end of the fault phase, after recovery).
	MembershipsBefore float64
	// HeapGrowthMiB is the live heap at the end of the phase minus at the end of the steady
	// state; GoroutineGrowth and FDGrowth the same for go_goroutines and process_open_fds.
	HeapGrowthMiB             float64
	GoroutineGrowth, FDGrowth float64
}

// faultSender decides, message by message, whether its engine's link is down now, taking it
// down or bringing it back as its state changes. It runs on the publishing goroutine only (the
// PUB sockets are not goroutine-safe).
type faultSender struct {
	f     Faults
	start time.Time
	// flap[w] is engine w's place among the flapping engines, -1 when it does not flap.
	flap  []int
	nflap int
	pubs  []*kvbridge.Publisher
	down  []bool

	downs, ups, upRetries int
}

func newFaultSender(f Faults, pubs []*kvbridge.Publisher) *faultSender {
	s := &faultSender{f: f, pubs: pubs, flap: make([]int, len(pubs)), down: make([]bool, len(pubs))}
	// Flapping engines are spread over the fleet.
	n := int(math.Round(f.FlapFraction * float64(len(pubs))))
	for w := range s.flap {
		s.flap[w] = -1
	}
	for i := range n {
		s.flap[i*len(pubs)/n] = i
	}
	s.nflap = n
	return s
}

// isDown reports whether engine w's link is down at t into the phase.
func (s *faultSender) isDown(w int, t time.Duration) bool {
	if s.f.PartitionFor > 0 && t >= s.f.PartitionAt && t < s.f.PartitionAt+s.f.PartitionFor {
		return true
	}
	if j := s.flap[w]; j >= 0 {
		off := time.Duration(j) * s.f.FlapPeriod / time.Duration(s.nflap)
		return (t+off)%s.f.FlapPeriod < s.f.FlapDown
	}
	return false
}

func (s *faultSender) send(m *steadyMsg) (bool, error) {
	p := s.pubs[m.w]
	if s.isDown(m.w, time.Since(s.start)) {
		if !s.down[m.w] {
			if err := p.SetLinkDown(true); err != nil {
				return false, err
			}
			s.down[m.w] = true
			s.downs++
		}
	} else if s.down[m.w] {
		s.up(m.w) // if the port is still held, the link stays down until the next message
	}
	_, err := p.PublishPayload(m.payload, s.down[m.w])
	return !s.down[m.w], err
}

// up brings engine w's link back, reporting whether it could.
func (s *faultSender) up(w int) bool {
	if err := s.pubs[w].SetLinkDown(false); err != nil {
		s.upRetries++
		return false
	}
	s.down[w] = false
	s.ups++
	return true
}

// upAll brings every link that is down back, retrying for a bounded time.
func (s *faultSender) upAll(ctx context.Context) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		left := 0
		for w, d := range s.down {
			if d && !s.up(w) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleetpub: %d publishers could not bind their endpoints again", left)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// runFaults runs the fault phase after the steady state ended at the scrape steadyEnd.
func runFaults(ctx context.Context, o Options, ph *phaseRun, msgs steadyMsgs, base, steadyEnd metrics, mURL, admin string, stdout io.Writer) (*FaultPhase, error) {
	fs := newFaultSender(o.Faults, ph.pubs)
	ph.msgs, ph.send = msgs, fs.send
	before, err := scrape(ctx, ph.client, mURL)
	if err != nil {
		return nil, err
	}
	// Streams up, sampled while the faults run.
	minUp := math.Inf(1)
	sctx, stop := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			if m, err := scrape(sctx, ph.client, mURL); err == nil {
				minUp = math.Min(minUp, m.sum("kvgate_kv_stream_up"))
			}
		}
	}()
	fs.start = time.Now()
	err = ph.run(ctx, o.Faults.Duration)
	stop()
	<-sampled
	if err != nil {
		return nil, err
	}
	if err := fs.upAll(ctx); err != nil {
		return nil, err
	}
	upAt := time.Now()
	recovered := time.Duration(-1)
	for deadline := upAt.Add(o.Faults.RecoverWithin); time.Now().Before(deadline); {
		m, err := scrape(ctx, ph.client, mURL)
		if err != nil {
			return nil, err
		}
		if m.sum("kvgate_kv_stream_up") >= float64(o.Workers) {
			recovered = time.Since(upAt)
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if recovered < 0 {
		return nil, fmt.Errorf("fleetpub: fault phase: not every stream was up %s after the publishers came back", o.Faults.RecoverWithin)
	}
	end, err := waitApplied(ctx, ph.client, mURL, admin, o.ProfileDir, "faults")
	if err != nil {
		return nil, err
	}
	fr := &FaultPhase{Phase: ph.report(o, base, before, end), Flapping: fs.nflap,
		Downs: fs.downs, Ups: fs.ups, UpRetries: fs.upRetries, MinStreamsUp: minUp,
		Gaps:        end.sum("kvgate_kv_event_gaps_total") - before.sum("kvgate_kv_event_gaps_total"),
		Replays:     end.sum("kvgate_kv_replay_requests_total") - before.sum("kvgate_kv_replay_requests_total"),
		Resets:      end.sum("kvgate_kv_worker_resets_total") - before.sum("kvgate_kv_worker_resets_total"),
		RecoveredIn: recovered, MembershipsBefore: steadyEnd.sum("kvgate_index_blocks"),
		ByReason:        map[string]float64{},
		HeapGrowthMiB:   (end.sum("go_gc_heap_live_bytes") - steadyEnd.sum("go_gc_heap_live_bytes")) / (1 << 20),
		GoroutineGrowth: end.sum("go_goroutines") - steadyEnd.sum("go_goroutines"),
		FDGrowth:        end.sum("process_open_fds") - steadyEnd.sum("process_open_fds"),
	}
	for k, v := range end.by {
		if d := v - before.by[k]; d > 0 {
			k = strings.Replace(strings.Replace(k, "kvgate_kv_worker_resets_total", "resets", 1), "kvgate_kv_replay_requests_total", "replays", 1)
			fr.ByReason[k] = d
		}
	}
	writeFaults(stdout, o, fr)
	if len(ph.errs) > 0 {
		return fr, errors.Join(errors.New("fleetpub: fault phase"), ph.failed())
	}
	return fr, nil
}

func writeFaults(w io.Writer, o Options, f *FaultPhase) {
	keys := make([]string, 0, len(f.ByReason))
	for k := range f.ByReason {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var by strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&by, " %s=%.0f", strings.ReplaceAll(k, "/", "_"), f.ByReason[k])
	}
	fmt.Fprintf(w, "fleetpub: fault phase %s: %d engines flapping, %s partition of all: %d links down and up (%d retries); gateway CPU %.2f cores, lookup p50 %.0f µs p99 %.0f µs, completion p99 %.2f ms, %d completions (%d failed); streams up at least %.0f, every stream up %s after the last link came back; %.0f gaps, %.0f replay requests, %.0f resets; live heap %+.0f MiB, goroutines %+.0f, fds %+.0f\n",
		o.Faults.Duration, f.Flapping, o.Faults.PartitionFor, f.Downs, f.UpRetries, f.Cores, f.LookupP50us, f.LookupP99us, f.CompletionP99ms, f.Completions, f.Failed,
		f.MinStreamsUp, f.RecoveredIn.Round(time.Millisecond), f.Gaps, f.Replays, f.Resets, f.HeapGrowthMiB, f.GoroutineGrowth, f.FDGrowth)
	fmt.Fprintf(w, "SCALINGFAULTS workers=%d flapping=%d partition_s=%.1f downs=%d ups=%d gateway_cpu_cores=%.3f lookup_p50_us=%.0f lookup_p99_us=%.0f completion_p99_ms=%.2f completions=%d failed=%d min_streams_up=%.0f recovered_ms=%d gaps=%.0f replays=%.0f resets=%.0f memberships_before=%.0f memberships_after=%.0f heap_growth_mib=%.1f goroutine_growth=%.0f fd_growth=%.0f%s\n",
		o.Workers, f.Flapping, o.Faults.PartitionFor.Seconds(), f.Downs, f.Ups, f.Cores, f.LookupP50us, f.LookupP99us, f.CompletionP99ms, f.Completions, f.Failed,
		f.MinStreamsUp, f.RecoveredIn.Milliseconds(), f.Gaps, f.Replays, f.Resets, f.MembershipsBefore, f.Memberships, f.HeapGrowthMiB, f.GoroutineGrowth, f.FDGrowth, by.String())
}
