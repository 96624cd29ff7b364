package sim

import (
	"encoding/json"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
)

// The gRPC surface of the pair roles (pd.go; wire/pd.md §§5, 7.4): the transfer fields of
// each runtime's Generate as a pdLeg, and a role's failure as a gRPC status. The roles
// themselves, the side channel and the bootstrap server are the HTTP server's
// (GRPCConfig.Pairs): a vLLM prefill's GenerateComplete field 12 names the HTTP side channel,
// and an SGLang decode reads the room from the prefill's bootstrap server, as for HTTP legs.

// vllmLeg reads vLLM's GenerateRequest field 8, kv_transfer_params_json (nil when absent).
// Anything but a JSON object is refused, as the reference servicer does.
func vllmLeg(js *string) (*pdLeg, error) {
	if js == nil {
		return nil, nil
	}
	var kv kvParams
	if err := json.Unmarshal([]byte(*js), &kv); err != nil || len(*js) == 0 || firstByte(*js) != '{' {
		return nil, status.Error(codes.InvalidArgument, "kv_transfer_params_json must be a JSON object")
	}
	return &pdLeg{kv: &kv}, nil
}

// firstByte returns the first non-space byte of s (0 when none).
func firstByte(s string) byte {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return s[i]
		}
	}
	return 0
}

// sglangLeg reads SGLang's disaggregated_params (field 10; nil when absent). Its room is an
// int32: a negative one is refused.
func sglangLeg(p *sglang.DisaggregatedParams) (*pdLeg, error) {
	if p == nil {
		return nil, nil
	}
	if p.GetBootstrapRoom() < 0 {
		return nil, status.Error(codes.InvalidArgument, "bootstrap_room "+strconv.Itoa(int(p.GetBootstrapRoom()))+" is negative")
	}
	room := uint64(p.GetBootstrapRoom())
	return &pdLeg{room: &room, host: p.GetBootstrapHost(), port: int(p.GetBootstrapPort())}, nil
}

// tokenspeedLeg reads TokenSpeed's kv_bootstrap_info (field 11; nil when absent).
func tokenspeedLeg(p *tokenspeed.KvBootstrapInfo) (*pdLeg, error) {
	if p == nil {
		return nil, nil
	}
	if p.GetBootstrapRoom() < 0 {
		return nil, status.Error(codes.InvalidArgument, "bootstrap_room "+strconv.FormatInt(p.GetBootstrapRoom(), 10)+" is negative")
	}
	room := uint64(p.GetBootstrapRoom())
	return &pdLeg{room: &room, host: p.GetBootstrapHost(), port: int(p.GetBootstrapPort())}, nil
}

// grpcStatusOf is a pair role's failure as a gRPC status. A failed transfer is INTERNAL (the
// engine ended the request with an error), never UNAVAILABLE, which tells a gateway the
// engine itself is down.
func grpcStatusOf(e *pdError) error {
	code := codes.Internal
	switch e.kind {
	case pdBadInput:
		code = codes.InvalidArgument
	case pdBusy:
		code = codes.ResourceExhausted
	case pdCancelled:
		code = codes.Canceled
	}
	return status.Error(code, e.msg)
}
