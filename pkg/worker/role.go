package worker

import (
	"fmt"
	"strings"
)

// Role is the part a worker plays in prefill/decode disaggregation (wire/pd.md, DESIGN.md §15).
// The zero value "" is RoleBoth.
type Role string

// The roles. A model whose pool has prefill and decode workers runs disaggregated; a both
// worker may serve either leg or a whole request.
const (
	RoleBoth    Role = ""
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// DefaultBootstrapPort is SGLang's --disaggregation-bootstrap-port default (wire/pd.md §4.1),
// and vLLM's VLLM_MOONCAKE_BOOTSTRAP_PORT (§3): the bootstrap_port of a prefill worker whose spec gives none.
const DefaultBootstrapPort = 8998

// ParseRole returns the role named s (case-insensitive); "" and "both" are RoleBoth.
func ParseRole(s string) (Role, error) {
	switch r := strings.ToLower(strings.TrimSpace(s)); r {
	case "", "both":
		return RoleBoth, nil
	case string(RolePrefill), string(RoleDecode):
		return Role(r), nil
	}
	return "", fmt.Errorf("role %q is not prefill, decode or both: %w", s, ErrInvalidSpec)
}

// String returns the role's name, "both" for RoleBoth.
func (r Role) String() string {
	if r == RoleBoth {
		return "both"
	}
	return string(r)
}

// Prefills reports whether a worker of role r may serve the prefill leg of a pair.
func (r Role) Prefills() bool { return r != RoleDecode }

// Decodes reports whether a worker of role r may serve the decode leg of a pair or a whole
// request.
func (r Role) Decodes() bool { return r != RolePrefill }
