package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of Enqueue and Wait, checked with errors.Is.
var (
	// ErrFull: the queue holds Config.MaxLen requests already.
	ErrFull = errors.New("admission: queue full")
	// ErrTimeout: the request waited its whole timeout without a slot.
	ErrTimeout = errors.New("admission: timed out waiting for a worker")
	// ErrClosed: the queue was closed (the model was removed or the gateway shuts down).
	ErrClosed = errors.New("admission: queue closed")
)

// Defaults of Config fields left zero.
const (
	DefaultMaxLen = 1024
	// DefaultLookAhead: a request cached elsewhere is copied onto a freed worker only when the
	// whole look-ahead is; with 3 workers that is 4% of hand-offs at 8, 10⁻⁶ at 32, and 32
	// scores cost a few microseconds per hand-off (docs/operations.md §4b).
	DefaultLookAhead = 32
	DefaultMaxSkips  = 2
	// MaxLookAhead bounds LookAhead: Next scores that many requests per freed slot.
	MaxLookAhead = 64
)

// Config configures a Queue. The zero value is usable: DefaultMaxLen waiting requests,
// DefaultLookAhead, no age bound, the real clock.
type Config struct {
	// MaxLen is the most requests waiting at once; Enqueue past it fails with ErrFull.
	MaxLen int
	// MaxWait is the age bound: a request that has waited this long is granted the next slot
	// it can use before any request that arrived after it, whatever their bands (0: none).
	MaxWait time.Duration
	// LookAhead is how many requests of the best band Next scores for the freed worker (1:
	// plain fair order, no cache awareness). At most MaxLookAhead.
	LookAhead int
	// MaxSkips bounds how often a request may be passed over for a later one's cached prefix
	// (default DefaultMaxSkips): without it a key whose prompts share a prefix would keep
	// overtaking another key's, and the cache would undo the fairness.
	MaxSkips int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// NewTimer starts a timer for Wait's timeout (nil: time.NewTimer); stop reports whether it
	// stopped the timer before it fired, as time.Timer.Stop does.
	NewTimer func(d time.Duration) (c <-chan time.Time, stop func() bool)
}

// Request is what a waiting request tells the queue about itself.
type Request[W any] struct {
	// Priority is the band: lower is served first (vLLM's meaning).
	Priority int
	// Key is the client key the request is fair across ("" is a key like any other).
	Key string
	// Cost is the request's charge in its key's virtual time, its prompt tokens (< 1: 1).
	Cost int64
	// Score reports how well worker w suits the request (Fit). Next calls it without the
	// queue's lock, possibly from several goroutines at once; it must be safe for that and must
	// not call the queue. nil: every worker fits, with no cached prefix anywhere.
	Score func(w W) Fit
}

// Fit is how well a freed worker suits a waiting request, as Request.Score reports it. The
// zero value is a worker that may not serve the request.
type Fit struct {
	// Matched is how many leading blocks of the request the worker holds.
	Matched int
	// Elsewhere is the most leading blocks of the request any other worker that may serve it
	// holds (0: none, or not known). A request with Elsewhere > Matched is better served by
	// another worker's next free slot: Next grants it here only when nothing waiting suits this
	// worker as well (see Next).
	Elsewhere int
	// Late reports that no worker holding the Elsewhere blocks is expected to free a slot for
	// the request soon (each is full for a reason its own requests ending does not clear, such
	// as its engine's own queue). Waiting for it would not be brief, so such a request ranks
	// after those cached nowhere but before those whose holder frees a slot soon, and its
	// pass-overs count toward the skip bound.
	Late bool
	// OK reports whether the worker may serve the request at all.
	OK bool
}

// gain is what granting the request to this worker saves over granting it to its best other
// worker: > 0 only here, 0 as well here as anywhere (or cached nowhere), < 0 better elsewhere.
func (f Fit) gain() int { return f.Matched - f.Elsewhere }

// near reports whether the worker is as good a place for the request as it will find soon:
// cached here at least as well as anywhere, or its better worker will not free a slot soon.
func (f Fit) near() bool { return f.gain() >= 0 || f.Late }

// better reports whether f ranks before g for the same freed worker: near before not near
// (a request whose own worker frees a slot soon waits for it), then the most blocks cached
// here beyond elsewhere, then the longest prefix here.
func (f Fit) better(g Fit) bool {
	if f.near() != g.near() {
		return f.near()
	}
	if f.gain() != g.gain() {
		return f.gain() > g.gain()
	}
	return f.Matched > g.Matched
}

// Where a grant left the request's cached prefix (Fit.Class), for metrics.
const (
	// ClassHere: the worker holds more of it than any other.
	ClassHere = "here"
	// ClassEqual: the worker holds as much of it as the best other, and some.
	ClassEqual = "equal"
	// ClassNowhere: no worker holds any of it (or nothing was scored).
	ClassNowhere = "nowhere"
	// ClassLate: another worker holds more, but none of those frees a slot soon (Fit.Late).
	ClassLate = "late"
	// ClassElsewhere: another worker holds more and frees a slot soon; this grant makes the
	// worker prefill the difference again (Fit.Copied).
	ClassElsewhere = "elsewhere"
)

