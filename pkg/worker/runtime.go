package worker

import (
	"fmt"
	"strings"
)

// Runtime names the engine service a grpc:// worker speaks (wire/smg-grpc.md §1.3): the
// services are wire-compatible in shape but differ in package, field numbers and defaults, so
// every package that talks gRPC to an engine (pkg/engine's clients, pkg/kvbridge's
// SubscribeKvEvents client and server, pkg/sim's servers) keys its per-runtime code by this one
// type. The zero value "" means "not given" (detect it).
type Runtime string

// The runtimes, in the order SMG probes them when a worker's runtime is not given.
const (
	RuntimeVLLM       Runtime = "vllm"       // vllm.grpc.engine.VllmEngine
	RuntimeSGLang     Runtime = "sglang"     // sglang.grpc.scheduler.SglangScheduler
	RuntimeTokenSpeed Runtime = "tokenspeed" // tokenspeed.grpc.scheduler.TokenSpeedScheduler
)

// runtimes is the read-only table of known runtimes and their facts, in probe order.
var runtimes = []struct {
	r       Runtime
	service string
	// cumulative: Generate chunks carry running totals of completion_tokens rather than
	// per-chunk counts (wire/smg-grpc.md §7.2).
	cumulative bool
}{
	{RuntimeVLLM, "vllm.grpc.engine.VllmEngine", false},
	{RuntimeSGLang, "sglang.grpc.scheduler.SglangScheduler", true},
	{RuntimeTokenSpeed, "tokenspeed.grpc.scheduler.TokenSpeedScheduler", true},
}

// Runtimes returns the known runtimes in probe order; the caller owns the slice.
func Runtimes() []Runtime {
	out := make([]Runtime, len(runtimes))
	for i, e := range runtimes {
		out[i] = e.r
	}
	return out
}

// ParseRuntime returns the runtime named s (case-insensitive); "" stays "" (not given).
func ParseRuntime(s string) (Runtime, error) {
	r := Runtime(strings.ToLower(strings.TrimSpace(s)))
	if r == "" || r.Known() {
		return r, nil
	}
	return "", fmt.Errorf("runtime %q is not vllm, sglang or tokenspeed: %w", s, ErrInvalidSpec)
}

// Known reports whether r is one of the runtimes.
func (r Runtime) Known() bool {
	for _, e := range runtimes {
		if e.r == r {
			return true
		}
	}
	return false
}

// String returns the runtime's name.
func (r Runtime) String() string { return string(r) }

// Service returns the fully qualified gRPC service name, or "" for an unknown runtime.
func (r Runtime) Service() string {
	for _, e := range runtimes {
		if e.r == r {
			return e.service
		}
	}
	return ""
}

// CumulativeTokens reports whether the runtime's Generate chunks carry running totals of
// completion_tokens (SGLang, TokenSpeed) rather than per-chunk counts (vLLM).
func (r Runtime) CumulativeTokens() bool {
	for _, e := range runtimes {
		if e.r == r {
			return e.cumulative
		}
	}
	return false
}

// Set parses s into r, so a *Runtime is a flag.Value.
func (r *Runtime) Set(s string) error {
	v, err := ParseRuntime(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}
