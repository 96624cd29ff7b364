package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the wall clock an Engine runs against. Tests may inject a fake; production uses
// SystemClock.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// EventSink receives the KV events of each engine step, as one batch. PublishStep is called
// from the engine's loop goroutine, in step order; ev and everything it references are only
// valid during the call (the sink encodes or copies what it keeps). ts is the wall time of
// the batch.
type EventSink interface {
	PublishStep(rank int, ts time.Time, ev *StepEvents) error
}

// Observer receives per-request measurements from the engine loop, outside the engine lock.
// Durations are simulated time. *Metrics implements it.
type Observer interface {
	ObserveStep(delta Stats)
	ObserveFirstToken(ttft time.Duration)
	ObserveFinished(reason string, e2e time.Duration, promptTokens, outputTokens int)
}

// EngineConfig configures one engine rank.
type EngineConfig struct {
	Core Config
	// Rank is the data-parallel rank this engine publishes as.
	Rank int
	// TimeScale maps simulated to wall time: wall = simulated × TimeScale (default 1; 0.02
	// runs 50× faster than the modelled GPU).
	TimeScale float64
	// StallAfter, when > 0, freezes the engine loop once that many requests have finished
	// (a hung engine: no tokens, no events); it resumes after StallFor, or never when
	// StallFor is 0.
	StallAfter int64
	StallFor   time.Duration
	// StreamInterval signals streaming clients every StreamInterval tokens (and always for
	// the first token and the end), like SGLang's --stream-interval; default 1. Larger values
	// cut the per-token wakeups and writes of fast, heavily loaded simulations.
	StreamInterval int
}

// Engine runs one rank's engine model (scheduler and KV cache) against the wall clock: requests
// are submitted from any goroutine, and Run steps the scheduler, sleeping (on a real timer) for
// each step's duration scaled by TimeScale, delivering tokens to request streams and publishing
// each step's KV events as one batch.
//
// Engine must not be copied.
type Engine struct {
	rank       int
	scale      float64
	clock      Clock
	sink       EventSink
	obs        Observer
	start      time.Time
	wake       chan struct{}
	stallAfter int64
	stallFor   time.Duration
	interval   int

	// mu guards core, stopped and every Request/Stream field the core owns. Lock order:
	// Engine.mu before Stream.mu; the loop never holds mu while it sleeps, delivers or
	// publishes.
	mu      sync.Mutex
	core    *core
	stopped bool
	v       time.Duration // the engine's simulated clock (see Run)
	last    Stats

	// Queue lengths and usage, refreshed after every step for lock-free readers.
	numRunning, numWaiting atomic.Int64
	usageBits              atomic.Uint64
	finished               atomic.Int64
	lag, maxLag            atomic.Int64 // simulated ns the engine clock is (was at most) behind the wall

	// Loop-owned scratch.
	deliveries []delivery
}

