package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/anthropic"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// POST /v1/messages (Anthropic's Messages API) on the pipeline: the body is parsed and
// converted into the chat request vLLM's Anthropic serving runs it as (anthropic.Parse; its
// inline system messages kept in place or folded as the model's template needs,
// inline_system.go; disabled thinking as the reasoning_effort the template takes for it,
// thinking_effort.go), which then takes the chat endpoint's parse and prompt: rendered and tokenized exactly, routed
// cache-aware on those ids, sent to HTTP workers as /v1/chat/completions and to gRPC workers
// as Generate with the model's parsers. The writer converts the chat answer into the message
// or the Messages events (anthropic.Output) and keeps relay's started/not-started contract: a
// failure before the worker's first piece is retried. Every error is in Anthropic's shape.
// POST /v1/messages/count_tokens is answered by the gateway from the same render.

// messagesTurn is one POST /v1/messages in flight: the converted request, its output
// conversion and its endpoint value.
type messagesTurn struct {
	req *anthropic.Request
	out anthropic.Output
	ep  *pipeline.Endpoint
}

// newMessages returns the turn of one request, its endpoint parsing the Messages body.
func newMessages() *messagesTurn {
	tn := &messagesTurn{}
	tn.ep = &pipeline.Endpoint{Parse: tn.parse, Prompt: tn.prompt, Write: tn.write, Fail: anthropic.WriteError}
	return tn
}

// parse converts the Messages body and parses its chat request as the chat endpoint does.
func (tn *messagesTurn) parse(body []byte, lim openai.Limits, req *engine.Request) (string, *openai.Error) {
	ar, aerr := anthropic.Parse(body, false)
	if aerr != nil {
		return "", aerr
	}
	tn.req = ar
	tn.out.StopSequences = ar.StopSequences
	return Chat.Parse(ar.ChatBody(), lim, req)
}

// prompt renders the chat request as the chat endpoint does. A prompt over
// --max-prompt-tokens is Anthropic's 400 "prompt is too long: N tokens > M maximum", the
// words agents (Claude Code) look for to compact their history.
func (tn *messagesTurn) prompt(pl *pipeline.Pipeline, c *pipeline.Call) (string, *openai.Error) {
	if aerr := placeMessages(c, tn.req, openai.Limits{MaxN: pl.Config().MaxN}, pl.Config().Logger); aerr != nil {
		return "", aerr
	}
	p, aerr := Chat.Prompt(pl, c)
	if aerr != nil && aerr.Code == "context_length_exceeded" && len(c.Req.Tokens) == 0 {
		aerr = promptTooLong(pl, c)
	}
	tn.out.Model = c.Req.Model
	if len(c.Req.Tokens) == 1 {
		tn.out.PromptTokens = len(c.Req.Tokens[0])
	}
	return p, aerr
}

// placeInlineSystem gives c the chat request with ar's inline system messages folded when ar
// has some to fold and c's model folds them (inline_system.go); else c keeps the one parse
// gave it, with them in place.
func placeInlineSystem(c *pipeline.Call, ar *anthropic.Request, lim openai.Limits, log *zap.Logger) *openai.Error {
	folded := ar.FoldedChatBody()
	if folded == nil || !inlineModes.foldInline(c, log) {
		return nil
	}
	cr, aerr := openai.ParseChat(folded, lim)
	if aerr != nil {
		return aerr
	}
	c.Req.Chat = cr
	return nil
}

// promptTooLong is Anthropic's answer to a prompt over --max-prompt-tokens.
func promptTooLong(pl *pipeline.Pipeline, c *pipeline.Call) *openai.Error {
	res, _ := c.Served.Chat.Render(c.Req.Chat)
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "context_length_exceeded",
		Message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", len(res.TokenIDs), pl.Config().MaxPromptTokens)}
}

// Messages serves POST /v1/messages.
func (a *API) Messages(w http.ResponseWriter, r *http.Request) {
	a.pl.Handle(newMessages().ep)(w, r)
}

