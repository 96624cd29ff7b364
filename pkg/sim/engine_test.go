package sim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// instantClock is a fake Clock whose After advances the clock by d and fires at once, so an
// Engine runs as fast as the CPU allows while its simulated times stay exact. Waits of
// exactly holdFor are not auto-fired: they block until release is called.
type instantClock struct {
	mu      sync.Mutex
	now     time.Time
	holdFor time.Duration
	held    []chan time.Time
	heldC   chan struct{} // signalled when a wait is held
}

func newInstantClock() *instantClock {
	return &instantClock{now: time.Unix(1_700_000_000, 0), heldC: make(chan struct{}, 16)}
}

func (c *instantClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *instantClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holdFor > 0 && d == c.holdFor {
		c.held = append(c.held, ch)
		c.heldC <- struct{}{}
		return ch
	}
	c.now = c.now.Add(d)
	ch <- c.now
	return ch
}

// lateClock is an instantClock whose timers fire late by extra.
type lateClock struct {
	*instantClock
	extra time.Duration
}

func (c lateClock) After(d time.Duration) <-chan time.Time { return c.instantClock.After(d + c.extra) }

func (c *instantClock) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.held {
		c.now = c.now.Add(c.holdFor)
		ch <- c.now
	}
	c.held = nil
}

// ttftRecorder is an Observer that publishes TTFTs on a channel.
type ttftRecorder struct {
	ttft     chan time.Duration
	finished chan string
}

func newTTFTRecorder() *ttftRecorder {
	return &ttftRecorder{ttft: make(chan time.Duration, 64), finished: make(chan string, 64)}
}

func (r *ttftRecorder) ObserveStep(Stats)                 {}
func (r *ttftRecorder) ObserveFirstToken(d time.Duration) { r.ttft <- d }
func (r *ttftRecorder) ObserveFinished(reason string, _ time.Duration, _, _ int) {
	r.finished <- reason
}

func runEngine(t *testing.T, cfg EngineConfig, clock Clock, obs Observer) *Engine {
	t.Helper()
	e, err := NewEngine(cfg, clock, nil, obs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

func waitStream(t *testing.T, s *Stream) ([]uint32, Info) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	toks, info, err := s.Wait(ctx, nil)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return toks, info
}

func TestEngineFakeClockExactTTFT(t *testing.T) {
	rec := newTTFTRecorder()
	e := runEngine(t, EngineConfig{TimeScale: 0.01}, newInstantClock(), rec)
	cfg := e.Config()
	for i, wantCached := range []int{0, 1040} {
		s, err := e.Submit(newReq("r", seqTokens(1, 1050), 8), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		toks, info := waitStream(t, s)
		if len(toks) != 8 || info.FinishReason != "length" || info.CachedTokens != wantCached {
			t.Fatalf("request %d: %d tokens, %+v", i, len(toks), info)
		}
		want := cfg.StepOverhead + time.Duration(1050-wantCached)*cfg.PrefillPerToken + cfg.DecodePerSeq
		if got := <-rec.ttft; got != want {
			t.Errorf("request %d: simulated TTFT got %v, want %v", i, got, want)
		}
	}
}

func TestEngineLag(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clock Clock
		want  time.Duration
	}{
		{"punctual", newInstantClock(), 0},
		{"timers 5 ms late", lateClock{newInstantClock(), 5 * time.Millisecond}, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newTTFTRecorder()
			e := runEngine(t, EngineConfig{}, tc.clock, rec)
			s, err := e.Submit(newReq("a", seqTokens(1, 20), 5), false, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitStream(t, s)
			if got := e.MaxLag(); got != tc.want {
				t.Errorf("MaxLag: got %v, want %v", got, tc.want)
			}
			// Lateness never becomes simulated latency.
			cfg := e.Config()
			if got, want := <-rec.ttft, cfg.StepOverhead+20*cfg.PrefillPerToken+cfg.DecodePerSeq; got != want {
				t.Errorf("TTFT: got %v, want %v", got, want)
			}
		})
	}
}

func TestEngineStallFault(t *testing.T) {
	clock := newInstantClock()
	clock.holdFor = time.Hour
	rec := newTTFTRecorder()
	e := runEngine(t, EngineConfig{StallAfter: 1, StallFor: time.Hour}, clock, rec)
	s1, err := e.Submit(newReq("a", seqTokens(1, 20), 2), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitStream(t, s1)
	<-clock.heldC // the loop is now frozen on the stall timer
	s2, err := e.Submit(newReq("b", seqTokens(100, 20), 2), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, done := s2.Take(nil); done {
		t.Fatal("request finished while the engine was stalled")
	}
	if got := e.NumWaiting(); got != 1 {
		t.Errorf("waiting during stall: got %d, want 1", got)
	}
	clock.release()
	if _, info := waitStream(t, s2); info.FinishReason != "length" {
		t.Errorf("after the stall: %+v", info)
	}
}

func TestStreamInterval(t *testing.T) {
	tests := []struct {
		name       string
		interval   int
		wantTokens bool
		want       []int // token numbers (1-based) after which the stream is signalled
	}{
		{"every token", 1, true, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"interval 4", 4, true, []int{1, 5, 9, 10}},
		{"non-streaming: end only", 1, false, []int{10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Stream{ready: make(chan struct{}, 1), wantTokens: tc.wantTokens, interval: tc.interval}
			var got []int
			for i := 1; i <= 10; i++ {
				dl := &delivery{tok: uint32(i), hasTok: true, first: i == 1}
				if i == 10 {
					dl.finish = "length"
				}
				s.push(dl)
				select {
				case <-s.ready:
					got = append(got, i)
				default:
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("signals (-want +got):\n%s", diff)
			}
			toks, info, done := s.Take(nil)
			if len(toks) != 10 || !done || info.FinishReason != "length" {
				t.Errorf("Take: %d tokens, done %v, %+v", len(toks), done, info)
			}
		})
	}
}

func TestEngineShutdownAbortsAndRejects(t *testing.T) {
	clock := newInstantClock()
	clock.holdFor = time.Hour
	e, err := NewEngine(EngineConfig{StallAfter: 1, StallFor: time.Hour}, clock, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	s1, _ := e.Submit(newReq("a", seqTokens(1, 20), 2), false, nil)
	waitStream(t, s1)
	<-clock.heldC
	s2, err := e.Submit(newReq("b", seqTokens(1, 20), 2), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if _, info := waitStream(t, s2); info.FinishReason != "abort" {
		t.Errorf("pending request after shutdown: %+v, want abort", info)
	}
	if _, err := e.Submit(newReq("c", seqTokens(1, 20), 2), false, nil); err == nil {
		t.Error("Submit after Run returned: got nil error")
	}
}

func TestRanksPickLeastLoaded(t *testing.T) {
	clock := newInstantClock()
	clock.holdFor = time.Hour
	var ranks Ranks
	for r := range 3 {
		e, err := NewEngine(EngineConfig{Rank: r}, clock, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ranks = append(ranks, e)
	}
	// No engine runs: submissions stay waiting and count as load.
	var got []int
	for i := range 6 {
		e := ranks.Pick()
		got = append(got, e.Rank())
		if _, err := e.Submit(newReq("x", seqTokens(uint32(i), 20), 2), false, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := []int{0, 1, 2, 0, 1, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picked ranks %v, want %v", got, want)
		}
	}
	if ranks.NumWaiting() != 6 {
		t.Errorf("NumWaiting: got %d, want 6", ranks.NumWaiting())
	}
}
