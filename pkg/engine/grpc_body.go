package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/kvgate/kvgate/pkg/openai"
)

// genEvent is one message (or the end) of one prompt's Generate stream.
type genEvent struct {
	prompt int
	msg    genMsg
	err    error // io.EOF at the clean end
}

// choiceState accumulates one output choice.
type choiceState struct {
	dec          StreamDecoder
	stop         stopText
	completion   int
	done         bool
	finishReason string
}

// decode appends the final text of ids to dst: decoded, and cut at the request's stop strings.
func (c *choiceState) decode(dst []byte, ids []uint32) []byte {
	var text []byte
	for _, t := range ids {
		text = append(text, c.dec.Add(t)...)
	}
	return append(dst, c.stop.add(string(text))...)
}

// finish appends the text held at the end of the choice to dst.
func (c *choiceState) finish(dst []byte) []byte {
	dst = append(dst, c.stop.add(c.dec.Flush())...)
	return append(dst, c.stop.flush()...)
}

// promptState accumulates one prompt's usage.
type promptState struct {
	prompt, cached int
}

// Failures of a worker's stream that are the worker's fault, not the transport's.
var (
	errIncomplete = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_incomplete", Message: "worker ended the stream before completing every choice"}
	errBadIndex   = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_malformed", Message: "worker sent an output index out of range"}
)

// grpcOutput turns the decoded text of each choice into the bytes of the OpenAI answer: the
// completions shape (completionOutput) or the chat shape (chatOutput, grpc_chat.go). Its
// methods append to b.out, the next piece.
type grpcOutput interface {
	// begin runs once, on the first message from the worker (chat streams send each choice's
	// role chunk there, as vLLM does).
	begin(b *grpcBody)
	// text handles decoded text of choice ci; finish the choice's last text and the engine's
	// finish reason.
	text(b *grpcBody, ci int, text []byte)
	finish(b *grpcBody, ci int, text []byte, engineFinish string)
	// tail ends the answer once every choice has completed.
	tail(b *grpcBody, u *openai.Usage)
}

// grpcBody turns a request's Generate streams (one per prompt, each with n choices) into the
// OpenAI answer through its grpcOutput. One reader goroutine per stream feeds events; they are
// owned by the body and joined by Close, which also sends Abort for calls that did not finish.
type grpcBody struct {
	e          *grpcEngine
	rt         *runtimeInUse
	ctx        context.Context
	cancel     context.CancelFunc
	req        *Request
	output     grpcOutput
	stream     bool
	n          int // choices per prompt
	id         string
	created    int64
	cumulative bool

	ids     []string
	streams []genStream
	events  chan genEvent
	readers chan struct{}
	choices []choiceState
	prompts []promptState
	open    int  // streams not ended yet
	begun   bool // the output's begin ran
	ended   bool // every choice completed and the tail was produced
	out     []byte
	text    []byte
	// kvParams is the first choice's kv_transfer_params_json (a NIXL prefill leg's hand-off).
	kvParams string
}

// bodyParams are what differs between a completion and a chat body.
type bodyParams struct {
	output      grpcOutput
	stream      bool
	n           int
	stops       []string
	skipSpecial bool
	idPrefix    string
}

func newGRPCBody(e *grpcEngine, rt *runtimeInUse, ctx context.Context, cancel context.CancelFunc, r *Request, p bodyParams) *grpcBody {
	n := len(r.Tokens)
	b := &grpcBody{e: e, rt: rt, ctx: ctx, cancel: cancel, req: r, output: p.output, stream: p.stream, n: p.n,
		id: openai.NewID(p.idPrefix), created: e.cfg.Now().Unix(), cumulative: rt.name.CumulativeTokens(),
		ids: make([]string, n), streams: make([]genStream, n), events: make(chan genEvent),
		choices: make([]choiceState, n*p.n), prompts: make([]promptState, n)}
	for i := range b.choices {
		b.choices[i].dec = e.cfg.Tokenizer.NewDecoder(p.skipSpecial)
		b.choices[i].stop = newStopText(p.stops)
	}
	return b
}

