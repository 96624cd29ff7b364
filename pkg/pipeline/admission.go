package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/pkg/admission"
	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// The admission stage of the pipeline (DESIGN.md §16): with a queue configured, a request that
// finds every eligible worker of its pool at --max-inflight-per-worker waits in the pool's
// queue (pkg/admission) instead of the immediate 429, and so does any request arriving while
// others wait, so nobody overtakes the queue. A slot is handed over when a request ends on a
// worker (handOff, from serve), when a request joins the queue, and every kickInterval (a
// worker that came up or joined), each time to the request the queue chooses for that worker:
// the best band, fair across client keys, within the look-ahead the request that loses least
// by running there (cached there, else nowhere, else on a worker not freeing a slot soon). The hand-off reserves the slot (an empty worker.Hold) before it asks the queue,
// so a request arriving meanwhile cannot take it; the woken request takes its own load on the
// worker and drops the reservation.
//
// Two bounds beyond the in-flight one make a worker full for some requests (engineBound):
// its engine's own queue (QueueConfig.MaxWaitingPerWorker, engineFull) for every request, and
// the reserved slots (QueueConfig.Reserve) for requests of a band > 0. A request waits at most
// --queue-timeout, or the shorter timeout its SDK announces (queueTimeout).

// HeaderPriority carries a request's admission band (vLLM's meaning: lower runs first).
// With client keys it is bounded by the key's grant; without, taken as sent.
const HeaderPriority = "X-Kvgate-Priority"

// kickInterval is how often pools with waiting requests are offered the free slots that no
// ending request handed over (a worker that became healthy or joined the pool).
const kickInterval = 100 * time.Millisecond

// newQueue returns a pool's queue for cfg (nil: no queue).
func newQueue(cfg Config) (*admission.Queue[*fleet.Member], error) {
	if cfg.Queue.Max == 0 || cfg.MaxInFlightPerWorker == 0 {
		return nil, nil
	}
	return admission.New[*fleet.Member](admission.Config{MaxLen: cfg.Queue.Max, MaxWait: cfg.Queue.MaxWait, LookAhead: cfg.Queue.LookAhead, Now: cfg.Now})
}

// requestPriority returns the band of c's request r: x-kvgate-priority, else the body's vLLM
// priority field (held to ±clientauth.MaxPriority: any integer is a valid vLLM priority), each
// bounded by the client key's grant, else the key's default (0 without keys). A malformed
// header is a 400.
func requestPriority(r *http.Request, c *Call) (int, *openai.Error) {
	g, keyed := clientauth.KeyGrant(r.Context())
	v := r.Header.Get(HeaderPriority)
	var p int
	switch bp := c.bodyPriority(); {
	case v != "":
		var err error
		p, err = strconv.Atoi(strings.TrimSpace(v))
		if err != nil || p < -clientauth.MaxPriority || p > clientauth.MaxPriority {
			return 0, openai.BadRequest("x-kvgate-priority", fmt.Sprintf("x-kvgate-priority must be an integer in [-%d, %d]", clientauth.MaxPriority, clientauth.MaxPriority))
		}
	case bp != nil:
		p = int(min(max(*bp, -clientauth.MaxPriority), clientauth.MaxPriority))
	default:
		return g.Priority, nil
	}
	if keyed {
		p = max(p, g.BestPriority)
	}
	return p, nil
}

// priorityEdits settles the body's own priority field for the engines: stripped unless
// Config.ForwardPriority (a vLLM not running priority scheduling refuses a request with a
// non-zero priority), and when forwarded held to the client key's grant, so that a key gets
// no engine priority above the band it may ask for.
func (pl *Pipeline) priorityEdits(r *http.Request, c *Call) {
	bp := c.bodyPriority()
	if bp == nil {
		if c.bodyHas("priority") && !pl.cfg.ForwardPriority {
			c.Req.Edits = append(c.Req.Edits, openai.Edit{Key: "priority"}) // an explicit null
		}
		return
	}
	if !pl.cfg.ForwardPriority {
		c.Req.Edits = append(c.Req.Edits, openai.Edit{Key: "priority"})
		return
	}
	if g, keyed := clientauth.KeyGrant(r.Context()); keyed && *bp < int64(g.BestPriority) {
		c.Req.Edits = append(c.Req.Edits, openai.Edit{Key: "priority", Value: strconv.AppendInt(nil, int64(g.BestPriority), 10)})
	}
}

