//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/internal/harness"
)

const (
	// testModel is the model name the simulators serve and the gateways expose.
	testModel = "qwen3-sim"
	// startTimeout bounds the start of each process (tokenizer loading on a shared machine).
	startTimeout = 60 * time.Second
	// defaultTestTimeout bounds single requests and polls.
	defaultTestTimeout = 30 * time.Second
	// survivorTimeout bounds TestMain's wait for the suite's processes to be gone.
	survivorTimeout = 10 * time.Second
)

var (
	// bins are the binaries built by TestMain.
	bins harness.Binaries
	// tokenizerPath is the tokenizer.json shared by simulators, gateways and loadgen.
	tokenizerPath string
	// repoRoot is the module root.
	repoRoot string
	// npmErr is why the openai npm client could not be installed, if it could not.
	npmErr error
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if repoRoot, err = harness.RepoRoot(); err != nil {
		return 1, err
	}
	tmp, err := os.MkdirTemp("", "kvgate-e2e-bin")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if bins, err = harness.BuildBinaries(ctx, tmp, "gateway", "simworker", "loadgen", "kvbridge"); err != nil {
		return 1, err
	}
	if tokenizerPath, err = harness.Tokenizer(ctx); err != nil {
		return 1, err
	}
	if out, err := harness.CombinedOutput(ctx, harness.Command{Path: filepath.Join(repoRoot, "tools", "e2e-npm.sh")}); err != nil {
		npmErr = fmt.Errorf("tools/e2e-npm.sh: %w\n%s", err, out)
	}
	code := m.Run()
	// Issue 17: no process the suite started (simulators, gateways, kvbridge, nginx and its
	// workers, Prometheus, loadgen, tools/bench and its fleet) may outlive it, whatever the
	// tests' result. The deadline covers the kernel tearing down processes killed at cleanup.
	sctx, scancel := context.WithTimeout(context.Background(), survivorTimeout)
	defer scancel()
	if err := harness.CheckNoSurvivors(sctx); err != nil {
		return 1, err
	}
	if code == 0 {
		// Every process is reaped by its test's cleanup, so no waiter goroutine may remain.
		if err := goleak.Find(); err != nil {
			return 1, fmt.Errorf("goroutine leak: %w", err)
		}
	}
	return code, nil
}

// newLauncher returns a launcher logging into t's temp dir.
func newLauncher(t *testing.T) *harness.Launcher {
	return &harness.Launcher{Bin: bins, Tokenizer: tokenizerPath, Model: testModel, LogDir: t.TempDir(), StartTimeout: startTimeout}
}

// stopAtCleanup stops p when the test ends and prints its log tail when the test failed.
func stopAtCleanup(t *testing.T, p *harness.Process) {
	t.Cleanup(func() {
		// A process must exit cleanly on SIGTERM (or have been killed by the test itself).
		if err := p.Stop(harness.DefaultStopTimeout); err != nil {
			t.Errorf("%v", err)
		}
		if t.Failed() {
			t.Logf("---- %s log tail (%s) ----\n%s", p.Name, p.LogPath, p.LogTail(3000))
		}
	})
}

func startSim(t *testing.T, l *harness.Launcher, o harness.SimOptions) *harness.Sim {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := l.StartSim(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, s.Process)
	return s
}

func startGateway(t *testing.T, l *harness.Launcher, o harness.GatewayOptions) *harness.Gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	g, err := l.StartGateway(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, g.Process)
	return g
}
