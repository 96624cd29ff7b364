package router

import (
	"context"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// The one request pipeline (DESIGN.md §13). Every endpoint that generates is an endpoint value
// of endpoint.go's shape, and handle runs it:
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
