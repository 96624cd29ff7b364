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

// call is one completion request in flight through the gateway.
type call struct {
	req     *openai.CompletionRequest
	model   string     // requested model (defaulted)
	tokens  [][]uint32 // per prompt; nil entries when a text prompt was not tokenized
	arrival time.Time
	header  http.Header // the client's request headers
}

// routeTokens returns the tokens the request is routed on: its first prompt's.
func (c *call) routeTokens() []uint32 { return c.tokens[0] }

func (rt *Router) handleCompletions(w http.ResponseWriter, r *http.Request) {
	c := &call{arrival: time.Now(), header: r.Header}
	body, release, aerr := openai.ReadBody(w, r, rt.cfg.MaxBodyBytes)
	defer release() // the parsed request refers into body until the handler returns
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	if c.req, aerr = openai.ParseCompletion(body, openai.Limits{MaxN: rt.cfg.MaxN}); aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	c.model = c.req.Model
	if c.model == "" {
		c.model = rt.defaultModel()
	}
	if !rt.knowsModel(c.model) {
		openai.WriteError(w, routeError(c.model, false, false))
		return
	}
	if c.tokens, aerr = rt.promptTokens(c.req); aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	s := rt.scratch.Get().(*routeScratch)
	defer rt.scratch.Put(s)
	var dec decision
	if aerr := rt.route(s, &dec, c.model, c.routeTokens(), nil); aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	// The request also ends when AbortInFlight is called (a shutdown past its drain deadline).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer context.AfterFunc(rt.aborted, func() { cancel(errShutdown) })()
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
			if rerr := rt.route(s, &dec, c.model, c.routeTokens(), dec.m); rerr == nil {
				continue
			}
		}
		openai.WriteError(w, err)
		return
	}
}

// promptTokens returns the token ids of every prompt: at most MaxPrompts of them, token-id
// prompts checked against the vocabulary, text prompts tokenized (when a tokenizer is
// configured), all checked against MaxPromptTokens.
func (rt *Router) promptTokens(req *openai.CompletionRequest) ([][]uint32, *openai.Error) {
	if len(req.Prompts) > rt.cfg.MaxPrompts {
		return nil, openai.BadRequest("prompt", fmt.Sprintf("at most %d prompts per request, got %d", rt.cfg.MaxPrompts, len(req.Prompts)))
	}
	out := make([][]uint32, len(req.Prompts))
	tk := rt.cfg.Tokenizer
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
		if rt.cfg.MaxPromptTokens > 0 && len(out[i]) > rt.cfg.MaxPromptTokens {
			return nil, &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Param: "prompt", Code: "context_length_exceeded",
				Message: fmt.Sprintf("prompt has %d tokens, more than the limit of %d", len(out[i]), rt.cfg.MaxPromptTokens)}
		}
		rt.met.tokensSeen.Add(float64(len(out[i])))
	}
	if tokTime > 0 {
		rt.met.tokenize.Observe(tokTime.Seconds())
	}
	return out, nil
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
	resp, gerr := dec.m.eng.Generate(ctx, &engine.Request{Completion: c.req, Model: c.model, Tokens: c.tokens,
		ForwardTokenIDs: rt.cfg.ForwardTokenIDs, Header: c.header})
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
