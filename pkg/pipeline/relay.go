package pipeline

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// Relay copies a worker's response to the client (STYLE.md rule 13): headers go out with the
// first piece, event streams and bodies of unknown length are flushed piece by piece. A failure
// before the first piece is returned unwritten (started false), so the caller may retry it on
// another worker. After it, an event stream ends with one OpenAI error event; any other body is
// aborted, since a half-written JSON body cannot carry an error. A client that went away ends
// the Relay quietly; Body.Close then cancels (and aborts) the upstream call.
func (pl *Pipeline) Relay(ctx context.Context, w http.ResponseWriter, resp *engine.Response, dec *Decision, c *Call) (started bool, aerr *openai.Error) {
	defer resp.Body.Close()
	piece, err, aerr := FirstPiece(ctx, resp, dec)
	if aerr != nil {
		return false, aerr
	}
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	pl.ObserveTTFT(c)
	if resp.SSE {
		sse := openai.NewSSE(w)
		sse.Start(resp.Status)
		pl.CopyBody(ctx, resp, piece, err, sse.Write, func(e *openai.Error) { sse.Fail(e) }, dec)
		return true, nil
	}
	flush := h.Get("Content-Length") == ""
	rc := http.NewResponseController(w)
	w.WriteHeader(resp.Status)
	write := func(p []byte) error {
		if _, err := w.Write(p); err != nil {
			return err
		}
		if flush {
			return rc.Flush()
		}
		return nil
	}
	pl.CopyBody(ctx, resp, piece, err, write, func(*openai.Error) { panic(http.ErrAbortHandler) }, dec)
	return true, nil
}

// FirstPiece reads the first piece of a worker's answer. A failure there is returned as aerr
// (nothing was written: the request may be retried elsewhere); otherwise piece and err are the
// body's first Next. The first piece means the worker has computed the prompt (for a stream, it
// is the first token): its prefill no longer queues ahead of other requests (policy cost), and
// the worker is seen serving (worker.MarkServed: fleet weighs a failed health check against it).
func FirstPiece(ctx context.Context, resp *engine.Response, dec *Decision) (piece []byte, err error, aerr *openai.Error) {
	piece, err = resp.Body.Next()
	if err != nil && !errors.Is(err, io.EOF) {
		if ctx.Err() != nil {
			return nil, nil, CtxError(ctx)
		}
		return nil, nil, engine.Classify(err)
	}
	dec.pick.Prefilled()
	dec.m.Worker().MarkServed(time.Now())
	return piece, err, nil
}

// CopyBody writes piece and the rest of resp's body with write until the body ends, the client
// goes away (write fails) or the worker fails; a failure is reported with fail, except when the
// client itself left.
func (pl *Pipeline) CopyBody(ctx context.Context, resp *engine.Response, piece []byte, err error, write func([]byte) error, fail func(*openai.Error), dec *Decision) {
	for {
		if len(piece) > 0 && write(piece) != nil {
			return // client gone
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			break
		}
		piece, err = resp.Body.Next()
	}
	if ctx.Err() != nil && !isTimeout(ctx) && !shuttingDown(ctx) && legCause(ctx) == nil {
		return // the client went away
	}
	ae := engine.Classify(err)
	if ctx.Err() != nil {
		ae = CtxError(ctx)
	}
	if !shuttingDown(ctx) { // the gateway's own shutdown is not the worker's failure
		pl.met.upstream.WithLabelValues(dec.m.Worker().URL(), "mid_stream").Inc()
		pl.log.Warn("worker stream failed", zap.String("worker", dec.m.Worker().URL()), zap.String("error", ae.Message))
	}
	fail(ae)
}

// MidStreamFailure classifies a worker failure after the stream started, as copyBody does;
// nil when the client itself went away.
func (pl *Pipeline) MidStreamFailure(ctx context.Context, err error, dec *Decision) *openai.Error {
	if ctx.Err() != nil && !isTimeout(ctx) && !shuttingDown(ctx) {
		return nil
	}
	ae := engine.Classify(err)
	if ctx.Err() != nil {
		ae = CtxError(ctx)
	}
	if !shuttingDown(ctx) {
		pl.met.upstream.WithLabelValues(dec.m.Worker().URL(), "mid_stream").Inc()
		pl.log.Warn("worker stream failed", zap.String("worker", dec.m.Worker().URL()), zap.String("error", ae.Message))
	}
	return ae
}
