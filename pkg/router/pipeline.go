package router

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// The one request pipeline (DESIGN.md §13). Every endpoint that generates is an endpoint value
// of this file's shape, and handle runs it:
//
//	read body → ep.parse → resolve the model's pool (fleet.Snapshot.Resolve) → ep.prompt
//	(tokenize or render into token ids) → admit (admission.go: the pool's queue while every
//	worker is at its bound) → route (route.go: candidates, lookup, policy) → record the
//	decision → the worker's engine.Generate → ep.write → on a failure before the first byte,
//	route again once, away from that worker; each ending request hands its slot to the queue.
//
// Adding an endpoint is a parser (pkg/openai, or a sibling for another API's format), an
// endpoint value whose parse and prompt adapt its request to an engine.Request, and its
// writer; docs/architecture.md walks through it.

// endpoint is one request kind of the pipeline.
type endpoint struct {
	// parse reads a request body into req (its Completion or Chat) and returns the model the
	// client named ("" for the default).
	parse func(body []byte, lim openai.Limits, req *engine.Request) (string, *openai.Error)
	// prompt fills c.req.Tokens (and what else the engines need of the rendered prompt) with
	// the model's tokenizer or renderer, and returns the rendered prompt text when there is
	// one (for /debug/route).
	prompt func(rt *Router, c *call) (string, *openai.Error)
	// write sends the worker's response to the client: started reports whether anything was
	// written; when false, the error was not written and the request may be retried.
	write func(rt *Router, ctx context.Context, w http.ResponseWriter, resp *engine.Response, dec *decision, c *call) (started bool, aerr *openai.Error)
	// fail writes an error before anything else was written, in the API's error shape; nil:
	// openai.WriteError.
	fail func(w http.ResponseWriter, e *openai.Error)
}

// writeError writes e in the endpoint's error shape.
func (ep *endpoint) writeError(w http.ResponseWriter, e *openai.Error) {
	if ep.fail != nil {
		ep.fail(w, e)
		return
	}
	openai.WriteError(w, e)
}

// Response headers naming the routing decision (DESIGN.md §5).
const (
	HeaderWorker        = "X-Kvgate-Worker"
	HeaderMatchedBlocks = "X-Kvgate-Matched-Blocks"
	HeaderReason        = "X-Kvgate-Route-Reason"
)

// statusClientClosed is recorded for requests whose client went away before an answer.
const statusClientClosed = 499

// handle returns the HTTP handler that runs ep through the pipeline.
func (rt *Router) handle(ep *endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := &call{arrival: time.Now(), req: engine.Request{Header: r.Header}}
		rt.startTrace(r, c)
		body, release, aerr := openai.ReadBody(w, r, rt.cfg.MaxBodyBytes)
		defer release() // the parsed request refers into body until the handler returns
		if aerr == nil {
			_, aerr = rt.prepare(ep, body, c, true)
		}
		if aerr != nil {
			ep.writeError(w, aerr)
			return
		}
		rt.serve(w, r, c, ep)
	}
}

// prepare runs the steps before routing: parse, resolve the model's pool (a model the gateway
// does not serve is a 404 when known is required; the message names only what the client
// asked for) and make the prompt's token ids. It returns the rendered prompt, if any.
func (rt *Router) prepare(ep *endpoint, body []byte, c *call, requireKnown bool) (string, *openai.Error) {
	span := rt.stageSpan(c, spanParse)
	name, aerr := ep.parse(body, openai.Limits{MaxN: rt.cfg.MaxN}, &c.req)
	if aerr == nil && !rt.resolve(c, name) && requireKnown {
		aerr = routeError(c.target.Model, false, false)
	}
	if span != nil {
		span.SetAttributes(attrModel.String(c.req.Model))
	}
	endSpan(span, aerr)
	if aerr != nil {
		return "", aerr
	}
	span = rt.stageSpan(c, spanPrompt)
	prompt, aerr := ep.prompt(rt, c)
	tracePrompt(span, c, aerr)
	return prompt, aerr
}

// resolve points c at the pool of the model named ("" for the default) and reports whether the
// gateway serves that model.
func (rt *Router) resolve(c *call, name string) (known bool) {
	t, known := rt.fleet.Snapshot().Resolve(name)
	c.req.Model, c.target, c.model = t.Model, t, modelOf(t.Pool)
	return known
}

