package endpoint

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// POST /v1/responses on the pipeline (DESIGN.md §13): the body is parsed
// (openai.ParseResponses) and expanded by the Responses state (conversation.Service.Begin:
// the stored chain or conversation it continues, in the client key's scope) into the chat
// request the turn runs as, which then takes the chat endpoint's parse and prompt: rendered
// and tokenized exactly, routed cache-aware on the whole history, sent to HTTP workers as
// /v1/chat/completions and to gRPC workers as Generate with the model's parsers. The writer
// converts the chat answer into the response object or the Responses events, stores the
// response (conversation.Service.Finish) before the client sees it complete, and keeps the
// started/not-started contract of relay: a failure before the worker's first piece is retried.

// responsesTurn is one POST /v1/responses in flight: its turn and its endpoint value (the
// chat endpoint's parse, the turn's prompt and writer).
type responsesTurn struct {
	t   *conversation.Turn
	svc *conversation.Service
	ep  *pipeline.Endpoint
}

// Responses serves POST /v1/responses.
func (a *API) Responses(w http.ResponseWriter, r *http.Request) {
	c := a.pl.NewCall(r)
	body, release, aerr := openai.ReadBody(w, r, a.pl.Config().MaxBodyBytes)
	defer release()
	var tn *responsesTurn
	if aerr == nil {
		tn, _, aerr = a.beginTurn(r.Context(), clientauth.KeyName(r.Context()), body, c, true)
	}
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	a.pl.Serve(w, r, c, tn.ep)
}

// beginTurn parses and expands a Responses body and prepares its chat request on c (the
// pipeline's prepare: parse, resolve, render), then waits for the store to confirm a chain
// expanded from a replica's copies (conversation.Turn.Confirm). It returns the rendered prompt.
func (a *API) beginTurn(ctx context.Context, scope string, body []byte, c *pipeline.Call, requireKnown bool) (*responsesTurn, string, *openai.Error) {
	req, aerr := openai.ParseResponses(body, openai.Limits{})
	if aerr != nil {
		return nil, "", aerr
	}
	t, aerr := a.responses.Begin(ctx, scope, req)
	if aerr != nil {
		return nil, "", aerr
	}
	tn := &responsesTurn{t: t, svc: a.responses}
	tn.ep = &pipeline.Endpoint{Parse: Chat.Parse, Prompt: tn.prompt, Write: tn.write}
	prompt, aerr := a.pl.Prepare(tn.ep, t.ChatBody(make([]byte, 0, len(body)+1024), 0), c, requireKnown)
	// The store's answer on the chain, awaited only now (it overlapped prepare), comes first:
	// a chain deleted meanwhile is the 404 it would have been before rendering.
	if cerr := t.Confirm(); cerr != nil {
		aerr = cerr
	}
	t.Model = c.Req.Model
	return tn, prompt, aerr
}

