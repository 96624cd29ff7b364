package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// runner executes a plan against the target and collects one outcome per request slot.
type runner struct {
	c       *completer
	plan    *plan
	scale   float64       // --time-scale F: wall = simulated × F (the simulator's convention)
	sem     chan struct{} // --concurrency cap; nil when unbounded
	timeout time.Duration // per request, real time; 0 for none
	tb      *textBuilder  // chat in text mode (to count tokens); nil in token-id mode
	total   int           // request slots

	// outcomes[i] is written once by the goroutine that ran slot i, before wg.Done.
	outcomes []outcome
	sent     []bool // slot i was sent (chat sessions stop at a failed turn)
	done     atomic.Int64
	errs     atomic.Int64

	// Chat's ideal accounting, computed from the prompts actually sent.
	idealHit, idealTotal atomic.Int64
	firstSent            atomic.Bool
}

func newRunner(c *completer, p *plan, scale float64, concurrency int, timeout time.Duration, tb *textBuilder) *runner {
	total := len(p.requests)
	for _, s := range p.sessions {
		total += len(s.users)
	}
	r := &runner{c: c, plan: p, scale: scale, timeout: timeout, tb: tb, total: total,
		outcomes: make([]outcome, total), sent: make([]bool, total)}
	if concurrency > 0 {
		r.sem = make(chan struct{}, concurrency)
	}
	return r
}

// real converts a simulated-time offset into the compressed wall-clock offset (× F).
func (r *runner) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) * r.scale)
}

// sleepUntil waits until start+offset (real time); false when ctx ended first.
func sleepUntil(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (r *runner) acquire(ctx context.Context) bool {
	if r.sem == nil {
		return ctx.Err() == nil
	}
	select {
	case r.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *runner) release() {
	if r.sem != nil {
		<-r.sem
	}
}

// run sends the whole plan and returns the real wall time from start to the last completion.
// Cancelling ctx stops dispatch and cancels in-flight requests; run still waits for them.
func (r *runner) run(ctx context.Context) (start time.Time, elapsed time.Duration) {
	start = time.Now()
	var wg sync.WaitGroup
	for _, q := range r.plan.requests {
		if !sleepUntil(ctx, start.Add(r.real(q.at))) || !r.acquire(ctx) {
			break
		}
		r.sent[q.id] = true
		wg.Go(func() {
			defer r.release()
			r.record(q.id, r.send(ctx, start, q.prompt(), q.tokens, q.maxTokens))
		})
	}
	for _, s := range r.plan.sessions {
		if !sleepUntil(ctx, start.Add(r.real(s.at))) {
			break
		}
		wg.Go(func() { r.runSession(ctx, start, s) })
	}
	wg.Wait()
	for i := range r.outcomes {
		if r.sent[i] {
			elapsed = max(elapsed, r.outcomes[i].end)
		}
	}
	return start, elapsed
}

func (q *request) prompt() any {
	if q.ids != nil {
		return q.ids
	}
	return q.text
}

func (r *runner) send(ctx context.Context, start time.Time, prompt any, tokens, maxTokens int) outcome {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	o := r.c.do(ctx, start, prompt, maxTokens)
	if o.promptTokens == 0 {
		o.promptTokens = tokens
	}
	return o
}

func (r *runner) record(slot int, o outcome) {
	r.outcomes[slot] = o
	r.done.Add(1)
	if !o.ok {
		r.errs.Add(1)
	}
}

// runSession plays one chat conversation turn by turn, waiting --think-time between an answer
// and the next question. A failed turn ends the session (its later turns are not sent).
func (r *runner) runSession(ctx context.Context, start time.Time, s *session) {
	history := r.plan.system
	var prevCtx []uint32
	for k, user := range s.users {
		if k > 0 && r.plan.thinkTime > 0 && !sleepUntil(ctx, time.Now().Add(r.real(r.plan.thinkTime))) {
			return
		}
		prompt := concat(history, user)
		var ids []uint32
		if r.tb != nil {
			var err error
			if ids, err = r.tb.tok.encode(prompt.text); err != nil {
				r.sent[s.first+k] = true
				r.record(s.first+k, outcome{err: "encode: " + err.Error()})
				return
			}
		} else {
			ids = prompt.ids
		}
		hit := 0
		if k == 0 {
			if r.firstSent.Swap(true) {
				hit = r.plan.systemTokens
			}
		} else {
			hit = commonPrefix(ids, prevCtx)
		}
		if !r.acquire(ctx) {
			return
		}
		r.sent[s.first+k] = true
		r.idealHit.Add(int64(hit))
		r.idealTotal.Add(int64(len(ids)))
		var p any = prompt.text
		if r.tb == nil {
			p = prompt.ids
		}
		o := r.send(ctx, start, p, len(ids), r.plan.outputTokens)
		r.release()
		r.record(s.first+k, o)
		if !o.ok {
			return
		}
		var reply piece
		if r.tb != nil {
			reply = piece{text: o.text}
			full, err := r.tb.tok.encode(prompt.text + o.text)
			if err != nil {
				return
			}
			prevCtx = full
		} else {
			reply = s.replies[k]
			prevCtx = prompt.ids // the engine's answer ids are unknown; only the prompt can hit
		}
		history = concat(prompt, reply)
	}
}
