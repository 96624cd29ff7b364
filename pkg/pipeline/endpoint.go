package pipeline

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// Endpoint is one request kind of the pipeline.
type Endpoint struct {
	// Parse reads a request body into req (its Completion or Chat) and returns the model the
	// client named ("" for the default).
	Parse func(body []byte, lim openai.Limits, req *engine.Request) (string, *openai.Error)
	// Prompt fills c.req.Tokens (and what else the engines need of the rendered Prompt) with
	// the model's tokenizer or renderer, and returns the rendered Prompt text when there is
	// one (for /debug/route).
	Prompt func(pl *Pipeline, c *Call) (string, *openai.Error)
	// Write sends the worker's response to the client: started reports whether anything was
	// written; when false, the error was not written and the request may be retried.
	Write func(pl *Pipeline, ctx context.Context, w http.ResponseWriter, resp *engine.Response, dec *Decision, c *Call) (started bool, aerr *openai.Error)
	// Fail writes an error before anything else was written, in the API's error shape; nil:
	// openai.WriteError.
	Fail func(w http.ResponseWriter, e *openai.Error)
}

// writeError writes e in the endpoint's error shape.
func (ep *Endpoint) writeError(w http.ResponseWriter, e *openai.Error) {
	if ep.Fail != nil {
		ep.Fail(w, e)
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

// sendFailed handles a call that failed before anything was written: during a shutdown or
// after the client left it answers (or not) and returns false; otherwise it counts the
// worker's failure (marking it down after a transport error) and returns true, the error still
// to be written or retried.
func (pl *Pipeline) sendFailed(ctx context.Context, w http.ResponseWriter, ep *Endpoint, dec *Decision, err *openai.Error) bool {
	if shuttingDown(ctx) {
		ep.writeError(w, CtxError(ctx))
		return false
	}
	if ctx.Err() != nil {
		// The client left before anything was sent: not an error. 499 (nginx's "client
		// closed request") only labels the metric; nobody reads it.
		w.WriteHeader(statusClientClosed)
		return false
	}
	pl.met.upstream.WithLabelValues(dec.m.Worker().URL(), "before_first_byte").Inc()
	var te *engine.TransportError
	if errors.As(err, &te) {
		dec.m.MarkDown("request failed: " + te.Error())
	}
	return true
}

// send runs the call on the decision's worker. started reports whether anything was written to
// the client; when false, the returned error has not been written and the caller may retry.
// attempt counts from 0 (the retry is 1), for the trace.
func (pl *Pipeline) send(ctx context.Context, w http.ResponseWriter, dec *Decision, c *Call, ep *Endpoint, attempt int) (started bool, err *openai.Error) {
	if pl.cfg.UpstreamTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pl.cfg.UpstreamTimeout)
		defer cancel()
	}
	h := w.Header()
	h.Set(HeaderWorker, dec.m.Worker().URL())
	h.Set(HeaderMatchedBlocks, strconv.Itoa(dec.matched))
	h.Set(HeaderReason, string(dec.reason))
	c.recordSend(dec)
	ctx = pl.startUpstream(ctx, c, dec, attempt)
	resp, gerr := dec.m.Engine().Generate(ctx, &c.Req)
	if gerr != nil {
		err = engine.Classify(gerr)
		if ctx.Err() != nil {
			err = CtxError(ctx)
		}
		endUpstream(c, 0, err)
		return false, err
	}
	if c.up != nil {
		c.up.AddEvent("response")
	}
	started, err = ep.Write(pl, ctx, w, resp, dec, c)
	endUpstream(c, resp.Status, err)
	return started, err
}

// ObserveTTFT records the time to the first byte sent to the client.
func (pl *Pipeline) ObserveTTFT(c *Call) {
	ttft := time.Since(c.Arrival)
	pl.met.ttft.Observe(ttft.Seconds())
	if c.rec != nil {
		c.rec.TTFT = ttft
	}
	if c.up != nil {
		c.up.AddEvent("first_token")
	}
}
