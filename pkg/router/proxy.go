package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/kvgate/kvgate/pkg/openai"
	"go.uber.org/zap"
)

// transportError is a failure to exchange a request with a worker at all (refused, reset,
// timed out before a response): it also marks the worker down until its next health check.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

func zapWorker(m *member) zap.Field { return zap.String("worker", m.w.URL()) }
func zapErr(err error) zap.Field    { return zap.Error(err) }

// copyPool holds the buffers that copy worker responses to clients. Request bodies are not
// pooled: the transport may still be writing one when the response arrives.
var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// proxyHTTP sends the call to an http:// worker's /v1/completions and streams the answer back
// (STYLE.md rule 13): SSE and unknown-length bodies are flushed as they arrive. A transport
// failure or a 5xx status before anything was written is returned for a retry; a 4xx is the
// engine's answer to bad input and is passed through. After the first byte, a failure of an SSE
// stream ends it with one OpenAI-shaped error event; other bodies are aborted.
func (rt *Router) proxyHTTP(ctx context.Context, w http.ResponseWriter, dec *decision, c *call) (bool, *openai.Error) {
	var fwd [][]uint32
	if rt.cfg.ForwardTokenIDs {
		fwd = c.tokens
		for _, t := range fwd {
			if t == nil { // a text prompt that was not tokenized: send the text
				fwd = nil
				break
			}
		}
	}
	engineModel := dec.m.w.UpstreamModel(c.model)
	body := c.req.AppendUpstream(make([]byte, 0, c.req.BodyLen()+64), engineModel, fwd)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dec.m.w.URL()+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return false, upstreamError(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range forwardHeaders {
		if v := c.header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	if c.req.Stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := rt.httpc.tr.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctxError(ctx)
		}
		return false, &openai.Error{Status: http.StatusBadGateway, Message: "worker unreachable: " + err.Error(), Type: openai.TypeUpstream, Code: "upstream_unreachable", Cause: &transportError{err: err}}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("worker answered %d: %s", resp.StatusCode, strings.TrimSpace(string(snippet)))}
	}
	h := w.Header()
	ct := resp.Header.Get("Content-Type")
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	sse := strings.HasPrefix(ct, "text/event-stream")
	rw := newModelRewriter(engineModel, c.model) // nil: the names agree, bytes pass through
	if rw != nil && !sse && strings.HasPrefix(ct, "application/json") {
		return rt.proxyJSONRewritten(ctx, w, resp, rw, c)
	}
	var srw *sseRewriter
	if rw != nil && sse {
		srw = &sseRewriter{r: rw}
	}
	if sse {
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // nginx in front must not buffer the stream
	}
	flush := sse || resp.ContentLength < 0
	if resp.ContentLength >= 0 && !sse {
		h.Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if flush {
		_ = rc.Flush()
	}
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	buf := *bp
	first := true
	var last2 [2]byte // last two bytes written, to close a partial SSE event before an error event
	emit := func(p []byte) error {
		if len(p) == 0 {
			return nil
		}
		if _, werr := w.Write(p); werr != nil {
			return werr
		}
		if flush {
			_ = rc.Flush()
		}
		if n := len(p); n >= 2 {
			last2 = [2]byte{p[n-2], p[n-1]}
		} else {
			last2 = [2]byte{last2[1], p[0]}
		}
		return nil
	}
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if first {
				rt.observeTTFT(c)
				first = false
			}
			out := buf[:n]
			if srw != nil {
				out = srw.feed(out)
			}
			if emit(out) != nil {
				return true, nil // client gone; ctx cancels the upstream request
			}
		}
		if rerr != nil && srw != nil {
			_ = emit(srw.rest()) // the stream's last line, or the partial one an error cuts
		}
		if rerr == io.EOF {
			return true, nil
		}
		if rerr != nil {
			if ctx.Err() != nil && !isTimeout(ctx) && !shuttingDown(ctx) {
				return true, nil // the client went away
			}
			if !shuttingDown(ctx) { // the gateway's own shutdown is not the worker's failure
				rt.met.upstream.WithLabelValues(dec.m.w.URL(), "mid_stream").Inc()
				rt.log.Warn("worker stream failed", zapWorker(dec.m), zapErr(rerr))
			}
			if !sse {
				panic(http.ErrAbortHandler)
			}
			ae := upstreamError(rerr)
			if ctx.Err() != nil {
				ae = ctxError(ctx)
			}
			var out []byte
			if last2 != [2]byte{'\n', '\n'} && !first {
				out = append(out, "\n\n"...)
			}
			out = append(out, "data: "...)
			out = append(out, ae.AppendBody(nil)...)
			out = append(out, "\n\n"...)
			_, _ = w.Write(out)
			_ = rc.Flush()
			return true, nil
		}
	}
}

// proxyJSONRewritten answers a non-streaming JSON response whose model name must change
// (modelRewriter): the body is read whole (up to maxRewriteBody; a longer one passes through
// unchanged), rewritten once, and sent with its new length. A failure while reading, before
// anything was written, is returned for a retry like a failed request.
func (rt *Router) proxyJSONRewritten(ctx context.Context, w http.ResponseWriter, resp *http.Response, rw *modelRewriter, c *call) (bool, *openai.Error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRewriteBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return false, ctxError(ctx)
		}
		return false, upstreamError(err)
	}
	rt.observeTTFT(c)
	h := w.Header()
	if len(body) > maxRewriteBody {
		// Too large to hold: stream it as the engine sent it.
		w.WriteHeader(resp.StatusCode)
		if _, err := w.Write(body); err != nil {
			return true, nil
		}
		if _, err := io.Copy(w, resp.Body); err != nil && ctx.Err() == nil {
			panic(http.ErrAbortHandler)
		}
		return true, nil
	}
	out := rw.appendRewritten(make([]byte, 0, len(body)+len(rw.to)), body)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
	return true, nil
}

// forwardHeaders are the client headers passed on to http:// workers: request ids and W3C trace
// context, so engine logs correlate. Credentials are not forwarded: the gateway's clients are
// not the workers' clients.
var forwardHeaders = []string{"X-Request-Id", "Traceparent", "Tracestate"}

// isTimeout reports whether ctx ended by its own deadline (UpstreamTimeout) rather than the
// client's cancellation.
func isTimeout(ctx context.Context) bool { return ctx.Err() == context.DeadlineExceeded }
