package admission

import (
	"math"
	"time"
)

// Next grants the best waiting request that may use worker w, which has a free slot: the
// oldest of those past the age bound if any, else, in the highest band with a request that
// fits w, the one of its first LookAhead (in fair order) that loses least by running on w
// (Fit.better): one cached here beyond what its best other worker holds (Fit.Matched −
// Fit.Elsewhere, in blocks), else one cached nowhere (someone must prefill it), else one whose
// holder is not expected to free a slot soon (Fit.Late), and only then one whose holder is:
// granting that one copies its prefix onto w while its own worker frees a slot soon. Ties go
// to the longest prefix on w, then fair order; unless a request ahead in fair order that w
// suits as well as it will find soon has been passed over MaxSkips times already: then that
// one. Next never leaves the slot idle while a request fits w: a copy costs one prefill of the
// prefix, an idle slot waits for the next hand-off. The ticket leaves the queue and its Wait
// returns w. It reports false when no waiting request fits w. Score callbacks run without the
// queue's lock.
func (q *Queue[W]) Next(w W) (*Ticket[W], bool) {
	var buf [MaxLookAhead]*Ticket[W]
	var skips [MaxLookAhead]int
	minPrio, skipAged := math.MinInt, q.cfg.MaxWait == 0
	// Each round either grants, moves past a band (or the aged set) that has nothing for w,
	// or finds that its choice left meanwhile; the bound only guards against endless churn.
	for range 64 {
		q.mu.Lock()
		if q.closed || q.oldest.n == 0 {
			q.mu.Unlock()
			return nil, false
		}
		cands, aged := q.candidatesLocked(buf[:0], minPrio, skipAged)
		for i, t := range cands {
			skips[i] = t.skips
		}
		q.mu.Unlock()
		if len(cands) == 0 {
			if aged {
				skipAged = true
				continue
			}
			return nil, false
		}
		best, fit, well := q.choose(cands, skips[:len(cands)], w, aged)
		if best < 0 {
			if aged {
				skipAged = true
			} else {
				minPrio = cands[0].req.Priority + 1
			}
			continue
		}
		if q.grant(cands, well, best, fit, w) {
			return cands[best], true
		}
	}
	return nil, false
}

// candidatesLocked appends the requests Next chooses among: those past the age bound, oldest
// first (aged), unless skipAged; else the first LookAhead of the highest band of priority ≥
// minPrio.
func (q *Queue[W]) candidatesLocked(dst []*Ticket[W], minPrio int, skipAged bool) (_ []*Ticket[W], aged bool) {
	if !skipAged {
		now := q.cfg.Now()
		for t := q.oldest.head; t != nil && len(dst) < q.cfg.LookAhead && now.Sub(t.enq) >= q.cfg.MaxWait; t = t.next {
			dst = append(dst, t)
		}
		return dst, true
	}
	for _, b := range q.bands {
		if b.prio >= minPrio {
			return b.firstN(dst, q.cfg.LookAhead), false
		}
	}
	return dst, false
}

// choose scores cands against w and returns the index of the one to grant (-1: none fits), its
// Fit, and which of them w suits as well as they will find soon (Fit.near; a bit per index): in age
// order the first that fits (aged); else the first in fair order already passed over MaxSkips
// times that w suits so, else the best by Fit.better, the earliest on ties.
func (q *Queue[W]) choose(cands []*Ticket[W], skips []int, w W, aged bool) (best int, bf Fit, well uint64) {
	best = -1
	for i, t := range cands {
		f := Fit{OK: true}
		if t.req.Score != nil {
			f = t.req.Score(w)
		}
		if !f.OK {
			continue
		}
		near := f.near()
		if near {
			well |= 1 << i
		}
		// The skip bound holds only where w is as good as the request will find soon: one
		// cached elsewhere waits for its own worker rather than be copied here.
		if aged || skips[i] >= q.cfg.MaxSkips && near {
			return i, f, well
		}
		if best < 0 || f.better(bf) {
			best, bf = i, f
		}
	}
	return best, bf, well
}

