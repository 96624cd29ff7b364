package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const defaultTestTimeout = 10 * time.Second

// clock is an injected clock the tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestQueue(t *testing.T, cfg Config) (*Queue[string], *clock) {
	t.Helper()
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	cfg.Now = c.Now
	q, err := New[string](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q, c
}

// req is a request of key k in band p named name: Score reports the blocks matches[name]
// holds on each worker.
type req struct {
	name string
	p    int
	key  string
	cost int64
}

func enqueue(t *testing.T, q *Queue[string], rs []req, score func(name, w string) (int, bool)) map[*Ticket[string]]string {
	t.Helper()
	names := map[*Ticket[string]]string{}
	for _, r := range rs {
		r := r
		var sc func(string) Fit
		if score != nil {
			sc = func(w string) Fit {
				m, ok := score(r.name, w)
				return Fit{Matched: m, OK: ok}
			}
		}
		tk, err := q.Enqueue(Request[string]{Priority: r.p, Key: r.key, Cost: r.cost, Score: sc})
		if err != nil {
			t.Fatalf("enqueue %s: %v", r.name, err)
		}
		names[tk] = r.name
	}
	return names
}

// drain grants n slots of worker w and returns the names in grant order.
func drain(t *testing.T, q *Queue[string], names map[*Ticket[string]]string, w string, n int) []string {
	t.Helper()
	var got []string
	for range n {
		tk, ok := q.Next(w)
		if !ok {
			break
		}
		if tk.worker != w || !tk.Granted() {
			t.Fatalf("ticket %s: worker %q granted %v, want %q true", names[tk], tk.worker, tk.Granted(), w)
		}
		got = append(got, names[tk])
	}
	return got
}

func TestOrder(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		reqs  []req
		score func(name, w string) (int, bool)
		want  []string
	}{
		{
			name: "bands: lower priority value first, FCFS within a key",
			reqs: []req{{"low1", 5, "a", 1}, {"high1", 0, "a", 1}, {"low2", 5, "a", 1}, {"high2", 0, "a", 1}, {"urgent", -1, "a", 1}},
			want: []string{"urgent", "high1", "high2", "low1", "low2"},
		},
		{
			name: "two keys of one band alternate although one queued all first",
			reqs: []req{{"a1", 0, "a", 1}, {"a2", 0, "a", 1}, {"a3", 0, "a", 1}, {"a4", 0, "a", 1}, {"b1", 0, "b", 1}, {"b2", 0, "b", 1}},
			want: []string{"a1", "b1", "a2", "b2", "a3", "a4"},
		},
		{
			name: "fairness counts tokens: a key of 4-token prompts gets 4 turns per turn of a 16-token key",
			reqs: []req{{"big1", 0, "big", 16}, {"big2", 0, "big", 16}, {"s1", 0, "s", 4}, {"s2", 0, "s", 4}, {"s3", 0, "s", 4}, {"s4", 0, "s", 4}, {"s5", 0, "s", 4}},
			want: []string{"big1", "s1", "s2", "s3", "s4", "big2", "s5"},
		},
		{
			name:  "cache-aware: the longest prefix on the freed worker among the look-ahead wins",
			cfg:   Config{LookAhead: 3},
			reqs:  []req{{"r1", 0, "a", 1}, {"r2", 0, "b", 1}, {"r3", 0, "c", 1}, {"r4", 0, "d", 1}},
			score: func(name, w string) (int, bool) { return map[string]int{"r3": 5, "r4": 50}[name], true },
			// r4 holds more but is past the look-ahead of 3; then r4 enters it.
			want: []string{"r3", "r4", "r1", "r2"},
		},
		{
			name: "a request is passed over for cached prefixes at most MaxSkips times",
			reqs: []req{{"b1", 0, "b", 1}, {"a1", 0, "a", 1}, {"a2", 0, "a", 1}, {"a3", 0, "a", 1}, {"a4", 0, "a", 1}},
			score: func(name, w string) (int, bool) {
				return map[string]int{"a1": 5, "a2": 5, "a3": 5, "a4": 5}[name], true
			},
			want: []string{"a1", "a2", "b1", "a3", "a4"},
		},
		{
			name:  "cache-aware stays inside the best band",
			reqs:  []req{{"low", 1, "a", 1}, {"high", 0, "a", 1}},
			score: func(name, w string) (int, bool) { return map[string]int{"low": 99}[name], true },
			want:  []string{"high", "low"},
		},
		{
			name:  "a request the worker cannot serve is passed over, down to a lower band",
			reqs:  []req{{"adapter", 0, "a", 1}, {"base", 3, "a", 1}},
			score: func(name, w string) (int, bool) { return 0, name != "adapter" },
			want:  []string{"base"},
		},
		{
			name: "look-ahead 1 is plain fair order",
			cfg:  Config{LookAhead: 1},
			reqs: []req{{"r1", 0, "a", 1}, {"r2", 0, "a", 1}},
			score: func(name, w string) (int, bool) {
				return map[string]int{"r2": 9}[name], true
			},
			want: []string{"r1", "r2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := newTestQueue(t, tc.cfg)
			names := enqueue(t, q, tc.reqs, tc.score)
			got := drain(t, q, names, "w1", len(tc.reqs))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("grant order (-want +got):\n%s", d)
			}
		})
	}
}

