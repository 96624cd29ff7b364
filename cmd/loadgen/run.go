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
	total   int           // request slots
	// chat: the conversations' ids as the engine computes them (nil: no template, no ideal)
	// and the tokenizer that turns an answer back into ids.
	chatIDs *chatIDs
	tok     codec
	// responses: the ids of an agent conversation (nil: no template, no ideal).
	agentIDs *agentIDs

	// outcomes[i] is written once by the goroutine that ran slot i, before wg.Done.
	outcomes []outcome
	sent     []bool // slot i was sent (chat sessions stop at a failed turn)
	done     atomic.Int64
	errs     atomic.Int64

	// Chat's ideal accounting, computed from the prompts actually sent.
	idealHit, idealTotal atomic.Int64
	// firstMu guards firstIDs: the ids of the first first turn sent, which later sessions'
	// first turns share up to their user message.
	firstMu  sync.Mutex
	firstIDs []uint32
}

func newRunner(c *completer, p *plan, scale float64, concurrency int, timeout time.Duration) *runner {
	total := len(p.requests)
	for _, s := range p.sessions {
		total += len(s.users)
	}
	r := &runner{c: c, plan: p, scale: scale, timeout: timeout, total: total,
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
			body, err := newCompletionBody(r.c.model, q.prompt(), q.maxTokens)
			if err != nil {
				r.record(q.id, outcome{err: "encode: " + err.Error()})
				return
			}
			r.record(q.id, r.send(ctx, start, body, q.tokens))
		})
	}
	for _, s := range r.plan.sessions {
		if !sleepUntil(ctx, start.Add(r.real(s.at))) {
			break
		}
		switch {
		case r.plan.agent:
			wg.Go(func() { r.runAgentSession(ctx, start, s) })
		case r.plan.messages:
			wg.Go(func() { r.runMessagesSession(ctx, start, s) })
		default:
			wg.Go(func() { r.runSession(ctx, start, s) })
		}
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

// send sends one request body; tokens is the prompt length to report when the server's usage
// does not.
func (r *runner) send(ctx context.Context, start time.Time, body []byte, tokens int) outcome {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	o := r.c.do(ctx, start, body)
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
// and the next question: each turn sends the system prompt, every earlier user message and
// the answer actually streamed for it, and the new user message. A failed turn ends the
// session (its later turns are not sent).
//
// The ideal accounting (an infinite cache) works on the ids the engine computes: each turn
// is rendered with the chat template (chatIDs); a turn hits the previous turn's ids followed
// by its answer's tokenization (what the engine held after generating it, when its output ids
// are the answer text's tokens), and a session's first turn hits what it shares with the first
// first turn sent (the system prompt and the template around it).
func (r *runner) runSession(ctx context.Context, start time.Time, s *session) {
	var msgs []chatMessage
	if r.plan.systemTokens > 0 {
		msgs = append(msgs, chatMessage{Role: "system", Content: r.plan.system.text})
	}
	var prevCtx []uint32
	for k, user := range s.users {
		slot := s.first + k
		if k > 0 && r.plan.thinkTime > 0 && !sleepUntil(ctx, time.Now().Add(r.real(r.plan.thinkTime))) {
			return
		}
		var content any = user
		if k == 0 && s.image != "" {
			content = imageUserContent(user, s.image, s.uuid)
		}
		msgs = append(msgs, chatMessage{Role: "user", Content: content})
		body, err := newChatBody(r.c.model, msgs, r.plan.outputTokens)
		var ids []uint32
		if err == nil && r.chatIDs != nil {
			ids, err = r.chatIDs.ids(body)
		}
		if err != nil {
			r.sent[slot] = true
			r.record(slot, outcome{err: "render: " + err.Error()})
			return
		}
		if !r.acquire(ctx) {
			return
		}
		r.sent[slot] = true
		if r.chatIDs != nil {
			hit := r.idealHitOf(k, ids, prevCtx)
			if k == 0 && s.image != "" {
				// Another session's first turn holds another picture: no hit from it on.
				hit = min(hit, firstMediaToken(ids, r.chatIDs.r.MediaTokens()))
			}
			r.idealHit.Add(int64(hit))
			r.idealTotal.Add(int64(len(ids)))
		}
		o := r.send(ctx, start, body, len(ids))
		r.release()
		r.record(slot, o)
		if !o.ok {
			return
		}
		msgs = append(msgs, chatMessage{Role: "assistant", Content: o.text})
		if r.chatIDs != nil {
			answer, err := r.tok.encode(o.text)
			if err != nil {
				return
			}
			prevCtx = append(ids, answer...)
		}
	}
}

// idealHitOf is the ideal cache hit of turn k with ids: the previous turn's context for a
// later turn, what it shares with the first first turn for a first turn.
func (r *runner) idealHitOf(k int, ids, prevCtx []uint32) int {
	if k > 0 {
		return commonPrefix(ids, prevCtx)
	}
	r.firstMu.Lock()
	defer r.firstMu.Unlock()
	if r.firstIDs == nil {
		r.firstIDs = ids
		return 0
	}
	return commonPrefix(ids, r.firstIDs)
}
