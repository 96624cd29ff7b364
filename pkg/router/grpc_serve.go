package router

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OpenAI completion response shapes (non-streaming body and SSE chunks share them).
type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails *tokenDetails `json:"prompt_tokens_details,omitempty"`
}

type tokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func newCompletionID() string {
	var b [12]byte
	for i := 0; i < len(b); i += 8 {
		x := rand.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(x >> (8 * j))
		}
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

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
func (rt *Router) sendGRPC(ctx context.Context, w http.ResponseWriter, dec decision, c *call) (bool, *apiError) {
	tk := rt.cfg.Tokenizer
	if tk == nil {
		return false, &apiError{Status: http.StatusNotImplemented, Type: typeInvalidRequest, Code: "tokenizer_required",
			Message: "grpc:// workers need the gateway's tokenizer (--model-path or --tokenizer)"}
	}
	for _, t := range c.tokens {
		if t == nil {
			return false, badRequest("prompt", "prompt could not be tokenized")
		}
	}
	eng := dec.m.eng
	cl := eng.client()
	if cl == nil {
		return false, &apiError{Status: http.StatusBadGateway, Type: typeUpstream, Code: "runtime_unknown", Message: "worker runtime not detected yet"}
	}
	req := c.req
	n := req.N
	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = defaultMaxTokens
	}
	id := newCompletionID()
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
				ae.cause = &transportError{err: err} // the engine is unreachable: mark it down
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
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	open := len(streams)
	cumulative := cl.cumulative()
	var failure *apiError

	for open > 0 {
		var ev genEvent
		select {
		case ev = <-events:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			rt.abortAll(cl, ids, dec.m)
			switch {
			case !sw.started:
				return false, ctxError(ctx)
			case isTimeout(ctx) || shuttingDown(ctx):
				// UpstreamTimeout or a shutdown, not the client: tell the client why its stream ends.
				_ = sw.raw([]byte("data: " + string(ctxError(ctx).body()) + "\n\n"))
			}
			return true, nil
		}
		if ev.err != nil {
			open--
			if errors.Is(ev.err, io.EOF) {
				if !rt.promptDone(choices, ev.prompt, n) {
					failure = &apiError{Status: http.StatusBadGateway, Type: typeUpstream, Code: "upstream_incomplete", Message: "worker ended the stream before completing every choice"}
					break
				}
				continue
			}
			failure = upstreamError(ev.err)
			break
		}
		m := ev.msg
		if m.index < 0 || m.index >= n {
			failure = &apiError{Status: http.StatusBadGateway, Type: typeUpstream, Code: "upstream_malformed", Message: "worker sent an output index out of range"}
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
				if err := sw.event(rt, c, chunkJSON(id, created, model, ci, string(text), nil)); err != nil {
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
				if err := sw.event(rt, c, chunkJSON(id, created, model, ci, string(text), nil)); err != nil {
					rt.abortAll(cl, ids, dec.m)
					return true, nil
				}
			}
		}
		fr := mapFinishReason(m.finishReason)
		ch.done = true
		if err := sw.event(rt, c, chunkJSON(id, created, model, ci, ch.dec.Flush(), &fr)); err != nil {
			rt.abortAll(cl, ids, dec.m)
			return true, nil
		}
	}
	if failure != nil {
		cancel()
		rt.abortAll(cl, ids, dec.m)
		if !sw.started {
			return false, failure
		}
		rt.met.upstream.WithLabelValues(dec.m.w.URL(), "mid_stream").Inc()
		rt.log.Warn("worker stream failed", zapWorker(dec.m), zap.String("error", failure.Message))
		_ = sw.raw([]byte("data: " + string(failure.body()) + "\n\n"))
		return true, nil
	}
	u := &usage{PromptTokensDetails: &tokenDetails{}}
	for _, p := range prompts {
		u.PromptTokens += p.prompt
		u.PromptTokensDetails.CachedTokens += p.cached
	}
	for i := range choices {
		u.CompletionTokens += choices[i].completion
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if req.Stream {
		if !sw.started {
			sw.begin(rt, c)
		}
		if req.IncludeUsage {
			b, _ := json.Marshal(completionResponse{ID: id, Object: "text_completion", Created: created, Model: model, Choices: []completionChoice{}, Usage: u})
			_ = sw.raw(append(append([]byte("data: "), b...), "\n\n"...))
		}
		_ = sw.raw([]byte("data: [DONE]\n\n"))
		return true, nil
	}
	resp := completionResponse{ID: id, Object: "text_completion", Created: created, Model: model, Choices: make([]completionChoice, len(choices)), Usage: u}
	for i := range choices {
		fr := choices[i].finish
		resp.Choices[i] = completionChoice{Index: i, Text: string(choices[i].text), FinishReason: &fr}
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
	b, _ := json.Marshal(completionResponse{ID: id, Object: "text_completion", Created: created, Model: model,
		Choices: []completionChoice{{Index: index, Text: text, FinishReason: finish}}})
	return b
}

// sseWriter writes SSE events, sending the response headers with the first one.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (s *sseWriter) begin(rt *Router, c *call) {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.started = true
	rt.observeTTFT(c)
}

func (s *sseWriter) event(rt *Router, c *call, data []byte) error {
	if !s.started {
		s.begin(rt, c)
	}
	b := make([]byte, 0, len(data)+8)
	b = append(b, "data: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	return s.raw(b)
}

func (s *sseWriter) raw(b []byte) error {
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}