// TestAgeBound: a low-band request older than MaxWait goes before every newer one, and only
// once it is that old.
func TestAgeBound(t *testing.T) {
	q, clk := newTestQueue(t, Config{MaxWait: time.Second})
	names := enqueue(t, q, []req{{"batch", 10, "b", 1}}, nil)
	clk.advance(500 * time.Millisecond)
	for k, v := range enqueue(t, q, []req{{"i1", 0, "i", 1}, {"i2", 0, "i", 1}, {"i3", 0, "i", 1}}, nil) {
		names[k] = v
	}
	got := drain(t, q, names, "w", 1)
	clk.advance(500 * time.Millisecond)
	got = append(got, drain(t, q, names, "w", 3)...)
	if d := cmp.Diff([]string{"i1", "batch", "i2", "i3"}, got); d != "" {
		t.Errorf("grant order (-want +got):\n%s", d)
	}
}

func TestFull(t *testing.T) {
	q, _ := newTestQueue(t, Config{MaxLen: 2})
	enqueue(t, q, []req{{"a", 0, "k", 1}, {"b", 0, "k", 1}}, nil)
	if _, err := q.Enqueue(Request[string]{}); !errors.Is(err, ErrFull) {
		t.Fatalf("third enqueue: got %v, want ErrFull", err)
	}
	if _, ok := q.Next("w"); !ok {
		t.Fatal("no grant")
	}
	if _, err := q.Enqueue(Request[string]{}); err != nil {
		t.Fatalf("enqueue after a grant: got %v, want room", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{{MaxLen: -1}, {MaxWait: -1}, {LookAhead: -1}, {LookAhead: MaxLookAhead + 1}, {MaxSkips: -1}} {
		if _, err := New[string](cfg); err == nil {
			t.Errorf("New(%+v): got nil error", cfg)
		}
	}
}

// fakeTimers hands Wait timers the test fires.
type fakeTimers struct {
	started chan time.Duration
	fire    chan time.Time
}

func (f *fakeTimers) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.started <- d
	return f.fire, func() bool { return true }
}

func TestWaitEnds(t *testing.T) {
	tests := []struct {
		name    string
		end     func(cancel context.CancelFunc, timers *fakeTimers, q *Queue[string])
		wantErr error
	}{
		{"timeout", func(_ context.CancelFunc, f *fakeTimers, _ *Queue[string]) { f.fire <- time.Time{} }, ErrTimeout},
		{"client gone", func(cancel context.CancelFunc, _ *fakeTimers, _ *Queue[string]) { cancel() }, context.Canceled},
		{"closed", func(_ context.CancelFunc, _ *fakeTimers, q *Queue[string]) { q.Close() }, ErrClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTimers{started: make(chan time.Duration, 1), fire: make(chan time.Time, 1)}
			q, _ := newTestQueue(t, Config{NewTimer: f.NewTimer})
			tk, err := q.Enqueue(Request[string]{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := q.Wait(ctx, tk, time.Minute)
				done <- err
			}()
			if d := <-f.started; d != time.Minute {
				t.Fatalf("timer: got %v, want 1m", d)
			}
			tc.end(cancel, f, q)
			select {
			case err := <-done:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Wait: got %v, want %v", err, tc.wantErr)
				}
			case <-time.After(defaultTestTimeout):
				t.Fatal("Wait did not return")
			}
			if q.Len() != 0 || tk.Granted() {
				t.Fatalf("after the end: Len %d granted %v, want 0 false", q.Len(), tk.Granted())
			}
			if tk, ok := q.Next("w"); ok {
				t.Fatalf("Next granted %v after the only waiter left", tk)
			}
		})
	}
}

