//go:build race

package policy

// raceEnabled: the race detector makes sync.Pool drop a share of what is put back, so cost's
// pooled scratch space is allocated again now and then; its zero-allocation check runs in the
// build without -race (make test runs the Alloc tests that way too).
const raceEnabled = true
