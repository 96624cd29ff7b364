//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestBenchSmoke runs `make bench`'s driver (tools/bench bench) at a tiny scale: two simulators,
// two gateway replicas behind a real nginx, the three compared configurations. It checks the
// RESULT lines and the report, and that nothing the bench started outlives it (issue 17): the
// bench itself exits non-zero when one of its processes survives, which is the only check that
// can recognise its nginx workers, and this test looks for the rest (its simulators, gateways
// and loadgen carry the bench's run marker) after the bench exited.
func TestBenchSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	built, err := harness.Build(ctx, dir, "tools/bench")
	if err != nil {
		t.Fatal(err)
	}
	md, png := filepath.Join(dir, "benchmarks.md"), filepath.Join(dir, "benchmarks.png")
	bench, err := harness.Start(harness.Command{Name: "bench", Path: built["tools/bench"], Args: []string{"bench",
		"-bin", filepath.Dir(bins.Gateway), "-tokenizer", tokenizerPath, "-model", testModel, "-logs", filepath.Join(dir, "logs"),
		"-sims", "2", "-replicas", "2", "-num-requests", "12", "-num-prefixes", "3", "-prefix-tokens", "64",
		"-suffix-tokens", "8", "-output-tokens", "4", "-rate", "40", "-time-scale", "0.05", "-progress", "never",
		"-out", md, "-png", png}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bench.Stop(harness.DefaultStopTimeout) }) // the checks below report its failures
	select {
	case <-bench.Done():
	case <-ctx.Done():
		t.Fatalf("bench still running after 4 minutes:\n%s", bench.LogTail(3000))
	}
	if _, err := bench.Exited(); err != nil {
		t.Fatalf("bench: %v\n%s", err, bench.LogTail(3000))
	}
	sctx, scancel := context.WithTimeout(context.Background(), survivorTimeout)
	defer scancel()
	if err := bench.CheckNoSurvivors(sctx); err != nil {
		t.Error(err)
	}

	log := bench.LogTail(1 << 20)
	results := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "RESULT ") {
			results++
			mustf(t, strings.Contains(line, "gateways=2"), "RESULT line %q: want gateways=2", line)
		}
	}
	mustf(t, results == 3, "got %d RESULT lines, want one per configuration (3):\n%s", results, log)
	report, err := os.ReadFile(md)
	mustf(t, err == nil && strings.Contains(string(report), "| cache_aware | events | 2 |"), "report %s: %v\n%s", md, err, report)
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("plot %s: %v, want a non-empty PNG", png, err)
	}
}