// TestGrantRacesCancel: a grant that lands before the client's cancellation is seen leaves
// the caller owning the slot, which Wait says.
func TestGrantRacesCancel(t *testing.T) {
	q, _ := newTestQueue(t, Config{})
	tk, _ := q.Enqueue(Request[string]{})
	if _, ok := q.Next("w"); !ok {
		t.Fatal("no grant")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w, _ := q.Wait(ctx, tk, 0)
	if w != "w" || !tk.Granted() || q.Cancel(tk) {
		t.Fatalf("got worker %q granted %v, want the grant kept", w, tk.Granted())
	}
}

func TestStats(t *testing.T) {
	q, clk := newTestQueue(t, Config{})
	enqueue(t, q, []req{{"a", 0, "x", 1}, {"b", 0, "y", 1}, {"c", 0, "y", 1}}, nil)
	clk.advance(time.Second)
	enqueue(t, q, []req{{"d", 7, "x", 1}}, nil)
	want := Stats{Waiting: 4, Bands: []BandStats{{Priority: 0, Waiting: 3, Keys: 2, OldestWait: time.Second}, {Priority: 7, Waiting: 1, Keys: 1}}}
	if d := cmp.Diff(want, q.Stats()); d != "" {
		t.Errorf("Stats (-want +got):\n%s", d)
	}
	if got := q.Ahead(0); got != 3 {
		t.Errorf("Ahead(0): got %d, want 3", got)
	}
	if got := q.Ahead(9); got != 4 {
		t.Errorf("Ahead(9): got %d, want 4", got)
	}
}

// TestConcurrent runs waiters that give up at random against granters under -race: every
// request ends granted or cancelled, each grant exactly once, and the queue ends empty.
func TestConcurrent(t *testing.T) {
	q, _ := newTestQueue(t, Config{MaxLen: 10_000})
	const waiters = 400
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, cancelled := 0, 0
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := q.Enqueue(Request[string]{Priority: i % 3, Key: string(rune('a' + i%5)), Cost: int64(i%7 + 1),
				Score: func(string) Fit { return Fit{Matched: i % 4, OK: true} }})
			if err != nil {
				t.Error(err)
				return
			}
			ctx, cancel := context.WithCancel(t.Context())
			if i%3 == 0 {
				cancel()
			}
			_, err = q.Wait(ctx, tk, 0)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err == nil || tk.Granted() {
				granted++
			} else {
				cancelled++
			}
		}()
	}
	grants := 0
	deadline := time.Now().Add(defaultTestTimeout)
	for {
		mu.Lock()
		finished := granted + cancelled
		mu.Unlock()
		if finished == waiters {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters stuck: %d of %d finished", finished, waiters)
		}
		if _, ok := q.Next("w"); ok {
			grants++
		}
	}
	wg.Wait()
	if grants != granted || q.Len() != 0 {
		t.Fatalf("grants %d, waiters granted %d (cancelled %d), Len %d: want equal and 0", grants, granted, cancelled, q.Len())
	}
}