// NewEngine returns an engine that has not started; call Run. sink and obs may be nil.
func NewEngine(cfg EngineConfig, clock Clock, sink EventSink, obs Observer) (*Engine, error) {
	c, err := newCore(cfg.Core)
	if err != nil {
		return nil, err
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.TimeScale < 0 || math.IsNaN(cfg.TimeScale) || math.IsInf(cfg.TimeScale, 0) {
		return nil, fmt.Errorf("sim: time scale %v: %w", cfg.TimeScale, ErrBadConfig)
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return &Engine{
		rank:       cfg.Rank,
		scale:      cfg.TimeScale,
		clock:      clock,
		sink:       sink,
		obs:        obs,
		start:      clock.Now(),
		wake:       make(chan struct{}, 1),
		stallAfter: cfg.StallAfter,
		stallFor:   cfg.StallFor,
		interval:   max(cfg.StreamInterval, 1),
		core:       c,
	}, nil
}

// SetObserver sets the observer of per-request measurements; call it before Run.
func (e *Engine) SetObserver(o Observer) { e.obs = o }

// Rank returns the engine's data-parallel rank.
func (e *Engine) Rank() int { return e.rank }

// Config returns the effective engine model configuration.
func (e *Engine) Config() Config { return e.core.Config() }

// TimeScale returns the wall/simulated time ratio.
func (e *Engine) TimeScale() float64 { return e.scale }

// NumRunning returns the running requests after the last step (lock-free).
func (e *Engine) NumRunning() int { return int(e.numRunning.Load()) }

// NumWaiting returns the queued requests after the last step or submission (lock-free).
func (e *Engine) NumWaiting() int { return int(e.numWaiting.Load()) }

// Load returns running + waiting, for spreading requests over ranks.
func (e *Engine) Load() int { return e.NumRunning() + e.NumWaiting() }

// Lag returns how far (in simulated time) the engine's clock was behind the wall clock at
// its latest step: how late tokens reach clients because the process lacked CPU. Simulated
// latencies do not include it.
func (e *Engine) Lag() time.Duration { return time.Duration(e.lag.Load()) }

// MaxLag returns the largest Lag seen since the engine started; keep it small (raise the
// time scale) when clients measure latencies in wall time.
func (e *Engine) MaxLag() time.Duration { return time.Duration(e.maxLag.Load()) }

// Usage returns the KV-cache usage fraction after the last step (lock-free).
func (e *Engine) Usage() float64 { return math.Float64frombits(e.usageBits.Load()) }

// simNow returns the simulated time since the engine was created.
func (e *Engine) simNow() time.Duration {
	return time.Duration(float64(e.clock.Now().Sub(e.start)) / e.scale)
}

// wallAt returns the wall time of simulated instant t.
func (e *Engine) wallAt(t time.Duration) time.Time {
	return e.start.Add(time.Duration(float64(t) * e.scale))
}

// Validate checks r against the engine's limits without queueing it.
func (e *Engine) Validate(r *Request) error { return e.core.Validate(r) }

// Submit stamps r's arrival with the current (wall-derived) simulated time, queues it and
// returns the stream its tokens arrive on. With wantTokens false the
// stream is only signalled when the request ends (cheaper for non-streaming clients). ready,
// when not nil, is the channel signalled instead of a private one (capacity ≥ 1; several
// streams may share it, e.g. the n choices of one HTTP request). The caller must eventually
// either read the stream to its end or call Abort.
func (e *Engine) Submit(r *Request, wantTokens bool, ready chan struct{}) (*Stream, error) {
	if ready == nil {
		ready = make(chan struct{}, 1)
	}
	s := &Stream{ready: ready, wantTokens: wantTokens, interval: e.interval, prompt: len(r.Prompt)}
	r.stream = s
	// Hash the prompt's blocks before taking the engine lock (the core's config is immutable).
	h := hasherPool.Get().(*hasher)
	prepareHashes(r, e.core.cfg, h)
	hasherPool.Put(h)
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil, ErrStopped
	}
	// Never stamp an arrival before the engine's clock: it runs ahead of the wall clock by
	// the rounding of scaled timers.
	err := e.core.Add(r, max(e.simNow(), e.v))
	if err == nil {
		e.numWaiting.Store(int64(e.core.NumWaiting()))
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	e.poke()
	return s, nil
}

var hasherPool = sync.Pool{New: func() any { return new(hasher) }}

// Abort removes r from the engine (client went away). Its stream ends with reason "abort"
// unless it already finished.
func (e *Engine) Abort(r *Request) {
	e.mu.Lock()
	ok := e.core.Abort(r)
	if ok {
		e.numRunning.Store(int64(e.core.NumRunning()))
		e.numWaiting.Store(int64(e.core.NumWaiting()))
	}
	e.mu.Unlock()
	if ok {
		r.stream.finish("abort", 0)
		e.poke()
	}
}

// ReleaseHeld releases the blocks a finished HoldKV request kept (wire/pd.md §2.7: on the
// decode engine's read, or when the lease expires). Safe to call more than once.
func (e *Engine) ReleaseHeld(r *Request) {
	e.mu.Lock()
	ok := e.core.ReleaseHeld(r)
	e.mu.Unlock()
	if ok {
		e.poke()
	}
}

// HeldBlocks returns the block ids a finished HoldKV request holds (its remote_block_ids).
func (e *Engine) HeldBlocks(r *Request) []int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(r.blocks)
}

// CachedTokens returns how many leading tokens of prompt the prefix cache holds now (whole
// blocks, at most all but the last token, as admission counts them).
func (e *Engine) CachedTokens(prompt []uint32) int {
	r := &Request{Prompt: prompt}
	h := hasherPool.Get().(*hasher)
	prepareHashes(r, e.core.cfg, h)
	hasherPool.Put(h)
	bs := e.core.cfg.BlockSize
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.cache.Match(r.hashes[:min((len(prompt)-1)/bs, len(r.hashes))]) * bs
}

// ResetPrefixCache drops every cached block and publishes AllBlocksCleared with the next
// batch. It fails while requests are running, as vLLM's does.
func (e *Engine) ResetPrefixCache() bool {
	e.mu.Lock()
	ok := e.core.ResetPrefixCache()
	e.mu.Unlock()
	if ok {
		e.poke()
	}
	return ok
}

// AppendCached appends the folded hashes of every block currently cached.
func (e *Engine) AppendCached(dst []uint64) []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.AppendCached(dst)
}

