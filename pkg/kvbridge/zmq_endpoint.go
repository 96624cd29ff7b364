package kvbridge

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// rankEndpoint derives DP rank rank's endpoint from the configured (rank 0) one, as vLLM's
// publisher does (wire/vllm-zmq.md §7): tcp://host:P → tcp://host:(P+rank); inproc://name →
// inproc://name_dp<rank>; rank 0 is returned unchanged; ipc:// and other transports are rejected
// for rank > 0. An empty endpoint stays empty (no replay socket).
func rankEndpoint(endpoint string, rank int) (string, error) {
	if rank == 0 || endpoint == "" {
		return endpoint, nil
	}
	if rank < 0 {
		return "", fmt.Errorf("kvbridge: rank endpoint %q: negative rank %d", endpoint, rank)
	}
	switch {
	case strings.HasPrefix(endpoint, "tcp://"):
		host, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
		if err != nil {
			return "", fmt.Errorf("kvbridge: rank endpoint %q: %w", endpoint, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p <= 0 || p+rank > 65535 {
			return "", fmt.Errorf("kvbridge: rank endpoint %q: bad port %q for rank %d", endpoint, port, rank)
		}
		return "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+rank)), nil
	case strings.HasPrefix(endpoint, "inproc://"):
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	return "", fmt.Errorf("kvbridge: rank endpoint %q: only tcp:// and inproc:// endpoints can be offset by rank", endpoint)
}

// pubShouldBind reports whether a publisher's PUB binds (rather than connects to) endpoint:
// vLLM and SGLang bind when it contains "*" or "::", or starts with ipc:// or inproc://
// (wire/vllm-zmq.md §1).
func pubShouldBind(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// connectEndpoint turns a bind-style endpoint into one a client can connect to: a wildcard or
// unspecified host becomes 127.0.0.1 (as SMG's bridge does), so `tcp://*:5557` from an engine's
// config works as a subscriber address.
func connectEndpoint(endpoint string) string {
	for _, wild := range []string{"tcp://*:", "tcp://0.0.0.0:"} {
		if rest, ok := strings.CutPrefix(endpoint, wild); ok {
			return "tcp://127.0.0.1:" + rest
		}
	}
	return endpoint
}