// prompt renders the turn's chat request as the chat endpoint does; with truncation "auto",
// a conversation over --max-prompt-tokens loses its oldest messages (after the instructions)
// until it fits, the fewest that do, found by bisection over re-renders.
func (tn *responsesTurn) prompt(pl *pipeline.Pipeline, c *pipeline.Call) (string, *openai.Error) {
	p, aerr := Chat.Prompt(pl, c)
	if aerr == nil || tn.t.Req.Truncation != "auto" || aerr.Code != "context_length_exceeded" {
		return p, aerr
	}
	fits := func(drop int) (string, *openai.Error) {
		cr, perr := openai.ParseChat(tn.t.ChatBody(nil, drop), openai.Limits{MaxN: pl.Config().MaxN})
		if perr != nil {
			return "", perr
		}
		c.Req.Chat = cr
		return Chat.Prompt(pl, c)
	}
	n := tn.t.Droppable()
	if p, aerr = fits(n); aerr != nil {
		return "", aerr // even the last message alone is too long
	}
	lo, hi := 1, n // hi fits
	for lo < hi {
		mid := (lo + hi) / 2
		if _, err := fits(mid); err == nil {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if hi != n {
		p, aerr = fits(hi)
	}
	return p, aerr
}

// countTokens returns a counter of text tokens with the model's tokenizer (nil without one).
func countTokens(c *pipeline.Call) func(string) int {
	tok := c.Served.Tok
	if tok == nil {
		return nil
	}
	return func(s string) int {
		ids, err := tok.Encode(nil, s, false)
		if err != nil {
			return 0
		}
		return len(ids)
	}
}

// write converts the worker's chat answer (the endpoint's writer, same contract as relay).
func (tn *responsesTurn) write(pl *pipeline.Pipeline, ctx context.Context, w http.ResponseWriter, resp *engine.Response, dec *pipeline.Decision, c *pipeline.Call) (bool, *openai.Error) {
	defer resp.Body.Close()
	piece, err, aerr := pipeline.FirstPiece(ctx, resp, dec)
	if aerr != nil {
		return false, aerr
	}
	switch {
	case resp.Status != http.StatusOK:
		// The engine's own answer to the request (a 4xx an HTTP engine passes through).
		return passThrough(pl, ctx, w, resp, piece, err, dec, c)
	case resp.SSE:
		tn.stream(pl, ctx, w, resp, piece, err, dec, c)
		return true, nil
	}
	return tn.whole(pl, ctx, w, resp, piece, err, c)
}

// passThrough relays an engine's non-200 answer as it is.
func passThrough(pl *pipeline.Pipeline, ctx context.Context, w http.ResponseWriter, resp *engine.Response, piece []byte, err error, dec *pipeline.Decision, c *pipeline.Call) (bool, *openai.Error) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	pl.ObserveTTFT(c)
	w.WriteHeader(resp.Status)
	pl.CopyBody(ctx, resp, piece, err, func(p []byte) error { _, werr := w.Write(p); return werr }, func(*openai.Error) { panic(http.ErrAbortHandler) }, dec)
	return true, nil
}

// whole answers a non-streaming turn: the worker's chat.completion, read whole, becomes the
// response object, stored before it is sent. Nothing is written before the body is complete,
// so a worker failing mid-body is retried like one failing before its first byte.
func (tn *responsesTurn) whole(pl *pipeline.Pipeline, ctx context.Context, w http.ResponseWriter, resp *engine.Response, piece []byte, err error, c *pipeline.Call) (bool, *openai.Error) {
	body := append([]byte(nil), piece...)
	for err == nil {
		piece, err = resp.Body.Next()
		body = append(body, piece...)
	}
	if !errors.Is(err, io.EOF) {
		if ctx.Err() != nil {
			return false, pipeline.CtxError(ctx)
		}
		return false, engine.Classify(err)
	}
	res, aerr := tn.t.FromCompletion(body, countTokens(c))
	if aerr == nil {
		body, aerr = tn.svc.Finish(ctx, tn.t, res)
	}
	if aerr != nil {
		openai.WriteError(w, aerr)
		return true, nil
	}
	pl.ObserveTTFT(c)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
	return true, nil
}

// stream answers a streaming turn: each piece of the worker's chunk stream becomes the
// Responses events it implies, written and flushed at once; at the end the response is stored
// and the terminal event carries it. A failure after the first event is one error event.
func (tn *responsesTurn) stream(pl *pipeline.Pipeline, ctx context.Context, w http.ResponseWriter, resp *engine.Response, piece []byte, err error, dec *pipeline.Decision, c *pipeline.Call) {
	st := tn.t.NewStream()
	sse := openai.NewSSE(w)
	pl.ObserveTTFT(c)
	sse.Start(http.StatusOK)
	buf := st.Begin(make([]byte, 0, 4096))
	for {
		var aerr *openai.Error
		if buf, aerr = st.Feed(buf, piece); aerr != nil {
			_ = sse.Write(st.Error(buf, aerr))
			return
		}
		if len(buf) > 0 && sse.Write(buf) != nil {
			return // the client went away
		}
		buf = buf[:0]
		if err != nil {
			break
		}
		piece, err = resp.Body.Next()
	}
	if !errors.Is(err, io.EOF) {
		if ae := pl.MidStreamFailure(ctx, err, dec); ae != nil {
			_ = sse.Write(st.Error(buf, ae))
		}
		return
	}
	buf, res := st.End(buf, countTokens(c))
	out, aerr := tn.svc.Finish(ctx, tn.t, res)
	if aerr != nil {
		_ = sse.Write(st.Error(buf, aerr))
		return
	}
	_ = sse.Write(st.Terminal(buf, res.Status, out))
}

// ExplainTurn expands a Responses body for /debug/route as POST /v1/responses would, in the
// client key scope's: its chain read, its chat request prepared on c (parsed, resolved,
// rendered; a model the gateway does not serve is not an error). It returns the turn and the
// rendered prompt; nothing is stored.
func (a *API) ExplainTurn(ctx context.Context, scope string, body []byte, c *pipeline.Call) (*conversation.Turn, string, *openai.Error) {
	tn, prompt, aerr := a.beginTurn(ctx, scope, body, c, false)
	if aerr != nil {
		return nil, "", aerr
	}
	return tn.t, prompt, nil
}