// TestHandOffElsewhere: a freed worker takes a request cached on it, else one cached nowhere,
// and one cached on another worker only when nothing else waits; a request cached elsewhere
// counts no skips on this worker, so the skip bound does not force it here either.
func TestHandOffElsewhere(t *testing.T) {
	// home names the worker that holds a request's 32-block prefix ("": none).
	// late3 is held by w3, which is not expected to free a slot soon (Fit.Late).
	home := map[string]string{"on2": "w2", "on3": "w3", "on1": "w1", "on2b": "w2", "late3": "w3"}
	score := func(name string) func(string) Fit {
		return func(w string) Fit {
			h := home[name]
			switch {
			case name == "late3" && w != h:
				return Fit{Elsewhere: 32, Late: true, OK: true}
			case name == "half2": // 16 blocks on w2 only
				if w == "w2" {
					return Fit{Matched: 16, OK: true}
				}
				return Fit{Elsewhere: 16, OK: true}
			case h == "":
				return Fit{OK: true}
			case h == w:
				return Fit{Matched: 32, OK: true}
			}
			return Fit{Elsewhere: 32, OK: true}
		}
	}
	tests := []struct {
		name  string
		reqs  []string // one key, FCFS
		grant []string // the workers that free a slot, in turn
		want  []string
		// class is each grant's Fit.Class, copied its Fit.Copied blocks in all.
		class  []string
		copied int
	}{
		{
			name:  "cached nowhere goes before cached on another worker",
			reqs:  []string{"on2", "on3", "new"},
			grant: []string{"w1"},
			want:  []string{"new"},
			class: []string{ClassNowhere},
		},
		{
			name:  "cached here goes first, then cached nowhere",
			reqs:  []string{"on2", "new", "on1"},
			grant: []string{"w1", "w1"},
			want:  []string{"on1", "new"},
			class: []string{ClassHere, ClassNowhere},
		},
		{
			// on2 is passed over on w1 four times (MaxSkips 2), yet not forced there; w2
			// takes it at once, and w1 takes it only when nothing else waits.
			name:   "no skip bound where another worker holds the request",
			reqs:   []string{"on2", "n1", "n2", "n3", "n4", "on2b"},
			grant:  []string{"w1", "w1", "w1", "w1", "w2", "w1"},
			want:   []string{"n1", "n2", "n3", "n4", "on2", "on2b"},
			class:  []string{ClassNowhere, ClassNowhere, ClassNowhere, ClassNowhere, ClassHere, ClassElsewhere},
			copied: 32,
		},
		{
			// half2 is passed over twice on w2 for the longer on2 prefixes there; the skip
			// bound then makes it next on w2, not on w1, where it is cached less well than on w2.
			name:  "the skip bound forces a request only onto a worker as good as any for it",
			reqs:  []string{"half2", "on2", "on2b", "new", "on2"},
			grant: []string{"w2", "w2", "w1", "w2"},
			want:  []string{"on2", "on2b", "new", "half2"},
			class: []string{ClassHere, ClassHere, ClassNowhere, ClassHere},
		},
		{
			// late3's holder will not free a slot soon: w1 takes it after the new prefix
			// (someone must prefill that) but before on2, whose w2 frees a slot soon.
			name:   "cached on a late worker goes after cached nowhere, before cached on a worker freeing soon",
			reqs:   []string{"on2", "late3", "new"},
			grant:  []string{"w1", "w1", "w1"},
			want:   []string{"new", "late3", "on2"},
			class:  []string{ClassNowhere, ClassLate, ClassElsewhere},
			copied: 64,
		},
		{
			// Waiting for w3 is not brief, so w1 is as good as late3 will find soon: its
			// pass-overs there count, and after two it goes next.
			name:   "the skip bound holds for a request whose holder is late",
			reqs:   []string{"late3", "on1", "on1", "on1"},
			grant:  []string{"w1", "w1", "w1", "w1"},
			want:   []string{"on1", "on1", "late3", "on1"},
			class:  []string{ClassHere, ClassHere, ClassLate, ClassHere},
			copied: 32,
		},
		{
			name:   "work-conserving: with only requests cached elsewhere the worker takes the first",
			reqs:   []string{"on2", "on3"},
			grant:  []string{"w1", "w1"},
			want:   []string{"on2", "on3"},
			class:  []string{ClassElsewhere, ClassElsewhere},
			copied: 64,
		},
		{
			// new is suited to w1 as well as any worker: passed over twice for on1 there, it
			// goes next.
			name:  "the skip bound holds where the worker is as good as any",
			reqs:  []string{"new", "on1", "on1", "on1"},
			grant: []string{"w1", "w1", "w1", "w1"},
			want:  []string{"on1", "on1", "new", "on1"},
			class: []string{ClassHere, ClassHere, ClassNowhere, ClassHere},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := newTestQueue(t, Config{})
			names := map[*Ticket[string]]string{}
			for _, n := range tc.reqs {
				tk, err := q.Enqueue(Request[string]{Key: "k", Cost: 1, Score: score(n)})
				if err != nil {
					t.Fatal(err)
				}
				names[tk] = n
			}
			var got, class []string
			copied := 0
			for _, w := range tc.grant {
				tk, ok := q.Next(w)
				if !ok {
					break
				}
				got, class, copied = append(got, names[tk]), append(class, tk.Fit().Class()), copied+tk.Fit().Copied()
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("grant order (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.class, class); d != "" || copied != tc.copied {
				t.Errorf("grants' classes (-want +got):\n%s\ncopied %d blocks, want %d", d, copied, tc.copied)
			}
		})
	}
}