// Class names where f leaves the request's cached prefix: one of the Class constants.
func (f Fit) Class() string {
	switch g := f.gain(); {
	case g > 0:
		return ClassHere
	case g == 0 && f.Matched > 0:
		return ClassEqual
	case g == 0:
		return ClassNowhere
	case f.Late:
		return ClassLate
	}
	return ClassElsewhere
}

// Copied is how many leading blocks another worker holds that running the request on this
// one computes again (Elsewhere − Matched, at least 0).
func (f Fit) Copied() int { return max(0, -f.gain()) }

// Queue is one pool's admission queue, for workers of type W. Safe for concurrent use.
//
// A Queue must not be copied.
type Queue[W any] struct {
	cfg Config
	// n mirrors the number of waiting requests, for lock-free Len on the request path.
	n atomic.Int64

	// mu guards everything below. Score callbacks are never called with it held.
	mu     sync.Mutex
	bands  []*band[W] // non-empty bands, by priority ascending
	oldest ageList[W] // every waiting ticket, by arrival
	seq    uint64
	closed bool
	// lastGrant and gap estimate how fast the queue drains: the time of the last grant and a
	// moving average of the time between grants (RetryAfter).
	lastGrant time.Time
	gap       time.Duration
}

// New validates cfg and returns an empty queue.
func New[W any](cfg Config) (*Queue[W], error) {
	if cfg.MaxLen < 0 || cfg.MaxWait < 0 || cfg.LookAhead < 0 || cfg.LookAhead > MaxLookAhead || cfg.MaxSkips < 0 {
		return nil, fmt.Errorf("admission: new: max length, max wait, look-ahead and max skips must not be negative, look-ahead at most %d", MaxLookAhead)
	}
	if cfg.MaxSkips == 0 {
		cfg.MaxSkips = DefaultMaxSkips
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = DefaultMaxLen
	}
	if cfg.LookAhead == 0 {
		cfg.LookAhead = DefaultLookAhead
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewTimer == nil {
		cfg.NewTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	return &Queue[W]{cfg: cfg}, nil
}

// Len returns the number of waiting requests. It takes no lock.
func (q *Queue[W]) Len() int { return int(q.n.Load()) }

// Enqueue adds a request and returns its ticket, which the caller waits on with Wait. It fails
// with ErrFull at Config.MaxLen waiting requests and ErrClosed after Close.
func (q *Queue[W]) Enqueue(r Request[W]) (*Ticket[W], error) {
	r.Cost = max(r.Cost, 1)
	t := &Ticket[W]{req: r, ready: make(chan struct{}), idx: -1}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	if q.oldest.n >= q.cfg.MaxLen {
		return nil, ErrFull
	}
	q.seq++
	t.seq, t.enq = q.seq, q.cfg.Now()
	q.bandLocked(r.Priority).push(t)
	q.oldest.pushBack(t)
	q.n.Add(1)
	return t, nil
}

// bandLocked returns the band of priority p, creating it in order.
func (q *Queue[W]) bandLocked(p int) *band[W] {
	i, found := slices.BinarySearchFunc(q.bands, p, func(b *band[W], p int) int { return b.prio - p })
	if !found {
		q.bands = slices.Insert(q.bands, i, newBand[W](p))
	}
	return q.bands[i]
}

// removeLocked takes a waiting ticket out of its band and the age list, dropping an emptied
// band.
func (q *Queue[W]) removeLocked(t *Ticket[W], served bool) {
	b := t.band
	b.remove(t, served)
	q.oldest.remove(t)
	q.n.Add(-1)
	if b.len() == 0 {
		q.bands = slices.DeleteFunc(q.bands, func(x *band[W]) bool { return x == b })
	}
}

// Cancel takes t out of the queue. It reports false when t was granted (or failed) before: the
// caller then owns what the grant gave it (see Wait).
func (q *Queue[W]) Cancel(t *Ticket[W]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.state != stateWaiting {
		return false
	}
	q.removeLocked(t, false)
	t.state = stateCancelled
	return true
}

// Wait blocks until t is granted a worker, ctx ends, or timeout passes (0: no timeout). On a
// grant it returns the worker. Otherwise it returns ctx's error, ErrTimeout or ErrClosed, and t
// has left the queue; when a grant raced the cancellation (t.Granted() is then true), the
// caller owns the worker's slot all the same and must give it back.
func (q *Queue[W]) Wait(ctx context.Context, t *Ticket[W], timeout time.Duration) (W, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		c, stop := q.cfg.NewTimer(timeout)
		defer stop()
		expired = c
	}
	var err error
	select {
	case <-t.ready:
		if t.err != nil {
			var zero W
			return zero, t.err
		}
		return t.worker, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = ErrTimeout
	}
	if !q.Cancel(t) && t.err != nil {
		err = t.err
	}
	return t.worker, err
}

// Close fails every waiting request with ErrClosed and refuses new ones.
func (q *Queue[W]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for t := q.oldest.head; t != nil; t = q.oldest.head {
		q.removeLocked(t, false)
		t.state, t.err = stateFailed, ErrClosed
		close(t.ready)
	}
}