// start runs one reader per stream.
func (b *grpcBody) start() {
	b.open = len(b.streams)
	b.readers = make(chan struct{}, len(b.streams))
	for i, st := range b.streams {
		go func() {
			defer func() { b.readers <- struct{}{} }()
			for {
				m, err := st.Recv()
				select {
				case b.events <- genEvent{prompt: i, msg: m, err: err}:
				case <-b.ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// Next implements Body.
func (b *grpcBody) Next() ([]byte, error) {
	b.out = b.out[:0]
	for len(b.out) == 0 {
		if b.open == 0 {
			if b.ended {
				return nil, io.EOF
			}
			b.ended = true
			b.output.tail(b, b.usage())
			break
		}
		var ev genEvent
		select {
		case ev = <-b.events:
		case <-b.ctx.Done():
			return nil, b.ctx.Err()
		}
		if err := b.handle(ev); err != nil {
			return nil, err
		}
	}
	return b.out, nil
}

// handle applies one stream event.
func (b *grpcBody) handle(ev genEvent) error {
	if ev.err != nil {
		b.open--
		if !errors.Is(ev.err, io.EOF) {
			return Classify(ev.err)
		}
		for i := ev.prompt * b.n; i < (ev.prompt+1)*b.n; i++ {
			if !b.choices[i].done {
				return errIncomplete
			}
		}
		return nil
	}
	m := ev.msg
	if m.index < 0 || m.index >= b.n {
		return errBadIndex
	}
	if !b.begun {
		b.begun = true
		b.output.begin(b)
	}
	ps := &b.prompts[ev.prompt]
	ps.prompt = max(ps.prompt, m.promptTokens)
	ps.cached = max(ps.cached, m.cachedTokens)
	b.message(ev.prompt*b.n+m.index, m)
	return nil
}

// message applies one chunk or complete of choice ci (wire/smg-grpc.md §7.2): streaming chunks
// carry deltas and a complete repeats the final delta, which must not be appended, except in a
// vLLM stream whose only message is the complete (its output_ids were never sent); a
// non-streaming call sends only the complete, whose output_ids are the whole answer.
func (b *grpcBody) message(ci int, m genMsg) {
	ch := &b.choices[ci]
	if !m.complete {
		if !b.stream {
			return
		}
		ch.completion += len(m.tokens)
		if b.cumulative {
			ch.completion = max(ch.completion, m.completionTokens)
		}
		b.emitText(ci, ch.decode(b.text[:0], m.tokens))
		return
	}
	switch {
	case !b.stream:
		ch.completion = max(m.completionTokens, len(m.tokens))
		b.emitText(ci, ch.decode(b.text[:0], m.tokens))
	case b.cumulative:
		ch.completion = max(ch.completion, m.completionTokens)
	case ch.completion == 0:
		ch.completion = len(m.tokens)
		b.emitText(ci, ch.decode(b.text[:0], m.tokens))
	}
	if ci == 0 {
		b.kvParams = m.kvParams
	}
	ch.done, ch.finishReason = true, mapFinishReason(m.finishReason)
	text := ch.finish(b.text[:0])
	b.text = text[:0]
	b.output.finish(b, ci, text, ch.finishReason)
}

// handoff is Response.KVTransferParams of a NIXL prefill leg: its one choice's hand-off.
func (b *grpcBody) handoff() json.RawMessage { return handoff(b.kvParams) }

// emitText hands decoded text to the output, keeping the scratch buffer.
func (b *grpcBody) emitText(ci int, text []byte) {
	b.text = text[:0]
	b.output.text(b, ci, text)
}

// event appends v as one SSE event to the next piece.
func (b *grpcBody) event(v any) {
	data, _ := openai.Marshal(v) // plain structs always encode
	b.out = openai.AppendEvent(b.out, data)
}

// usage sums the prompts' and choices' token counts.
func (b *grpcBody) usage() *openai.Usage {
	u := &openai.Usage{PromptTokensDetails: &openai.TokenDetails{}}
	for _, p := range b.prompts {
		u.PromptTokens += p.prompt
		u.PromptTokensDetails.CachedTokens += p.cached
	}
	for i := range b.choices {
		u.CompletionTokens += b.choices[i].completion
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// Close implements Body: it cancels the calls, joins the readers and, unless every choice
// completed, sends Abort for each call.
func (b *grpcBody) Close() {
	b.cancel()
	for range b.streams {
		<-b.readers
	}
	if !b.ended {
		b.e.abortAll(b.rt.c, b.ids)
	}
}

// completionOutput writes the /v1/completions shapes: one text_completion chunk per decoded
// delta and the final chunk of each choice, then the usage chunk (with
// stream_options.include_usage) and [DONE]; or, not streaming, one text_completion body.
type completionOutput struct {
	req   *openai.CompletionRequest
	texts [][]byte // non-streaming: each choice's text
}

func (o *completionOutput) begin(*grpcBody) {}

func (o *completionOutput) text(b *grpcBody, ci int, text []byte) { o.emit(b, ci, text, nil) }

func (o *completionOutput) finish(b *grpcBody, ci int, text []byte, engineFinish string) {
	o.emit(b, ci, text, &engineFinish)
}

// emit delivers text (and the finish reason, on a choice's last delta): a chunk appended to the
// next piece when streaming (empty text without a finish sends nothing), else the choice's
// accumulated text.
func (o *completionOutput) emit(b *grpcBody, ci int, text []byte, finish *string) {
	if !o.req.Stream {
		if o.texts == nil {
			o.texts = make([][]byte, len(b.choices))
		}
		o.texts[ci] = append(o.texts[ci], text...)
		return
	}
	if len(text) == 0 && finish == nil {
		return
	}
	b.event(&openai.Completion{ID: b.id, Object: openai.ObjectTextCompletion, Created: b.created, Model: b.req.Model,
		Choices: []openai.CompletionChoice{{Index: ci, Text: string(text), FinishReason: finish}}})
}

func (o *completionOutput) tail(b *grpcBody, u *openai.Usage) {
	c := openai.Completion{ID: b.id, Object: openai.ObjectTextCompletion, Created: b.created, Model: b.req.Model, Usage: u}
	if o.req.Stream {
		if o.req.IncludeUsage {
			c.Choices = []openai.CompletionChoice{}
			b.event(&c)
		}
		b.out = openai.AppendDone(b.out)
		return
	}
	c.Choices = make([]openai.CompletionChoice, len(b.choices))
	for i := range b.choices {
		fr := b.choices[i].finishReason
		var text string
		if o.texts != nil {
			text = string(o.texts[i])
		}
		c.Choices[i] = openai.CompletionChoice{Index: i, Text: text, FinishReason: &fr}
	}
	b.out, _ = openai.Marshal(c)
}

var (
	_ Body       = (*grpcBody)(nil)
	_ grpcOutput = (*completionOutput)(nil)
)
