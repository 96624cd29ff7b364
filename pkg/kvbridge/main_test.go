package kvbridge

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test in the package leaks goroutines. pebbe/zmq4 starts no Go
// goroutines of its own (libzmq's I/O threads are native), so no ignore list is needed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
