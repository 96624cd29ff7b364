//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// overloadSmokeTimeout bounds TestBenchSmokeOverload: four rows of 10 simulated seconds of
// arrivals at time scale 0.5, each on a fresh fleet.
const overloadSmokeTimeout = 3 * time.Minute

// TestBenchSmokeOverload runs the bench's overload rows (issue 27) short: two classes at 1.5×
// the fleet's capacity without the admission queue, with it and with --queue-reserve 1, and the
// interactive class alone. It fails when a request is lost (an error or a refusal: the queue's
// bound and deadline are past what the run reaches) or when the queue stops protecting the
// interactive band: its TTFT p95 with the reserve must stay under a third of the no-queue one
// (there it waits behind the batch backlog in the engines' FCFS queues).
func TestBenchSmokeOverload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), overloadSmokeTimeout)
	defer cancel()
	dir := t.TempDir()
	built, err := harness.Build(ctx, dir, "tools/bench")
	if err != nil {
		t.Fatal(err)
	}
	logs, md := filepath.Join(dir, "logs"), filepath.Join(dir, "benchmarks.md")
	bench, err := harness.Start(harness.Command{Name: "bench-overload", Path: built["tools/bench"], Args: []string{"bench",
		"-bin", filepath.Dir(bins.Gateway), "-tokenizer", tokenizerPath, "-model", testModel, "-logs", logs,
		"-sims", "3", "-runs", "1", "-seed", "1", "-configs", "", "-skew", "", "-chat-configs", "", "-responses-configs", "", "-scenarios", "",
		"-messages-configs", "", "-pd-configs", "", "-pd-chat-configs", "",
		"-overload-arrival-time", "10s", "-time-scale", "0.5", "-progress", "never", "-out", md, "-png", filepath.Join(dir, "benchmarks.png")}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bench.Stop(harness.DefaultStopTimeout) })
	select {
	case <-bench.Done():
	case <-ctx.Done():
		t.Fatalf("bench still running after %v:\n%s", overloadSmokeTimeout, bench.LogTail(3000))
	}
	if _, err := bench.Exited(); err != nil {
		t.Fatalf("bench: %v\n%s", err, bench.LogTail(3000))
	}
	type class struct {
		Requests, Completed, Errors int
		Refused429                  int `json:"refused_429"`
		Refused503                  int `json:"refused_503"`
		TTFT                        struct {
			P95 float64 `json:"p95"`
		} `json:"ttft_ms"`
	}
	p95 := map[string]float64{}
	for _, v := range []string{"unloaded", "", "queue", "queue-reserve1"} {
		tag := "overload-cache_aware-events"
		if v != "" {
			tag += "-" + v
		}
		b, err := os.ReadFile(filepath.Join(logs, tag+"-1gw-run0.json"))
		mustf(t, err == nil, "row %q: report: %v", v, err)
		var rep struct {
			Classes map[string]class `json:"classes"`
		}
		mustf(t, json.Unmarshal(b, &rep) == nil && rep.Classes["interactive"].Requests > 0, "row %q: no interactive class in %s", v, b)
		mustf(t, (v == "unloaded") == (rep.Classes["batch"].Requests == 0), "row %q: batch requests %d", v, rep.Classes["batch"].Requests)
		for name, c := range rep.Classes {
			if c.Completed != c.Requests || c.Errors+c.Refused429+c.Refused503 != 0 {
				t.Errorf("row %q, %s: %d of %d completed, %d errors, %d refused 429, %d refused 503: want every request answered", v, name, c.Completed, c.Requests, c.Errors, c.Refused429, c.Refused503)
			}
		}
		p95[v] = rep.Classes["interactive"].TTFT.P95
	}
	t.Logf("interactive TTFT p95 (simulated ms): unloaded %.0f, no queue %.0f, queue %.0f, queue with a reserve of 1 %.0f", p95["unloaded"], p95[""], p95["queue"], p95["queue-reserve1"])
	if p95["queue-reserve1"] >= p95[""]/3 {
		t.Errorf("interactive TTFT p95 with the queue and a reserve %.0f ms, want under a third of the no-queue %.0f ms", p95["queue-reserve1"], p95[""])
	}
	b, err := os.ReadFile(md)
	mustf(t, err == nil, "report: %v", err)
	for _, want := range []string{"### Overload: two classes at 1.5× the fleet's capacity", "| queue, --queue-reserve 1 | 1 |", "Against issue 27's targets"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
