package testutil

import (
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// WaitTimeout is how long WaitFor waits for its condition: the 10 s defaultTestTimeout of the
// packages whose own waitFor it replaces.
const WaitTimeout = 10 * time.Second

// WaitFor is harness.Eventually for tests: it polls cond until it holds, and fails t with
// "timed out waiting for <what>" when WaitTimeout passes first. It is for conditions with no
// event to wait on. cond runs on the calling goroutine, so it may call t.Fatal.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitFor(t, WaitTimeout, what, cond)
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !harness.Eventually(timeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}