// Stats returns the core's cumulative counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Stats()
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// delivery is one token (or the end) for one stream, computed under mu and handed over after.
type delivery struct {
	s          *Stream
	tok        uint32
	hasTok     bool
	finish     string
	cached     int
	first      bool
	ttft, e2e  time.Duration
	prompt     int
	numOutputs int
}

// Run steps the engine until ctx is done. On return every unfinished request's stream ends
// with reason "abort" and later submissions fail with ErrStopped. Errors from the event sink
// are not fatal (events are best effort, as on a real engine); Run returns nil on
// cancellation.
func (e *Engine) Run(ctx context.Context) error {
	defer e.shutdown()
	stalled := false
	// e.v is the engine's own simulated clock. It advances by exactly each step's modelled
	// duration, and jumps forward only when the engine has nothing to do (to the next
	// arrival, or past a stall). When the process is late (CPU starved), v falls behind the
	// wall clock and the loop runs steps back to back until it catches up, so lateness never
	// turns into simulated queueing: simulated latencies stay exact and only the wall-clock
	// delivery is late, by Lag (exported so benchmarks can check their time scale).
	for {
		if !stalled && e.stallAfter > 0 && e.finished.Load() >= e.stallAfter {
			stalled = true
			var until <-chan time.Time
			if e.stallFor > 0 {
				until = e.clock.After(e.stallFor)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-until:
			}
			e.mu.Lock()
			e.v = max(e.v, e.simNow()) // a frozen engine's time passes too
			e.mu.Unlock()
		}
		e.mu.Lock()
		v := e.v
		d, ok := e.core.Schedule(v)
		if !ok {
			if at, pending := e.core.NextArrival(); pending && at > v {
				e.v = at // idle until the next request arrived (it already has, in wall time)
				e.mu.Unlock()
				continue
			}
			ev := e.core.TakeEvents()
			e.refreshLocked()
			e.mu.Unlock()
			e.publish(ev)
			select {
			case <-ctx.Done():
				return nil
			case <-e.wake:
			}
			continue
		}
		e.refreshLocked()
		e.mu.Unlock()

		if lag := e.simNow() - v; lag > 0 {
			e.lag.Store(int64(lag))
			if lag > time.Duration(e.maxLag.Load()) {
				e.maxLag.Store(int64(lag))
			}
		} else {
			e.lag.Store(0)
		}
		if wait := e.wallAt(v + d).Sub(e.clock.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-e.clock.After(wait):
			}
		}

		e.mu.Lock()
		e.v = v + d
		delta, ev := e.finishStepLocked(e.v)
		e.mu.Unlock()

		e.deliver(delta)
		e.publish(ev)
	}
}

// finishStepLocked ends the step at simulated time end: it queues the step's token deliveries
// and returns the step's statistics and KV events for delivery outside the lock.
func (e *Engine) finishStepLocked(end time.Duration) (Stats, *StepEvents) {
	updated := e.core.Finish(end)
	e.deliveries = e.deliveries[:0]
	for _, r := range updated {
		dl := delivery{s: r.stream, tok: r.tokens[len(r.tokens)-1], hasTok: true, finish: r.FinishReason,
			cached: r.CachedTokens, first: r.numOutput == 1, prompt: len(r.Prompt), numOutputs: r.numOutput}
		if dl.first {
			dl.ttft = r.FirstToken - r.Arrival
		}
		if dl.finish != "" {
			dl.e2e = r.Done - r.Arrival
		}
		e.deliveries = append(e.deliveries, dl)
	}
	ev := e.core.TakeEvents()
	st := e.core.Stats()
	delta := Stats{
		PrefixQueries:    st.PrefixQueries - e.last.PrefixQueries,
		PrefixHits:       st.PrefixHits - e.last.PrefixHits,
		PromptTokens:     st.PromptTokens - e.last.PromptTokens,
		GenerationTokens: st.GenerationTokens - e.last.GenerationTokens,
		Preemptions:      st.Preemptions - e.last.Preemptions,
		Steps:            st.Steps - e.last.Steps,
	}
	e.last = st
	e.refreshLocked()
	return delta, ev
}

