//go:build !reliability

package reliability

import "time"

// Fast variant (`-tags e2e`, part of make test): short flood and soak.
const (
	floodDuration = 6 * time.Second
	soakDuration  = 20 * time.Second
)
