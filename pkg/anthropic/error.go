package anthropic

import (
	"net/http"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Anthropic error types (the error.type of an error body), by the HTTP status they answer.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeTooLarge       = "request_too_large"
	TypeRateLimit      = "rate_limit_error"
	TypeAPI            = "api_error"
	TypeOverloaded     = "overloaded_error"
)

// ErrorType returns the Anthropic error type of an HTTP status: 400 (and any other 4xx not
// named) invalid_request_error, 401 authentication_error, 403 permission_error, 404
// not_found_error, 413 request_too_large, 429 rate_limit_error, 503 and 529
// overloaded_error (a fleet with no capacity), any other 5xx api_error.
func ErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return TypeAuthentication
	case http.StatusForbidden:
		return TypePermission
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return TypeTooLarge
	case http.StatusTooManyRequests:
		return TypeRateLimit
	case http.StatusServiceUnavailable, 529:
		return TypeOverloaded
	}
	if status >= 500 {
		return TypeAPI
	}
	return TypeInvalidRequest
}

// AppendError appends e as Anthropic's error body, {"type":"error","error":{"type","message"}},
// the type chosen by e's status (ErrorType).
func AppendError(dst []byte, e *openai.Error) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = openai.AppendString(dst, ErrorType(e.Status))
	dst = append(dst, `,"message":`...)
	dst = openai.AppendString(dst, e.Message)
	return append(dst, "}}"...)
}

// WriteError writes e as a complete Anthropic error response with e's status. Call it only
// before anything else was written; once a stream has started, send AppendErrorEvent.
func WriteError(w http.ResponseWriter, e *openai.Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(AppendError(make([]byte, 0, 96+len(e.Message)), e), '\n'))
}

// AppendErrorEvent appends e as the error event that ends a Messages stream.
func AppendErrorEvent(dst []byte, e *openai.Error) []byte {
	dst = append(dst, "event: error\ndata: "...)
	dst = AppendError(dst, e)
	return append(dst, "\n\n"...)
}
