package router

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/pkg/openai"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mapFinishReason maps an engine finish reason to OpenAI's (wire/smg-grpc.md §7.2): empty is
// "stop"; anything else passes through.
func mapFinishReason(s string) string {
	if s == "" {
		return "stop"
	}
	return s
}

// genEvent is one message (or the end) of one prompt's Generate stream.
type genEvent struct {
	prompt int
	msg    genMsg
	err    error // io.EOF at the clean end
}

// choiceState accumulates one output choice.
type choiceState struct {
	dec        StreamDecoder
	text       []byte // non-streaming only
	completion int
	done       bool
	finish     string // non-streaming only
}

// promptState accumulates one prompt's usage.
type promptState struct {
	prompt, cached int
}

// sendGRPC runs the call on a grpc:// worker: one Generate per prompt with the gateway's token
// ids, streamed back as OpenAI chunks through the incremental detokenizer, or collected into
// one JSON body. A client disconnect cancels the calls and sends Abort for each.
func (rt *Router) sendGRPC(ctx context.Context, w http.ResponseWriter, dec *decision, c *call) (bool, *openai.Error) {
	tk := rt.cfg.Tokenizer
	if tk == nil {
		return false, &openai.Error{Status: http.StatusNotImplemented, Type: openai.TypeInvalidRequest, Code: "tokenizer_required",
			Message: "grpc:// workers need the gateway's tokenizer (--model-path or --tokenizer)"}
	}
	for _, t := range c.tokens {
		if t == nil {
			return false, openai.BadRequest("prompt", "prompt could not be tokenized")
		}
	}
	eng := dec.m.eng
	cl := eng.client()
	if cl == nil {
		return false, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "runtime_unknown", Message: "worker runtime not detected yet"}
	}
	req := c.req
	n := req.N
	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = openai.DefaultCompletionMaxTokens
	}
	id := openai.NewID("cmpl-")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Start every prompt's stream before writing anything, so a worker that refuses the call
	// can still be retried elsewhere.
	ids := make([]string, len(c.tokens))
	streams := make([]genStream, len(c.tokens))
	for i, toks := range c.tokens {
		ids[i] = id + "-" + strconv.Itoa(i)
		st, err := cl.generate(ctx, &genRequest{
			id: ids[i], tokens: toks, stream: req.Stream, maxTokens: maxTokens, temperature: req.Temperature,
			topP: req.TopP, n: n, stop: req.Stop, stopTokenIDs: req.StopTokenIDs, seed: req.Seed, ignoreEOS: req.IgnoreEOS,
		})
		if err != nil {
			ae := upstreamError(err)
			if status.Code(err) == codes.Unavailable {
				ae.Cause = &transportError{err: err} // the engine is unreachable: mark it down
			}
			return false, ae
		}
		streams[i] = st
	}
	events := make(chan genEvent)
	readers := make(chan struct{}, len(streams))
	for i, st := range streams {
		go func() {
			defer func() { readers <- struct{}{} }()
			for {
				m, err := st.Recv()
				select {
				case events <- genEvent{prompt: i, msg: m, err: err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	defer func() {
		cancel()
		for range streams {
			<-readers
		}
	}()

	choices := make([]choiceState, len(c.tokens)*n)
	for i := range choices {
		choices[i].dec = tk.NewDecoder()
	}
	prompts := make([]promptState, len(c.tokens))
	model := c.model
	created := rt.now().Unix()
	sw := openai.NewSSE(w)
	event := func(data []byte) error {
		if !sw.Started() {
			rt.observeTTFT(c)
		}
		return sw.Event(data)
	}
	open := len(streams)
	cumulative := cl.cumulative()
	var failure *openai.Error

	for open > 0 {
		var ev genEvent
		select {
		case ev = <-events:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			rt.abortAll(cl, ids, dec.m)
			switch {
			case !sw.Started():
				return false, ctxError(ctx)
			case isTimeout(ctx) || shuttingDown(ctx):
				// UpstreamTimeout or a shutdown, not the client: tell the client why its stream ends.
				sw.Fail(ctxError(ctx))
			}
			return true, nil
		}
		if ev.err != nil {
			open--
			if errors.Is(ev.err, io.EOF) {
				if !rt.promptDone(choices, ev.prompt, n) {
					failure = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_incomplete", Message: "worker ended the stream before completing every choice"}
					break
				}
				continue
			}
			failure = upstreamError(ev.err)
			break
		}
		m := ev.msg
		if m.index < 0 || m.index >= n {
			failure = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_malformed", Message: "worker sent an output index out of range"}
			break
		}
		ci := ev.prompt*n + m.index
		ch := &choices[ci]
		ps := &prompts[ev.prompt]
		ps.prompt = max(ps.prompt, m.promptTokens)
		ps.cached = max(ps.cached, m.cachedTokens)
		if !req.Stream {
			if m.complete {
				for _, t := range m.tokens {
					ch.text = append(ch.text, ch.dec.Add(t)...)
				}
				ch.text = append(ch.text, ch.dec.Flush()...)
				ch.completion = max(m.completionTokens, len(m.tokens))
				ch.done = true
				ch.finish = mapFinishReason(m.finishReason)
			}
			continue
		}
		// Streaming: chunks carry deltas; a complete repeats the final delta and must not be
		// appended (wire/smg-grpc.md §7.2).
		if !m.complete {
			var text []byte
			for _, t := range m.tokens {
				text = append(text, ch.dec.Add(t)...)
			}
			ch.completion += len(m.tokens)
			if cumulative && m.completionTokens > ch.completion {
				ch.completion = m.completionTokens
			}
			if len(text) > 0 {
				if err := event(chunkJSON(id, created, model, ci, string(text), nil)); err != nil {
					rt.abortAll(cl, ids, dec.m)
					return true, nil
				}
			}
			continue
		}
		if cumulative {
			ch.completion = max(ch.completion, m.completionTokens)
		} else if ch.completion == 0 {
			// A vLLM stream whose only message is the complete: its output_ids were never sent.
			var text []byte
			for _, t := range m.tokens {
				text = append(text, ch.dec.Add(t)...)
			}
			ch.completion = len(m.tokens)
			if len(text) > 0 {
				if err := event(chunkJSON(id, created, model, ci, string(text), nil)); err != nil {
					rt.abortAll(cl, ids, dec.m)
					return true, nil
				}
			}
		}
		fr := mapFinishReason(m.finishReason)
		ch.done = true
		if err := event(chunkJSON(id, created, model, ci, ch.dec.Flush(), &fr)); err != nil {
			rt.abortAll(cl, ids, dec.m)
			return true, nil
		}
	}
	if failure != nil {
		cancel()
		rt.abortAll(cl, ids, dec.m)
		if !sw.Started() {
			return false, failure
		}
		rt.met.upstream.WithLabelValues(dec.m.w.URL(), "mid_stream").Inc()
		rt.log.Warn("worker stream failed", zapWorker(dec.m), zap.String("error", failure.Message))
		sw.Fail(failure)
		return true, nil
	}
	u := &openai.Usage{PromptTokensDetails: &openai.TokenDetails{}}
	for _, p := range prompts {
		u.PromptTokens += p.prompt
		u.PromptTokensDetails.CachedTokens += p.cached
	}
	for i := range choices {
		u.CompletionTokens += choices[i].completion
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if req.Stream {
		if !sw.Started() {
			rt.observeTTFT(c)
			sw.Start(http.StatusOK)
		}
		if req.IncludeUsage {
			b, _ := json.Marshal(openai.Completion{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: model, Choices: []openai.CompletionChoice{}, Usage: u})
			_ = sw.Event(b)
		}
		_ = sw.Done()
		return true, nil
	}
	resp := openai.Completion{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: model, Choices: make([]openai.CompletionChoice, len(choices)), Usage: u}
	for i := range choices {
		fr := choices[i].finish
		resp.Choices[i] = openai.CompletionChoice{Index: i, Text: string(choices[i].text), FinishReason: &fr}
	}
	sort.Slice(resp.Choices, func(i, j int) bool { return resp.Choices[i].Index < resp.Choices[j].Index })
	b, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rt.observeTTFT(c)
	_, _ = w.Write(b)
	return true, nil
}

// promptDone reports whether every choice of prompt p has completed.
func (rt *Router) promptDone(choices []choiceState, p, n int) bool {
	for i := p * n; i < (p+1)*n; i++ {
		if !choices[i].done {
			return false
		}
	}
	return true
}

// abortAll tells the engine to drop the calls (SMG fires Abort with a 10 s deadline when a
// stream is dropped before its final message, wire/smg-grpc.md §8). Errors are only logged.
func (rt *Router) abortAll(cl runtimeClient, ids []string, m *member) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := cl.abort(ctx, id); err != nil {
			rt.log.Debug("abort failed", zapWorker(m), zap.String("request_id", id), zap.Error(err))
		}
	}
}

func chunkJSON(id string, created int64, model string, index int, text string, finish *string) []byte {
	b, _ := json.Marshal(openai.Completion{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: model,
		Choices: []openai.CompletionChoice{{Index: index, Text: text, FinishReason: finish}}})
	return b
}