// admit routes c (route), through its pool's queue when one is configured and the pool is
// full or has requests waiting. On success dec holds the worker's load, as route leaves it.
func (pl *Pipeline) admit(ctx context.Context, h http.Header, r *http.Request, s *routeScratch, dec *Decision, c *Call) *openai.Error {
	q := c.Served.queue
	prio := 0
	if q != nil {
		var aerr *openai.Error
		if prio, aerr = requestPriority(r, c); aerr != nil {
			return aerr
		}
		c.lowBand = pl.cfg.Queue.Reserve > 0 && prio > 0
	}
	if q == nil || q.Len() == 0 {
		aerr := pl.route(s, dec, c, nil, legWhole)
		if aerr == nil || q == nil || !s.sel.Full {
			return aerr
		}
	} else {
		pl.fleet.Snapshot().Select(&s.sel, c.Target, nil, pl.cfg.MaxInFlightPerWorker, false)
		pl.engineBound(&s.sel, c)
		s.disagg = s.sel.Disagg
		if len(s.sel.Candidates) == 0 && !s.sel.Full {
			return RouteError(c.Target.Model, s.sel.Known, false)
		}
	}
	m, aerr := pl.wait(ctx, h, q, c, prio, clientauth.KeyName(r.Context()), queueTimeout(r.Header, pl.cfg.Queue.Timeout))
	if aerr != nil {
		return aerr
	}
	s.sel.Only(m)
	pl.pick(s, dec, c, false, time.Now(), pl.legPolicy(c, legWhole, s.disagg))
	m.Worker().Release(worker.Hold{}) // the hand-off's reservation, now the request's own load
	return nil
}

// wait queues c for at most timeout and returns the worker a hand-off gave it, holding the
// hand-off's reservation.
func (pl *Pipeline) wait(ctx context.Context, h http.Header, q *admission.Queue[*fleet.Member], c *Call, prio int, key string, timeout time.Duration) (*fleet.Member, *openai.Error) {
	label := poolLabel(c.Target.Pool)
	band := strconv.Itoa(prio)
	t, err := q.Enqueue(admission.Request[*fleet.Member]{Priority: prio, Key: key, Cost: int64(len(c.RouteTokens())), Score: pl.scorer(c)})
	if err != nil {
		pl.met.queued.WithLabelValues(label, band, "full").Inc()
		pl.traceQueue(c, prio, "full", time.Now())
		return nil, queueError(ctx, h, q, prio, err, c.Target.Model, pl.cfg.Queue.Max, timeout)
	}
	depth := pl.met.queueDepth.WithLabelValues(label, band)
	depth.Inc()
	pl.kick(c.Served, c.Target.Pool) // slots that freed before the request joined the queue
	m, err := q.Wait(ctx, t, timeout)
	depth.Dec()
	pl.met.queueWait.WithLabelValues(label, band).Observe(time.Since(t.Enqueued()).Seconds())
	if err != nil {
		if t.Granted() {
			// A grant raced the cancellation: give the slot to the next request.
			m.Worker().Release(worker.Hold{})
			pl.handOff(c.Served, m)
		}
		outcome := queueOutcome(ctx, err)
		pl.met.queued.WithLabelValues(label, band, outcome).Inc()
		pl.traceQueue(c, prio, outcome, t.Enqueued())
		return nil, queueError(ctx, h, q, prio, err, c.Target.Model, pl.cfg.Queue.Max, timeout)
	}
	pl.met.queued.WithLabelValues(label, band, "admitted").Inc()
	pl.traceQueue(c, prio, "admitted", t.Enqueued())
	return m, nil
}

