//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
)

// msgSmokeMargin is how far cache_aware events' hit rate must be above round_robin's on the
// messages smoke run, and msgSmokeIdeal the share of its ideal it must reach. The shared
// system prompt and tools are most of every first turn, so round_robin already hits much;
// the margin is what routing each session to where it ran adds.
const (
	msgSmokeMargin = 0.04
	msgSmokeIdeal  = 0.9
)

// TestBenchSmokeMessages runs the bench's messages rows (issue 23) small: coding-agent
// sessions of 6 turns on Anthropic's /v1/messages (a 2000-token system prompt and five tools
// shared, a tool_result after every tool_use) on simulators scripted to call a tool every
// other generation, round_robin and cache_aware events with two gateway replicas behind
// nginx. It fails when a turn is lost (an error: a tool_result the conversion refuses, a
// stream cut) or when routing on the converted conversation stops paying: events must beat
// round_robin by msgSmokeMargin and reach msgSmokeIdeal of the ideal.
func TestBenchSmokeMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), smokeTimeout)
	defer cancel()
	dir := t.TempDir()
	built, err := harness.Build(ctx, dir, "tools/bench")
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(dir, "logs")
	bench, err := harness.Start(harness.Command{Name: "bench-messages", Path: built["tools/bench"], Args: []string{"bench",
		"-bin", filepath.Dir(bins.Gateway), "-tokenizer", tokenizerPath, "-model", testModel, "-logs", logs,
		"-sims", "3", "-runs", "1", "-seed", "1", "-configs", "", "-skew", "", "-chat-configs", "", "-responses-configs", "", "-scenarios", "",
		"-messages-configs", "round_robin,cache_aware/events", "-messages-replicas", "2", "-pd-configs", "", "-pd-chat-configs", "", "-overload=false",
		"-messages-requests", "180", "-messages-turns", "6", "-messages-rate", "5",
		"-time-scale", "0.25", "-progress", "never", "-out", filepath.Join(dir, "benchmarks.md"), "-png", filepath.Join(dir, "benchmarks.png")}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bench.Stop(harness.DefaultStopTimeout) })
	select {
	case <-bench.Done():
	case <-ctx.Done():
		t.Fatalf("bench still running after %v:\n%s", smokeTimeout, bench.LogTail(3000))
	}
	if _, err := bench.Exited(); err != nil {
		t.Fatalf("bench: %v\n%s", err, bench.LogTail(3000))
	}
	hit := map[string]float64{} // by policy
	for _, line := range strings.Split(bench.LogTail(1<<20), "\n") {
		if !strings.HasPrefix(line, "RESULT ") {
			continue
		}
		kv := resultFields(line)
		mustf(t, kv["errors"] == "0" && kv["requests"] == "180" && kv["workload"] == "messages" && kv["gateways"] == "2",
			"RESULT line %q: want 180 messages requests through 2 gateways, errors=0", line)
		h, err := strconv.ParseFloat(kv["hit_rate"], 64)
		mustf(t, err == nil, "RESULT line %q: hit_rate: %v", line, err)
		hit[kv["policy"]] = h
	}
	mustf(t, len(hit) == 2, "got RESULT lines for %v, want round_robin and cache_aware", hit)
	b, err := os.ReadFile(filepath.Join(logs, "messages-cache_aware-events-2gw-run0.json"))
	mustf(t, err == nil, "events row's report: %v", err)
	var rep struct {
		Ideal        *float64 `json:"ideal_hit_rate"`
		OutputTokens int      `json:"output_tokens"`
	}
	mustf(t, json.Unmarshal(b, &rep) == nil && rep.Ideal != nil && *rep.Ideal > 0, "events row's report has no ideal: %s", b)
	ev, rr := hit["cache_aware"], hit["round_robin"]
	t.Logf("messages, 2 gateways: round_robin %.3f, cache_aware events %.3f, ideal %.3f (%.2f × ideal)", rr, ev, *rep.Ideal, ev / *rep.Ideal)
	if ev < rr+msgSmokeMargin {
		t.Errorf("cache_aware events hit rate %.3f < round_robin's %.3f + %.2f: follow-ups no longer land where their conversation is cached", ev, rr, msgSmokeMargin)
	}
	if ev < msgSmokeIdeal**rep.Ideal {
		t.Errorf("cache_aware events hit rate %.3f < %.2f × the ideal %.3f", ev, msgSmokeIdeal, *rep.Ideal)
	}
}
