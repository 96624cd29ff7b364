package router

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// apiError is an error with the OpenAI error shape and an HTTP status. Handlers classify every
// failure into one before writing anything (STYLE.md rule 14).
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string
	Code    string
	// cause is the underlying failure, when there is one (e.g. a *transportError).
	cause error
}

func (e *apiError) Error() string { return e.Message }

// Unwrap returns the underlying failure.
func (e *apiError) Unwrap() error { return e.cause }

// OpenAI error types.
const (
	typeInvalidRequest = "invalid_request_error"
	typeNotFound       = "not_found_error"
	typeServer         = "server_error"
	typeUpstream       = "upstream_error"
	typeRateLimit      = "rate_limit_error"
	typeUnavailable    = "service_unavailable"
	typeAuth           = "authentication_error"
)

func badRequest(param, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: msg, Type: typeInvalidRequest, Param: param}
}

// errorBody is the OpenAI error JSON {"error":{"message","type","param","code"}}.
type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() []byte {
	f := errorFields{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		f.Param = &e.Param
	}
	code := e.Code
	if code == "" {
		code = strconv.Itoa(e.Status)
	}
	f.Code = &code
	b, _ := json.Marshal(errorBody{Error: f})
	return b
}

// writeError writes e as an OpenAI error response.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(e.body(), '\n'))
}

// upstreamError classifies an error of a request to a worker: a timeout is 504, a gRPC status
// is mapped per wire/smg-grpc.md §7.3, anything else (refused, reset, malformed) is 502.
func upstreamError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return grpcStatusError(st)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &apiError{Status: http.StatusGatewayTimeout, Message: "worker timed out", Type: typeUpstream, Code: "upstream_timeout"}
	}
	return &apiError{Status: http.StatusBadGateway, Message: "worker failed: " + err.Error(), Type: typeUpstream, Code: "upstream_error"}
}

// grpcStatusError maps an engine's gRPC status to an HTTP error (wire/smg-grpc.md §7.3).
func grpcStatusError(st *status.Status) *apiError {
	e := &apiError{Message: "worker: " + st.Message(), Type: typeUpstream, Code: st.Code().String()}
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		e.Status, e.Type = http.StatusBadRequest, typeInvalidRequest
	case codes.ResourceExhausted:
		e.Status, e.Type = http.StatusTooManyRequests, typeRateLimit
	case codes.DeadlineExceeded:
		e.Status, e.Code = http.StatusGatewayTimeout, "upstream_timeout" // as for an HTTP worker's timeout
	case codes.Unavailable:
		// The engine is down: from the client's view the gateway's upstream failed.
		e.Status = http.StatusBadGateway
	case codes.Unimplemented:
		e.Status = http.StatusNotImplemented
	default:
		e.Status = http.StatusBadGateway
	}
	return e
}

// retryable reports whether a failure before the first byte may be retried on another worker:
// transport failures and engine 5xx/unavailable, not the client's own bad input.
func retryable(e *apiError) bool {
	return e.Status >= 500
}

// ctxError is the answer for a request whose context ended: 503 during a shutdown, otherwise
// the upstream classification (504 for UpstreamTimeout).
func ctxError(ctx context.Context) *apiError {
	if shuttingDown(ctx) {
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Code: "gateway_shutting_down",
			Message: "the gateway is shutting down; retry the request"}
	}
	return upstreamError(ctx.Err())
}