// scorer returns the queue's Score for c: whether a worker may serve it (its pool, model and
// adapter), the leading blocks of c's prompt the worker holds, as route scores them, and the
// most any other healthy worker of the pool that may serve it holds (admission.Fit.Elsewhere:
// a freed worker then prefers a request cached nowhere to one whose prefix another worker
// holds, which would copy that prefix here), and whether those holders are all late
// (allLate). It takes its own scratch: hand-offs on several workers may score c at once.
//
// Each hand-off scores up to --queue-look-ahead requests, so a score must not cost the
// fleet's size: it scores the freed worker beside c's probes (indexer.Lookup.Probes, taken
// once here over the workers that may serve c), which finds every worker holding any of c's
// prompt, then scores those holders alone from the matches already found
// (indexer.Lookup.Rescore). Elsewhere is their best, as if every worker had
// been scored: the rest hold nothing. A worker that learns another block size, or falls back
// to the tree, while c waits is found only when it is the freed worker itself.
func (pl *Pipeline) scorer(c *Call) func(*fleet.Member) admission.Fit {
	tokens, t, low, media := c.RouteTokens(), c.Target, c.lowBand, c.mediaKeys
	serves := func(m *fleet.Member) bool {
		return m.Pool() == t.Pool && m.Serves(t) && m.Worker().Role().Decodes() // a role=prefill worker never takes a request whole
	}
	var probes []indexer.LookupWorker
	if len(tokens) > 0 {
		var ws []indexer.LookupWorker
		for _, m := range pl.fleet.Snapshot().Members() {
			if serves(m) {
				ws = append(ws, m.LookupWorker())
			}
		}
		probes = t.Pool.Lookup().Probes(ws, nil)
	}
	return func(m *fleet.Member) admission.Fit {
		if !serves(m) {
			return admission.Fit{}
		}
		// The hand-off's reservation is counted in InFlight: without it, is the worker
		// under a batch request's bound?
		if low && m.Worker().InFlight()-1 >= int64(pl.cfg.MaxInFlightPerWorker-pl.cfg.Queue.Reserve) {
			return admission.Fit{}
		}
		if len(tokens) == 0 {
			return admission.Fit{OK: true}
		}
		s := pl.takeScratch()
		defer pl.scratch.Put(s)
		l := t.Pool.Lookup()
		s.workers = append(append(s.workers[:0], m.LookupWorker()), probes...)
		s.lookup.Media = media
		s.scores = l.Score(&s.lookup, tokens, t.Namespace, s.workers, s.scores, false)
		f := admission.Fit{Matched: s.scores[0].Matched, OK: true}
		s.ids = s.lookup.Holders(s.ids[:0])
		snap, others := pl.fleet.Snapshot(), s.members[:0]
		s.workers = s.workers[:0]
		for _, id := range s.ids {
			// A worker with several DP ranks holding blocks comes once per rank: the
			// best and allLate do not mind.
			if o := snap.ByID(id); o != nil && o != m && serves(o) && o.Worker().Healthy() && o.DrainingSince().IsZero() {
				s.workers = append(s.workers, o.LookupWorker())
				others = append(others, o)
			}
		}
		s.members = others
		if len(others) == 0 {
			return f
		}
		s.scores = l.Rescore(&s.lookup, s.workers, s.scores)
		for _, sc := range s.scores {
			f.Elsewhere = max(f.Elsewhere, sc.Matched)
		}
		if f.Elsewhere > f.Matched {
			f.Late = pl.allLate(others, s.scores, f.Elsewhere)
		}
		return f
	}
}

// allLate reports whether every one of others whose score holds best blocks is not expected to
// free a slot soon (admission.Fit.Late): its engine's own queue is at
// QueueConfig.MaxWaitingPerWorker (engineFull), so no hand-off offers its slots until a
// scrape shows the engine drained, however many of this replica's requests end there. A
// worker merely at its in-flight bound is not late: each request of ours that ends there hands
// its slot over at once.
func (pl *Pipeline) allLate(others []*fleet.Member, scores []indexer.Score, best int) bool {
	now := pl.now()
	for i, sc := range scores {
		if sc.Matched == best {
			if w := others[i].Worker(); !pl.engineFull(w, w.InFlight(), now) {
				return false
			}
		}
	}
	return true
}

