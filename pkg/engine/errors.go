package engine

import (
	"context"
	"errors"
	"net"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Classify turns a failure of a request to a worker into the client's answer: an *openai.Error
// passes through, a gRPC status is mapped per wire/smg-grpc.md §7.3, a timeout is 504, anything
// else (refused, reset, malformed) is 502.
func Classify(err error) *openai.Error {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return grpcStatusError(st)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &openai.Error{Status: http.StatusGatewayTimeout, Message: "worker timed out", Type: openai.TypeUpstream, Code: "upstream_timeout"}
	}
	return &openai.Error{Status: http.StatusBadGateway, Message: "worker failed: " + err.Error(), Type: openai.TypeUpstream, Code: "upstream_error"}
}

// grpcStatusError maps an engine's gRPC status to an HTTP error (wire/smg-grpc.md §7.3).
func grpcStatusError(st *status.Status) *openai.Error {
	e := &openai.Error{Message: "worker: " + st.Message(), Type: openai.TypeUpstream, Code: st.Code().String()}
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		e.Status, e.Type = http.StatusBadRequest, openai.TypeInvalidRequest
	case codes.ResourceExhausted:
		e.Status, e.Type = http.StatusTooManyRequests, openai.TypeRateLimit
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

// ErrMediaOverGRPC is the refusal of a request with media for a grpc:// worker: the engines' gRPC
// Generate takes token ids and preprocessed multimodal tensors (pixel values, grid sizes,
// placeholder ranges: wire/smg-grpc.md §3.3, whose raw-bytes field is reserved), which only the
// engine's own processor computes.
func ErrMediaOverGRPC() *openai.Error {
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: "messages", Code: "media_over_grpc",
		Message: "image, audio and video content parts cannot be sent to a grpc:// worker: its Generate takes preprocessed multimodal tensors, which only the engine's processor computes; serve this model over http://"}
}
