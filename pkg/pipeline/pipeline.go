package pipeline

import (
	"context"
	"net/http"

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

// Handle returns the HTTP handler that runs ep through the pipeline.
func (pl *Pipeline) Handle(ep *Endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := pl.NewCall(r)
		body, release, aerr := openai.ReadBody(w, r, pl.cfg.MaxBodyBytes)
		defer release() // the parsed request refers into body until the handler returns
		if aerr == nil {
			_, aerr = pl.Prepare(ep, body, c, true)
		}
		if aerr != nil {
			ep.writeError(w, aerr)
			return
		}
		pl.Serve(w, r, c, ep)
	}
}

// Prepare runs the steps before routing: parse, resolve the model's pool (a model the gateway
// does not serve is a 404 when known is required; the message names only what the client
// asked for) and make the prompt's token ids. It returns the rendered prompt, if any.
func (pl *Pipeline) Prepare(ep *Endpoint, body []byte, c *Call, requireKnown bool) (string, *openai.Error) {
	span := pl.stageSpan(c, spanParse)
	name, aerr := ep.Parse(body, openai.Limits{MaxN: pl.cfg.MaxN}, &c.Req)
	if aerr == nil && !pl.Resolve(c, name) && requireKnown {
		aerr = RouteError(c.Target.Model, false, false)
	}
	if span != nil {
		span.SetAttributes(attrModel.String(c.Req.Model))
	}
	endSpan(span, aerr)
	if aerr != nil {
		return "", aerr
	}
	span = pl.stageSpan(c, spanPrompt)
	prompt, aerr := ep.Prompt(pl, c)
	tracePrompt(span, c, aerr)
	if aerr == nil {
		c.recordPrompt()
	}
	return prompt, aerr
}

// Resolve points c at the pool of the model named ("" for the default) and reports whether the
// gateway serves that model.
func (pl *Pipeline) Resolve(c *Call, name string) (known bool) {
	t, known := pl.fleet.Snapshot().Resolve(name)
	c.Req.Model, c.Target, c.Served = t.Model, t, modelOf(t.Pool)
	return known
}

// Serve routes a prepared call and sends it: admit and route (taking the worker's load), record
// the decision, send, and on a failure before the first byte retry once on the next-best
// worker.
func (pl *Pipeline) Serve(w http.ResponseWriter, r *http.Request, c *Call, ep *Endpoint) {
	s := pl.takeScratch()
	defer pl.scratch.Put(s)
	dec := &s.dec // in the pooled scratch: passed to the endpoint's writer, a local would escape
	// The request also ends when AbortInFlight is called (a shutdown past its drain deadline).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer context.AfterFunc(pl.aborted, func() { cancel(errShutdown) })()
	if pl.aborted.Err() != nil {
		// AfterFunc runs its function in a goroutine of its own, even when pl.aborted has
		// already ended: a request arriving after the abort must not race it to the worker.
		cancel(errShutdown)
	}
	if aerr := pl.admit(ctx, w.Header(), r, s, dec, c); aerr != nil {
		if ctx.Err() != nil && !shuttingDown(ctx) {
			w.WriteHeader(statusClientClosed) // left while queued
			return
		}
		ep.writeError(w, aerr)
		return
	}
	pl.stripTransferFields(c)
	pl.priorityEdits(r, c)
	if s.disagg && pl.servePair(ctx, w, c, ep, s, dec) {
		return
	}
	for attempt := 0; ; attempt++ {
		dec.record(c.RouteTokens())
		started, err := pl.send(ctx, w, dec, c, ep, attempt)
		dec.pick.Done()
		pl.handOff(c.Served, dec.m)
		if err == nil || started || !pl.sendFailed(ctx, w, ep, dec, err) {
			return
		}
		if attempt == 0 && retryable(err) {
			if rerr := pl.route(s, dec, c, dec.m, legWhole); rerr == nil {
				continue
			}
		}
		ep.writeError(w, err)
		return
	}
}
