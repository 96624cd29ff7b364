package router

import (
	"context"
	"net/http"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// retryable reports whether a failure before the first byte may be retried on another worker:
// transport failures and engine 5xx/unavailable, not the client's own bad input.
func retryable(e *openai.Error) bool {
	return e.Status >= 500
}

// ctxError is the answer for a request whose context ended: 503 during a shutdown, otherwise
// the upstream classification (504 for UpstreamTimeout).
func ctxError(ctx context.Context) *openai.Error {
	if shuttingDown(ctx) {
		return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "gateway_shutting_down",
			Message: "the gateway is shutting down; retry the request"}
	}
	return engine.Classify(ctx.Err())
}

// isTimeout reports whether ctx ended by its own deadline (UpstreamTimeout) rather than the
// client's cancellation.
func isTimeout(ctx context.Context) bool { return ctx.Err() == context.DeadlineExceeded }
