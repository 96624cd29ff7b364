package testutil

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

// portsMu guards handedOut, the ports this process has already returned, so that two callers
// in one test binary never get the same port even when the kernel would reuse it.
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// FreeTCPPort returns a TCP port on 127.0.0.1 that was free a moment ago and has not been
// returned before by this process. The port is closed again before returning, so another
// program may in principle take it before the caller binds it; on loopback in a test that race
// is rare enough, and the caller sees a clear bind error when it happens.
func FreeTCPPort() (int, error) {
	for range 64 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("testutil: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("testutil: free port: %w", err)
		}
		portsMu.Lock()
		dup := handedOut[port]
		handedOut[port] = true
		portsMu.Unlock()
		if !dup {
			return port, nil
		}
	}
	return 0, fmt.Errorf("testutil: free port: no unused port after 64 tries")
}

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

// FreePort is FreeTCPPort for tests: it fails t when no port can be found.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreePorts is FreeTCPPorts for tests.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ps, err := FreeTCPPorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
