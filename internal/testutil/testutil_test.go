package testutil

import (
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
