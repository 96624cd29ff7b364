package testutil

import (
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
)

// Start is harness.Start for tests: the log goes to t.TempDir(), the process is stopped
// by t.Cleanup (in reverse start order, like every Cleanup), and when the test failed the tail
// of its log is printed. A process that exits with an error during the test is reported by Stop
// at cleanup as a test error, unless the test stopped or killed it itself.
func Start(t testing.TB, name, bin string, args ...string) *harness.Process {
	t.Helper()
	p, err := harness.Start(harness.Command{Name: name, Path: bin, Args: args}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exitedEarly, _ := p.Exited()
		err := p.Stop(harness.DefaultStopTimeout)
		if t.Failed() || (err != nil && !exitedEarly) {
			t.Logf("---- %s log tail (%s) ----\n%s", p.Name, p.LogPath, p.LogTail(4000))
		}
		if err != nil && !exitedEarly {
			t.Errorf("%v", err)
		}
	})
	return p
}

// FreePort is harness.FreeTCPPort for tests: it fails t when no port can be found.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := harness.FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreePorts is harness.FreeTCPPorts for tests.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ps, err := harness.FreeTCPPorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// FreePortBlock is harness.FreeTCPPortBlock for tests.
func FreePortBlock(t testing.TB, n int) int {
	t.Helper()
	p, err := harness.FreeTCPPortBlock(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