// grant gives w to cands[best] if it is still waiting, and counts a skip for each request
// ahead of it that w suited as well as it will find soon (well): only a pass-over on such a
// worker delays a request; otherwise it was waiting for its own worker anyway.
func (q *Queue[W]) grant(cands []*Ticket[W], well uint64, best int, fit Fit, w W) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := cands[best]
	if t.state != stateWaiting {
		return false
	}
	for i, p := range cands[:best] {
		if well&(1<<i) != 0 && p.state == stateWaiting {
			p.skips++
		}
	}
	q.removeLocked(t, true)
	q.noteGrantLocked(t)
	t.state, t.worker, t.fit = stateGranted, w, fit
	close(t.ready)
	return true
}

// BandStats describes one priority band's waiting requests.
type BandStats struct {
	Priority int `json:"priority"`
	Waiting  int `json:"waiting"`
	// Keys is the number of client keys with a request waiting.
	Keys int `json:"keys"`
	// OldestWait is how long the band's oldest request has waited.
	OldestWait time.Duration `json:"oldest_wait_ns"`
}

// Stats describes the queue, for /debug and metrics.
type Stats struct {
	Waiting int         `json:"waiting"`
	Bands   []BandStats `json:"bands"`
}

// Stats returns the queue's bands and counts. It is O(waiting requests): for debugging, not the
// request path.
func (q *Queue[W]) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Now()
	s := Stats{Waiting: q.oldest.n, Bands: make([]BandStats, 0, len(q.bands))}
	for _, b := range q.bands {
		bs := BandStats{Priority: b.prio, Waiting: b.len()}
		for _, ks := range b.keys {
			if ks.waiting > 0 {
				bs.Keys++
			}
		}
		for _, t := range b.heap {
			bs.OldestWait = max(bs.OldestWait, now.Sub(t.enq))
		}
		s.Bands = append(s.Bands, bs)
	}
	return s
}

// Ahead returns how many waiting requests a new request of priority p would wait behind at
// least: those of its band and the higher ones (fairness may serve it before some of its own
// band).
func (q *Queue[W]) Ahead(p int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, b := range q.bands {
		if b.prio > p {
			break
		}
		n += b.len()
	}
	return n
}

// gapWeight is the weight of the newest interval in the moving average of the time between
// grants: about the last 8 grants count.
const gapWeight = 8

// noteGrantLocked updates the drain estimate at the grant of t. An interval that spans an idle
// spell (nothing waiting) is not a drain time, so the average takes an interval only when t
// waited through all of it (it had joined by the previous grant).
func (q *Queue[W]) noteGrantLocked(t *Ticket[W]) {
	now := q.cfg.Now()
	if !q.lastGrant.IsZero() && !t.enq.After(q.lastGrant) {
		d := now.Sub(q.lastGrant)
		if q.gap == 0 {
			q.gap = d
		} else {
			q.gap += (d - q.gap) / gapWeight
		}
	}
	q.lastGrant = now
}

// RetryAfter estimates when a request of priority p refused now would find the queue moving
// past what is ahead of it: the requests it would wait behind (Ahead) plus itself, times the
// average time between grants, or the time since the last grant when that is longer (grants
// have stalled). 0 when the queue has not yet seen grants to estimate from. Clients told this
// spread their retries over the drain instead of all coming back within a second to a queue
// that is still full.
func (q *Queue[W]) RetryAfter(p int) time.Duration {
	ahead := q.Ahead(p)
	q.mu.Lock()
	defer q.mu.Unlock()
	gap := q.gap
	if !q.lastGrant.IsZero() && q.oldest.n > 0 {
		gap = max(gap, q.cfg.Now().Sub(q.lastGrant))
	}
	return time.Duration(ahead+1) * gap
}