// TestRetryAfter: the estimate is (requests ahead + 1) × the average time between grants,
// counting only intervals a request waited through, and grows when grants stall.
func TestRetryAfter(t *testing.T) {
	q, clk := newTestQueue(t, Config{})
	if d := q.RetryAfter(0); d != 0 {
		t.Fatalf("no grants yet: got %v, want 0", d)
	}
	names := enqueue(t, q, []req{{"a", 0, "k", 1}, {"b", 0, "k", 1}, {"c", 0, "k", 1}, {"d", 5, "k", 1}}, nil)
	drain(t, q, names, "w", 1) // first grant: no interval yet
	clk.advance(100 * time.Millisecond)
	drain(t, q, names, "w", 1) // b waited through 100 ms
	// Waiting: c (band 0) and d (band 5). Band 0 waits behind c; band 5 behind c and d.
	if d := q.RetryAfter(0); d != 200*time.Millisecond {
		t.Errorf("band 0: got %v, want 200ms", d)
	}
	if d := q.RetryAfter(5); d != 300*time.Millisecond {
		t.Errorf("band 5: got %v, want 300ms", d)
	}
	// Grants stall: the time since the last grant bounds the gap from below.
	clk.advance(time.Second)
	if d := q.RetryAfter(0); d != 2*time.Second {
		t.Errorf("stalled: got %v, want 2s", d)
	}
	// An idle spell is not a drain time: e is granted after joining an empty queue.
	drain(t, q, names, "w", 2) // c after 1 s (averaged in: 100ms + (1s-100ms)/8), then d at once
	avg := 100*time.Millisecond + (900*time.Millisecond)/gapWeight
	avg += (0 - avg) / gapWeight
	clk.advance(10 * time.Second)
	e := enqueue(t, q, []req{{"e", 0, "k", 1}}, nil)
	drain(t, q, e, "w", 1)
	q.mu.Lock()
	gap := q.gap
	q.mu.Unlock()
	if gap != avg {
		t.Errorf("after an idle spell: gap %v, want %v (the idle 10 s not averaged in)", gap, avg)
	}
}

// TestFitClass: where a grant leaves the request's cached prefix, and what it prefills again.
func TestFitClass(t *testing.T) {
	tests := []struct {
		f      Fit
		class  string
		copied int
	}{
		{Fit{Matched: 8, Elsewhere: 4, OK: true}, ClassHere, 0},
		{Fit{Matched: 8, OK: true}, ClassHere, 0},
		{Fit{Matched: 8, Elsewhere: 8, OK: true}, ClassEqual, 0},
		{Fit{OK: true}, ClassNowhere, 0},
		{Fit{Matched: 2, Elsewhere: 8, Late: true, OK: true}, ClassLate, 6},
		{Fit{Elsewhere: 8, OK: true}, ClassElsewhere, 8},
		{Fit{Matched: 8, Elsewhere: 8, Late: true, OK: true}, ClassEqual, 0},
	}
	for _, tt := range tests {
		if c, n := tt.f.Class(), tt.f.Copied(); c != tt.class || n != tt.copied {
			t.Errorf("%+v: class %q, copied %d; want %q, %d", tt.f, c, n, tt.class, tt.copied)
		}
	}
}