func (e *Engine) deliver(delta Stats) {
	if e.obs != nil {
		e.obs.ObserveStep(delta)
	}
	var done int64
	for i := range e.deliveries {
		dl := &e.deliveries[i]
		// Metrics first: once pushed, the client may have its answer and read /metrics.
		if e.obs != nil && dl.first {
			e.obs.ObserveFirstToken(dl.ttft)
		}
		if dl.finish != "" {
			done++
			if e.obs != nil {
				e.obs.ObserveFinished(dl.finish, dl.e2e, dl.prompt, dl.numOutputs)
			}
		}
		dl.s.push(dl)
		dl.s = nil
	}
	if done > 0 {
		e.finished.Add(done)
	}
}

func (e *Engine) publish(ev *StepEvents) {
	if e.sink == nil || ev.Len() == 0 {
		return
	}
	// Errors are counted by the sink; a lost batch is what a real engine's PUB does too.
	_ = e.sink.PublishStep(e.rank, e.clock.Now(), ev)
}

func (e *Engine) refreshLocked() {
	e.numRunning.Store(int64(e.core.NumRunning()))
	e.numWaiting.Store(int64(e.core.NumWaiting()))
	e.usageBits.Store(math.Float64bits(e.core.cache.Usage()))
}

// shutdown ends every queued request's stream with "abort".
func (e *Engine) shutdown() {
	e.mu.Lock()
	e.stopped = true
	var pending []*Request
	pending = append(pending, e.core.running...)
	pending = append(pending, e.core.waiting...)
	for _, r := range pending {
		e.core.Abort(r)
	}
	e.refreshLocked()
	e.mu.Unlock()
	for _, r := range pending {
		r.stream.finish("abort", 0)
	}
}

// Stream carries one request's output from the engine loop to its client handler.
// Stream must not be copied.
type Stream struct {
	ready      chan struct{}
	wantTokens bool
	interval   int
	prompt     int

	// mu guards the fields below.
	mu      sync.Mutex
	pending []uint32
	unsent  int // tokens pushed since the last signal
	reason  string
	cached  int
	done    bool
}

// Info is what a Stream knows about its request.
type Info struct {
	// PromptTokens and CachedTokens: the prompt length and how much of it hit the prefix
	// cache (valid once the first token arrived).
	PromptTokens, CachedTokens int
	// FinishReason is "" while running, else "length", "stop" or "abort".
	FinishReason string
}

// Ready is signalled when new tokens or the end are available (only at the end for streams
// submitted with wantTokens false). One signal may cover several tokens.
func (s *Stream) Ready() <-chan struct{} { return s.ready }

// Take appends the tokens that arrived since the previous Take to dst and reports the
// request's state; done is true once the request ended and every token was taken.
func (s *Stream) Take(dst []uint32) (_ []uint32, info Info, done bool) {
	s.mu.Lock()
	dst = append(dst, s.pending...)
	s.pending = s.pending[:0]
	info = Info{PromptTokens: s.prompt, CachedTokens: s.cached, FinishReason: s.reason}
	done = s.done
	s.mu.Unlock()
	return dst, info, done
}

// Wait blocks until the request ends (or ctx is done) and returns all its remaining tokens.
func (s *Stream) Wait(ctx context.Context, dst []uint32) ([]uint32, Info, error) {
	for {
		var info Info
		var done bool
		dst, info, done = s.Take(dst)
		if done {
			return dst, info, nil
		}
		select {
		case <-ctx.Done():
			return dst, info, ctx.Err()
		case <-s.ready:
		}
	}
}

func (s *Stream) push(dl *delivery) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	if dl.hasTok {
		s.pending = append(s.pending, dl.tok)
		s.unsent++
	}
	if dl.hasTok {
		s.cached = dl.cached
	}
	if dl.finish != "" {
		s.reason, s.done = dl.finish, true
	}
	signal := s.done || (s.wantTokens && (dl.first || s.unsent >= s.interval))
	if signal {
		s.unsent = 0
	}
	s.mu.Unlock()
	if signal {
		select {
		case s.ready <- struct{}{}:
		default:
		}
	}
}

func (s *Stream) finish(reason string, cached int) {
	s.push(&delivery{finish: reason, cached: cached})
}

var _ Clock = SystemClock{}