// CountTokens serves POST /v1/messages/count_tokens: {"input_tokens": N}, N the token
// ids of the prompt the request renders to, as routing computes them; no worker is called.
func (a *API) CountTokens(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := openai.ReadBody(w, r, a.pl.Config().MaxBodyBytes)
	defer release()
	if aerr != nil {
		anthropic.WriteError(w, aerr)
		return
	}
	n, aerr := a.countMessageTokens(body)
	if aerr != nil {
		anthropic.WriteError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(strconv.AppendInt([]byte(`{"input_tokens":`), int64(n), 10))
	_, _ = w.Write([]byte("}\n"))
}

// countMessageTokens renders a count_tokens body with its model's renderer.
func (a *API) countMessageTokens(body []byte) (int, *openai.Error) {
	ar, aerr := anthropic.Parse(body, true)
	if aerr != nil {
		return 0, aerr
	}
	c := &pipeline.Call{Arrival: time.Now()}
	name, aerr := Chat.Parse(ar.ChatBody(), openai.Limits{MaxN: a.pl.Config().MaxN}, &c.Req)
	if aerr != nil {
		return 0, aerr
	}
	if !a.pl.Resolve(c, name) {
		return 0, pipeline.RouteError(c.Target.Model, false, false)
	}
	if c.Served.Chat == nil {
		return 0, &openai.Error{Status: http.StatusNotImplemented, Type: openai.TypeServer, Code: "no_renderer",
			Message: "count_tokens needs the model's chat template and tokenizer; the gateway has none for " + c.Target.Model}
	}
	if aerr := placeMessages(c, ar, openai.Limits{MaxN: a.pl.Config().MaxN}, a.pl.Config().Logger); aerr != nil {
		return 0, aerr
	}
	ids, _, aerr := a.pl.RenderChat(c, c.Req.Chat)
	if aerr != nil {
		return 0, aerr
	}
	return len(ids), nil
}

// write converts the worker's chat answer (the endpoint's writer, same contract as relay).
func (tn *messagesTurn) write(pl *pipeline.Pipeline, ctx context.Context, w http.ResponseWriter, resp *engine.Response, dec *pipeline.Decision, c *pipeline.Call) (bool, *openai.Error) {
	defer resp.Body.Close()
	piece, err, aerr := pipeline.FirstPiece(ctx, resp, dec)
	if aerr != nil {
		return false, aerr
	}
	body, rerr := piece, err
	if resp.Status != http.StatusOK || !resp.SSE {
		// A whole body: the engine's error answer or the chat.completion. Nothing is written
		// before it is complete, so a worker failing mid-body is retried like one failing
		// before its first byte.
		if body, rerr = readRest(resp, piece, err); rerr != nil {
			if ctx.Err() != nil {
				return false, pipeline.CtxError(ctx)
			}
			return false, engine.Classify(rerr)
		}
	}
	switch {
	case resp.Status != http.StatusOK:
		pl.ObserveTTFT(c)
		anthropic.WriteError(w, engineError(resp.Status, body))
		return true, nil
	case resp.SSE:
		tn.stream(pl, ctx, w, resp, piece, err, dec, c)
		return true, nil
	}
	msg, aerr := tn.out.Message(body)
	if aerr != nil {
		anthropic.WriteError(w, aerr)
		return true, nil
	}
	pl.ObserveTTFT(c)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(msg, '\n'))
	return true, nil
}

// maxEngineError bounds how much of an engine's error answer is read.
const maxEngineError = 1 << 20

// readRest returns the whole body that starts with piece.
func readRest(resp *engine.Response, piece []byte, err error) ([]byte, error) {
	body := append([]byte(nil), piece...)
	for err == nil {
		piece, err = resp.Body.Next()
		body = append(body, piece...)
	}
	if !errors.Is(err, io.EOF) {
		return nil, err
	}
	return body, nil
}

// engineError is an engine's error answer with its status: its message, from the OpenAI
// shape {"error":{"message"}} or vLLM's older {"message"}, else the status alone.
func engineError(status int, body []byte) *openai.Error {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if len(body) > maxEngineError {
		body = nil
	}
	_ = json.Unmarshal(body, &e)
	msg := e.Message
	if e.Error != nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	if msg == "" {
		msg = "the worker answered " + strconv.Itoa(status) + " " + http.StatusText(status)
	}
	return &openai.Error{Status: status, Message: msg}
}

// stream answers a streaming request: each piece of the worker's chunk stream becomes the
// Messages events it implies, written and flushed at once. A failure after the first event is
// one error event.
func (tn *messagesTurn) stream(pl *pipeline.Pipeline, ctx context.Context, w http.ResponseWriter, resp *engine.Response, piece []byte, err error, dec *pipeline.Decision, c *pipeline.Call) {
	st := tn.out.NewStream()
	sse := openai.NewSSE(w)
	pl.ObserveTTFT(c)
	sse.Start(http.StatusOK)
	buf := make([]byte, 0, 4096)
	for {
		var aerr *openai.Error
		if buf, aerr = st.Feed(buf, piece); aerr != nil {
			_ = sse.Write(anthropic.AppendErrorEvent(buf, aerr))
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
			_ = sse.Write(anthropic.AppendErrorEvent(buf, ae))
		}
		return
	}
	_ = sse.Write(st.End(buf))
}

// MessagesEndpoint returns the endpoint of one POST /v1/messages (for /debug/route: a Messages
// body converted and rendered as the endpoint does).
func MessagesEndpoint() *pipeline.Endpoint { return newMessages().ep }