// handOff offers a free slot of m, if it has one, to md's queue, and reports whether a waiting
// request took it. The slot is reserved first (Acquire, then the bound checked), so two
// hand-offs racing for the last slot cannot both grant it.
func (pl *Pipeline) handOff(md *Served, m *fleet.Member) bool {
	q := md.queue
	if q == nil || q.Len() == 0 {
		return false
	}
	w := m.Worker()
	if !w.Healthy() || !m.DrainingSince().IsZero() {
		return false
	}
	w.Acquire(worker.Hold{})
	if n := w.InFlight(); n > int64(pl.cfg.MaxInFlightPerWorker) || pl.engineFull(w, n-1, pl.now()) {
		w.Release(worker.Hold{})
		return false
	}
	t, ok := q.Next(m)
	if !ok {
		w.Release(worker.Hold{})
		return false
	}
	f, label := t.Fit(), poolLabel(m.Pool())
	pl.met.handOffs.WithLabelValues(label, f.Class()).Inc()
	if n := f.Copied(); n > 0 {
		pl.met.copied.WithLabelValues(label).Add(float64(n))
	}
	return true
}

// engineFull reports whether w counts as full for its engine's own queue
// (QueueConfig.MaxWaitingPerWorker) with inflight requests of this gateway on it: the last
// engine-load sample, if fresh, shows at least the bound waiting, and inflight ≥ 1.
//
// Why the engine's queue: other gateway replicas and direct clients load the same engine, so
// this gateway's in-flight count can be under its bound while the engine already queues;
// sending more then only moves the wait from the gateway's queue (ordered by band, fair, cache
// aware) into the engine's (FCFS). Why only with a request of ours in flight: the queue's
// wake-ups come from this gateway's requests ending and from the kick loop; with none in
// flight on w a stale or wrong sample could hold w for ever, so w always takes at least one,
// and each gateway adds at most one request to an engine already queueing. When a later scrape
// shows the engine drained, the kick loop hands the slot over within kickInterval: no release
// of ours has to come.
func (pl *Pipeline) engineFull(w *worker.Worker, inflight int64, now time.Time) bool {
	bound := pl.cfg.Queue.MaxWaitingPerWorker
	if bound == 0 || inflight < 1 {
		return false
	}
	n, ok := w.EngineWaiting(now, pl.loadMaxAge)
	return ok && n >= int64(bound)
}

// engineBound moves the candidates of sel that are full for c by the bounds beyond
// MaxInFlightPerWorker (engineFull; a batch request's reserve, QueueConfig.Reserve) to its
// rejected ones, setting sel.Full as the in-flight bound does, so that a request finding every
// worker full either way waits in the queue.
func (pl *Pipeline) engineBound(sel *fleet.Selection, c *Call) {
	if pl.cfg.Queue.MaxWaitingPerWorker == 0 && !c.lowBand {
		return
	}
	now, low := pl.now(), int64(pl.cfg.MaxInFlightPerWorker-pl.cfg.Queue.Reserve)
	if sel.Drop(func(m *fleet.Member) bool {
		w := m.Worker()
		return pl.engineFull(w, w.InFlight(), now) || c.lowBand && w.InFlight() >= low
	}, true) > 0 {
		sel.Full = true
	}
}

// kick offers every free slot of pool p's workers to md's queue.
func (pl *Pipeline) kick(md *Served, p *fleet.Pool) {
	for _, m := range pl.fleet.Snapshot().Members() {
		if m.Pool() != p {
			continue
		}
		for i := 0; i < pl.cfg.MaxInFlightPerWorker && pl.handOff(md, m); i++ {
		}
	}
}

// kickLoop kicks every pool with waiting requests each kickInterval until ctx ends.
func (pl *Pipeline) kickLoop(ctx context.Context) {
	tick := time.NewTicker(kickInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range pl.fleet.Snapshot().Pools() {
			if md := modelOf(p); md.queue != nil && md.queue.Len() > 0 {
				pl.kick(md, p)
			}
		}
	}
}

