//go:build !reliability

package reliability

import "time"

// Fast variant (`-tags e2e`, part of make test): short flood and soak.
const (
	floodDuration = 6 * time.Second
	soakDuration  = 20 * time.Second
)

// The fleet-scale fault scenario in the fast variant: a small fleet, short phases.
const (
	scaleFaultBlocks   = 2000
	scaleFaultHistory  = 128
	scaleFaultWorkers  = 64
	scaleFaultSteady   = 4 * time.Second
	scaleFaultDuration = 12 * time.Second
)