// serve routes a prepared call and sends it: admit and route (taking the worker's load), record
// the decision, send, and on a failure before the first byte retry once on the next-best
// worker.
func (rt *Router) serve(w http.ResponseWriter, r *http.Request, c *call, ep *endpoint) {
	s := rt.takeScratch()
	defer rt.scratch.Put(s)
	dec := &s.dec // in the pooled scratch: passed to the endpoint's writer, a local would escape
	// The request also ends when AbortInFlight is called (a shutdown past its drain deadline).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer context.AfterFunc(rt.aborted, func() { cancel(errShutdown) })()
	if rt.aborted.Err() != nil {
		// AfterFunc runs its function in a goroutine of its own, even when rt.aborted has
		// already ended: a request arriving after the abort must not race it to the worker.
		cancel(errShutdown)
	}
	if aerr := rt.admit(ctx, w.Header(), r, s, dec, c); aerr != nil {
		if ctx.Err() != nil && !shuttingDown(ctx) {
			w.WriteHeader(statusClientClosed) // left while queued
			return
		}
		ep.writeError(w, aerr)
		return
	}
	rt.stripTransferFields(c)
	if s.disagg && rt.servePair(ctx, w, c, ep, s, dec) {
		return
	}
	for attempt := 0; ; attempt++ {
		dec.record(c.routeTokens())
		started, err := rt.send(ctx, w, dec, c, ep, attempt)
		dec.pick.Done()
		rt.handOff(c.model, dec.m)
		if err == nil || started || !rt.sendFailed(ctx, w, ep, dec, err) {
			return
		}
		if attempt == 0 && retryable(err) {
			if rerr := rt.route(s, dec, c, dec.m, legWhole); rerr == nil {
				continue
			}
		}
		ep.writeError(w, err)
		return
	}
}

// sendFailed handles a call that failed before anything was written: during a shutdown or
// after the client left it answers (or not) and returns false; otherwise it counts the
// worker's failure (marking it down after a transport error) and returns true, the error still
// to be written or retried.
func (rt *Router) sendFailed(ctx context.Context, w http.ResponseWriter, ep *endpoint, dec *decision, err *openai.Error) bool {
	if shuttingDown(ctx) {
		ep.writeError(w, ctxError(ctx))
		return false
	}
	if ctx.Err() != nil {
		// The client left before anything was sent: not an error. 499 (nginx's "client
		// closed request") only labels the metric; nobody reads it.
		w.WriteHeader(statusClientClosed)
		return false
	}
	rt.met.upstream.WithLabelValues(dec.m.Worker().URL(), "before_first_byte").Inc()
	var te *engine.TransportError
	if errors.As(err, &te) {
		dec.m.MarkDown("request failed: " + te.Error())
	}
	return true
}

// send runs the call on the decision's worker. started reports whether anything was written to
// the client; when false, the returned error has not been written and the caller may retry.
// attempt counts from 0 (the retry is 1), for the trace.
func (rt *Router) send(ctx context.Context, w http.ResponseWriter, dec *decision, c *call, ep *endpoint, attempt int) (started bool, err *openai.Error) {
	if rt.cfg.UpstreamTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.cfg.UpstreamTimeout)
		defer cancel()
	}
	h := w.Header()
	h.Set(HeaderWorker, dec.m.Worker().URL())
	h.Set(HeaderMatchedBlocks, strconv.Itoa(dec.matched))
	h.Set(HeaderReason, string(dec.reason))
	ctx = rt.startUpstream(ctx, c, dec, attempt)
	resp, gerr := dec.m.Engine().Generate(ctx, &c.req)
	if gerr != nil {
		err = engine.Classify(gerr)
		if ctx.Err() != nil {
			err = ctxError(ctx)
		}
		endUpstream(c, 0, err)
		return false, err
	}
	if c.up != nil {
		c.up.AddEvent("response")
	}
	started, err = ep.write(rt, ctx, w, resp, dec, c)
	endUpstream(c, resp.Status, err)
	return started, err
}

// observeTTFT records the time to the first byte sent to the client.
func (rt *Router) observeTTFT(c *call) {
	rt.met.ttft.Observe(time.Since(c.arrival).Seconds())
	if c.up != nil {
		c.up.AddEvent("first_token")
	}
}
