package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"go.uber.org/zap"
)

// Response headers naming the routing decision (DESIGN.md §5).
const (
	HeaderWorker        = "X-Kvgate-Worker"
	HeaderMatchedBlocks = "X-Kvgate-Matched-Blocks"
	HeaderReason        = "X-Kvgate-Route-Reason"
)

// statusClientClosed is recorded for requests whose client went away before an answer.
const statusClientClosed = 499

// call is one completion or chat request in flight through the gateway.
type call struct {
	// req is what the engines get (the parsed request, its tokens, the client's headers).
	req     engine.Request
	arrival time.Time
	// pool is the model's pool the request was admitted to (admitModel): its tokenizer and
	// chat renderer make the tokens route uses.
	pool *pool
}

// routeTokens returns the tokens the request is routed on: its first prompt's.
func (c *call) routeTokens() []uint32 { return c.req.Tokens[0] }

func (rt *Router) handleCompletions(w http.ResponseWriter, r *http.Request) {
	c := &call{arrival: time.Now(), req: engine.Request{Header: r.Header, ForwardTokenIDs: rt.cfg.ForwardTokenIDs}}
	body, release, aerr := openai.ReadBody(w, r, rt.cfg.MaxBodyBytes)
	defer release() // the parsed request refers into body until the handler returns
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if c.req.Completion, aerr = openai.ParseCompletion(body, openai.Limits{MaxN: rt.cfg.MaxN}); aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if !rt.admitModel(w, c, c.req.Completion.Model) {
		return
	}
	if c.req.Tokens, aerr = rt.promptTokens(c.pool, c.req.Completion); aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	rt.serve(w, r, c)
}

// admitModel defaults the requested model, finds its pool and answers 404 for a model the
// gateway does not serve (the message names only what the client asked for).
func (rt *Router) admitModel(w http.ResponseWriter, c *call, model string) bool {
	f := rt.fleet.Load()
	def := f.defaultModel(rt.cfg.Model)
	if model == "" {
		model = def
	}
	c.req.Model = model
	p, ns := f.resolve(model)
	if !f.knows(p, model, def, ns) {
		openai.WriteError(w, routeError(model, false, false))
		return false
	}
	c.pool = p
	return true
}

// serve routes a parsed call and sends it: route (taking the worker's load), record the
// decision, send, and on a failure before the first byte retry once on the next-best worker.
func (rt *Router) serve(w http.ResponseWriter, r *http.Request, c *call) {
	s := rt.scratch.Get().(*routeScratch)
	defer rt.scratch.Put(s)
	var dec decision
	if aerr := rt.route(s, &dec, c.req.Model, c.routeTokens(), nil); aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	// The request also ends when AbortInFlight is called (a shutdown past its drain deadline).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer context.AfterFunc(rt.aborted, func() { cancel(errShutdown) })()
	if rt.aborted.Err() != nil {
		// AfterFunc runs its function in a goroutine of its own, even when rt.aborted has
		// already ended: a request arriving after the abort must not race it to the worker.
		cancel(errShutdown)
	}
	for attempt := 0; ; attempt++ {
		rt.commit(&dec, c.routeTokens())
		started, err := rt.send(ctx, w, &dec, c)
		dec.pick.Done()
		if err == nil || started {
			return
		}
		if shuttingDown(ctx) {
			openai.WriteError(w, ctxError(ctx))
			return
		}
		if ctx.Err() != nil {
			// The client left before anything was sent: not an error. 499 (nginx's "client
			// closed request") only labels the metric; nobody reads it.
			w.WriteHeader(statusClientClosed)
			return
		}
		rt.met.upstream.WithLabelValues(dec.m.w.URL(), "before_first_byte").Inc()
		var te *engine.TransportError
		if errors.As(err, &te) && dec.m.w.SetHealth(false, "request failed: "+te.Error()) {
			rt.log.Warn("worker marked down after a failed request", zap.String("worker", dec.m.w.URL()), zap.Error(te))
			dec.m.forgetCache()
		}
		if attempt == 0 && retryable(err) {
			if rerr := rt.route(s, &dec, c.req.Model, c.routeTokens(), dec.m); rerr == nil {
				continue
			}
		}
		openai.WriteError(w, err)
		return
	}
}

// promptTokens returns the token ids of every prompt: at most MaxPrompts of them, token-id
// prompts checked against the vocabulary, text prompts tokenized (when pool p has a
// tokenizer), all checked against MaxPromptTokens.
func (rt *Router) promptTokens(p *pool, req *openai.CompletionRequest) ([][]uint32, *openai.Error) {
	if len(req.Prompts) > rt.cfg.MaxPrompts {
		return nil, openai.BadRequest("prompt", fmt.Sprintf("at most %d prompts per request, got %d", rt.cfg.MaxPrompts, len(req.Prompts)))
	}
	out := make([][]uint32, len(req.Prompts))
	tk := p.tok
	var tokTime time.Duration
	for i := range req.Prompts {
		p := &req.Prompts[i]
		switch {
		case p.IsTokens:
			if tk != nil {
				v := uint32(tk.VocabSize())
				for _, id := range p.Tokens {
					if id >= v {
						return nil, openai.BadRequest("prompt", fmt.Sprintf("token id %d is outside the vocabulary (size %d)", id, v))
					}
				}
			}
			out[i] = p.Tokens
		case tk != nil:
			t0 := time.Now()
			ids, err := tk.Encode(nil, p.Text, true)
			tokTime += time.Since(t0)
			if err != nil {
				return nil, openai.BadRequest("prompt", "prompt could not be tokenized: "+err.Error())
			}
			if len(ids) == 0 {
				return nil, openai.BadRequest("prompt", "prompt must not be empty")
			}
			out[i] = ids
		}
		if aerr := rt.checkPromptLen(len(out[i]), "prompt"); aerr != nil {
			return nil, aerr
		}
	}
	if tokTime > 0 {
		rt.met.tokenize.Observe(tokTime.Seconds())
	}
	return out, nil
}

// checkPromptLen enforces MaxPromptTokens (413) and counts the tokens routed.
func (rt *Router) checkPromptLen(n int, param string) *openai.Error {
	if rt.cfg.MaxPromptTokens > 0 && n > rt.cfg.MaxPromptTokens {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Param: param, Code: "context_length_exceeded",
			Message: fmt.Sprintf("prompt has %d tokens, more than the limit of %d", n, rt.cfg.MaxPromptTokens)}
	}
	rt.met.tokensSeen.Add(float64(n))
	return nil
}

// send runs the call on the decision's worker. started reports whether anything was written to
// the client; when false, the returned error has not been written and the caller may retry.
func (rt *Router) send(ctx context.Context, w http.ResponseWriter, dec *decision, c *call) (started bool, err *openai.Error) {
	if rt.cfg.UpstreamTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.cfg.UpstreamTimeout)
		defer cancel()
	}
	h := w.Header()
	h.Set(HeaderWorker, dec.m.w.URL())
	h.Set(HeaderMatchedBlocks, strconv.Itoa(dec.matched))
	h.Set(HeaderReason, string(dec.reason))
	resp, gerr := dec.m.eng.Generate(ctx, &c.req)
	if gerr != nil {
		if ctx.Err() != nil {
			return false, ctxError(ctx)
		}
		return false, engine.Classify(gerr)
	}
	return rt.relay(ctx, w, resp, dec, c)
}

// observeTTFT records the time to the first byte sent to the client.
func (rt *Router) observeTTFT(c *call) {
	rt.met.ttft.Observe(time.Since(c.arrival).Seconds())
}
