package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// retryable reports whether a failure before the first byte may be retried on another worker:
// transport failures and engine 5xx/unavailable, not the client's own bad input.
func retryable(e *openai.Error) bool {
	return e.Status >= 500
}

// CtxError is the answer for a request whose context ended: 503 during a shutdown, otherwise
// the upstream classification (504 for UpstreamTimeout).
func CtxError(ctx context.Context) *openai.Error {
	if e := legCause(ctx); e != nil {
		return e
	}
	if shuttingDown(ctx) {
		return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "gateway_shutting_down",
			Message: "the gateway is shutting down; retry the request"}
	}
	return engine.Classify(ctx.Err())
}

// isTimeout reports whether ctx ended by its own deadline (UpstreamTimeout) rather than the
// client's cancellation.
func isTimeout(ctx context.Context) bool { return ctx.Err() == context.DeadlineExceeded }

// errShutdown is the cancellation cause of the requests AbortInFlight ends.
var errShutdown = errors.New("router: gateway shutting down")

// shuttingDown reports whether ctx ended because of AbortInFlight.
func shuttingDown(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errShutdown) }

// WriteJSON writes v as the JSON body of a response with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusInternalServerError, Message: "encode response", Type: openai.TypeServer})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// legError is the cancellation cause of a pair's decode leg whose prefill leg failed: the
// client gets the prefill failure, in the stream's error event once it has started.
type legError struct{ e *openai.Error }

func (l *legError) Error() string { return l.e.Message }

// legCause returns the failure that ended ctx's pair leg, or nil.
func legCause(ctx context.Context) *openai.Error {
	var le *legError
	if errors.As(context.Cause(ctx), &le) {
		return le.e
	}
	return nil
}

// StatusWriter records the status code for metrics. It unwraps for http.ResponseController,
// so flushing streams still reaches the real writer.
type StatusWriter struct {
	http.ResponseWriter
	Code int
}

func (s *StatusWriter) WriteHeader(code int) {
	if s.Code == 0 {
		s.Code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *StatusWriter) Write(b []byte) (int, error) {
	if s.Code == 0 {
		s.Code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *StatusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
