//go:build reliability

package reliability

import "time"

// Full variant (`-tags reliability`, make reliability): longer flood, 5-minute soak.
const (
	floodDuration = 30 * time.Second
	soakDuration  = 5 * time.Minute
)

// The fleet-scale fault scenario in the full variant: 512 event-fed engines (1024 is
// tools/fleetpub's; on a shared 2-core machine its publisher cannot hold the rate).
const (
	scaleFaultBlocks   = 12500
	scaleFaultHistory  = 512
	scaleFaultWorkers  = 512
	scaleFaultSteady   = 10 * time.Second
	scaleFaultDuration = 20 * time.Second
)
