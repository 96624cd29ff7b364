package openai

import (
	"net/http"
	"strconv"
)

// OpenAI error types (the "type" field of an error body).
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeNotFound       = "not_found_error"
	TypeServer         = "server_error"
	TypeUpstream       = "upstream_error"
	TypeRateLimit      = "rate_limit_error"
	TypeUnavailable    = "service_unavailable"
	TypeAuth           = "authentication_error"
)

// Error is a failure in the OpenAI error shape with the HTTP status to answer it with. The zero
// Code is written as the decimal status. Cause, when set, is the underlying failure (for
// example a worker's transport error); it is never shown to the client.
type Error struct {
	Status  int
	Message string
	Type    string
	Param   string
	Code    string
	Cause   error
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// BadRequest is a 400 invalid_request_error naming the offending parameter ("" for the body).
func BadRequest(param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: msg, Type: TypeInvalidRequest, Param: param}
}

// AppendBody appends the error as the JSON object {"error":{"message","type","param","code"}}
// (param null when empty).
func (e *Error) AppendBody(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = AppendString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = AppendString(dst, e.Type)
	dst = append(dst, `,"param":`...)
	if e.Param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendString(dst, e.Param)
	}
	dst = append(dst, `,"code":`...)
	if e.Code == "" {
		dst = AppendString(dst, strconv.Itoa(e.Status))
	} else {
		dst = AppendString(dst, e.Code)
	}
	return append(dst, "}}"...)
}

// WriteError writes e as a complete JSON error response. Call it only before anything else was
// written; once an SSE stream has started, use SSE.Fail.
func WriteError(w http.ResponseWriter, e *Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(e.AppendBody(make([]byte, 0, 128+len(e.Message))), '\n'))
}
