package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// portsMu guards handedOut, the ports this process has already returned, so that two callers
// in one test binary never get the same port even when the kernel would reuse it.
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// Test ports are drawn from [portLow, portHigh): below Linux's default ephemeral range
// (32768-60999), so the kernel never hands one of them out as the source port of an outgoing
// connection, and a port picked here cannot be taken by another test's client socket between
// the check and the caller's bind. Asking the kernel for port 0 instead returns an ephemeral
// port, which busy parallel test runs reuse often enough to make tests flaky.
const (
	portLow  = 20000
	portHigh = 32700
)

// FreeTCPPortBlock returns the first of n consecutive TCP ports on 127.0.0.1 that were all
// free a moment ago and have not been returned before by this process (callers that need
// rank r on port+r, as ZMQ data-parallel endpoints do, ask for a block). The ports are closed
// again before returning, so another program may still take one before the caller binds it;
// the caller then sees a clear bind error.
func FreeTCPPortBlock(n int) (int, error) {
	if n < 1 || n > 64 {
		return 0, fmt.Errorf("harness: free port block: n=%d out of range", n)
	}
	span := portHigh - portLow - n
	for range 256 {
		base := portLow + rand.IntN(span)
		if blockFree(base, n) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("harness: free port block: no %d free consecutive ports after 256 tries", n)
}

// blockFree claims base..base+n-1 for this process when none was handed out before and all
// can be bound right now.
func blockFree(base, n int) bool {
	portsMu.Lock()
	defer portsMu.Unlock()
	for p := base; p < base+n; p++ {
		if handedOut[p] {
			return false
		}
	}
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	for p := base; p < base+n; p++ {
		handedOut[p] = true
	}
	return true
}

// FreeTCPPort returns one port as FreeTCPPortBlock does.
func FreeTCPPort() (int, error) { return FreeTCPPortBlock(1) }

// FreeTCPPorts returns n distinct ports as FreeTCPPort does.
func FreeTCPPorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		p, err := FreeTCPPort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}