// queueOutcome labels why a queued request was not admitted.
func queueOutcome(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, admission.ErrFull):
		return "full"
	case errors.Is(err, admission.ErrTimeout):
		return "timeout"
	case errors.Is(err, admission.ErrClosed):
		return "closed"
	case shuttingDown(ctx):
		return "shutdown"
	}
	return "cancelled"
}

// Bounds of the Retry-After a queue refusal suggests: at least a second (the header's unit),
// at most maxRetryAfter, past which the OpenAI SDKs ignore the header and back off on their
// own (they honour up to 60 s); a drain estimate that long says the fleet is far over capacity
// and a retry later than that helps nobody.
const maxRetryAfter = 30 * time.Second

// queueError is the client's answer for a request of band prio the queue did not admit, with
// Retry-After (seconds) and retry-after-ms for the refusals a client should retry: when the
// queue expects to have served what would be ahead of the request (admission.Queue.RetryAfter),
// so that refused clients come back spread over the drain, not all within a second to a queue
// still full; a reconfigured model's retry goes to the new pool at once.
func queueError(ctx context.Context, h http.Header, q *admission.Queue[*fleet.Member], prio int, err error, model string, maxLen int, timeout time.Duration) *openai.Error {
	retry := func() {
		d := time.Second
		if !errors.Is(err, admission.ErrClosed) {
			d = min(max(q.RetryAfter(prio), time.Second), maxRetryAfter)
		}
		clientauth.SetRetryAfter(h, d)
	}
	switch {
	case errors.Is(err, admission.ErrFull):
		retry()
		return &openai.Error{Status: http.StatusTooManyRequests, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded",
			Message: fmt.Sprintf("every worker of the model %q is at its in-flight limit and its queue is full (%d waiting)", model, maxLen)}
	case errors.Is(err, admission.ErrTimeout):
		retry()
		return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "queue_timeout",
			Message: fmt.Sprintf("no worker of the model %q took the request within the queue timeout (%s)", model, timeout)}
	case errors.Is(err, admission.ErrClosed):
		retry()
		return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "model_reconfigured",
			Message: fmt.Sprintf("the model %q was reconfigured while the request waited", model)}
	}
	return CtxError(ctx)
}

// Headers the OpenAI SDKs send with the client's own timeout, in seconds: the Node SDK's
// X-Stainless-Timeout (the whole request's timeout, truncated to whole seconds; absent
// without one) and the Python SDK's X-Stainless-Read-Timeout (httpx's read timeout, a decimal:
// while the request waits in the queue the gateway sends no byte, so the read timeout is what
// expires first on the client).
const (
	headerClientTimeout     = "X-Stainless-Timeout"
	headerClientReadTimeout = "X-Stainless-Read-Timeout"
)

// queueTimeout returns a request's queue deadline: the smaller of limit (--queue-timeout) and
// the timeout the client's SDK says it will wait (headerClientTimeout,
// headerClientReadTimeout). Waiting past the client's own timeout only answers a client that
// has already given up, and holds a queue place meanwhile. A value that is not a positive
// finite number of seconds is ignored: "0" is what the Node SDK sends for a sub-second
// timeout.
func queueTimeout(h http.Header, limit time.Duration) time.Duration {
	d := limit
	for _, name := range [...]string{headerClientTimeout, headerClientReadTimeout} {
		v := h.Get(name)
		if v == "" {
			continue
		}
		sec, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(sec > 0) || sec*float64(time.Second) >= float64(d) {
			continue // malformed, ≤ 0, NaN, or no shorter (+Inf too)
		}
		// At least 1 ms: a zero timeout would mean none to the queue.
		d = max(time.Duration(sec*float64(time.Second)), time.Millisecond)
	}
	return d
}

// poolLabel names a pool in metrics: its model, "default" for an unnamed default pool.
func poolLabel(p *fleet.Pool) string {
	if n := p.Name(); n != "" {
		return n
	}
	return "default"
}
