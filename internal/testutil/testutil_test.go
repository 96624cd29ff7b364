package testutil

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/internal/harness"
)

// helperEnv makes the test binary, re-executed as a child, wait for SIGTERM instead of testing.
const helperEnv = "TESTUTIL_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestStartStopsAtCleanup: a process started in a subtest has exited once the subtest returns.
func TestStartStopsAtCleanup(t *testing.T) {
	t.Setenv(helperEnv, "1")
	var p *harness.Process
	if !t.Run("sub", func(t *testing.T) { p = Start(t, "helper", os.Args[0], "-test.run=^$") }) {
		t.Fatal("the subtest failed: Stop at cleanup reported an error")
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("process still running after the subtest's cleanup")
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestWaitFor(t *testing.T) {
	t.Run("holds after a few polls", func(t *testing.T) {
		calls := 0
		WaitFor(t, "the third poll", func() bool { calls++; return calls == 3 })
		if calls != 3 {
			t.Errorf("cond called %d times, want 3", calls)
		}
	})
	t.Run("never holds", func(t *testing.T) {
		r := &fatalRecorder{TB: t}
		start := time.Now()
		waitFor(r, 200*time.Millisecond, "nothing", func() bool { return false })
		if want := "timed out waiting for nothing"; r.msg != want {
			t.Errorf("got Fatalf %q, want %q", r.msg, want)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Errorf("gave up after %v, want the whole 200ms", d)
		}
	})
}
