//go:build reliability

package reliability

import "time"

// Full variant (`-tags reliability`, make reliability): longer flood, 5-minute soak.
const (
	floodDuration = 30 * time.Second
	soakDuration  = 5 * time.Minute
)
