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
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

const (
	// smokeTimeout bounds the bench smoke run; make test's budget for it is 60 s.
	smokeTimeout = 60 * time.Second
	// eventsMargin is how far the events row's hit rate must be above the approximate tree's.
	// Without it the check could not fail: this run lasts a few seconds of wall time, less than
	// the pending overlay's TTL (5 s), so each replica's overlay alone acts as a tree of its own
	// decisions, and with the event index broken the events row still scored 0.477 against
	// the tree's 0.444 (it scores about 0.68 against 0.44 when it works).
	eventsMargin = 0.10
)

// TestBenchSmoke runs `make bench`'s driver (tools/bench bench) on the demo-size fleet (3
// simulators with 2500-block caches, 90 prefixes × 1000 tokens, 360 requests: DESIGN §9 at 1/7
// scale) with two gateway replicas behind a real nginx, the three compared configurations. It
// fails when the project's core claim regresses: event-driven cache_aware must beat the
// approximate tree's hit rate (each replica's tree sees half the traffic) by eventsMargin and
// reach at least twice round-robin's. It also checks the report, and that nothing the bench started outlives
// it (issue 17): the bench itself exits non-zero when one of its processes survives, which is
// the only check that can recognise its nginx workers, and this test looks for the rest (its
// simulators, gateways and loadgen carry the bench's run marker) after the bench exited.
func TestBenchSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), smokeTimeout)
	defer cancel()
	start := time.Now()
	dir := t.TempDir()
	built, err := harness.Build(ctx, dir, "tools/bench")
	if err != nil {
		t.Fatal(err)
	}
	md, png := filepath.Join(dir, "benchmarks.md"), filepath.Join(dir, "benchmarks.png")
	bench, err := harness.Start(harness.Command{Name: "bench", Path: built["tools/bench"], Args: []string{"bench",
		"-bin", filepath.Dir(bins.Gateway), "-tokenizer", tokenizerPath, "-model", testModel, "-logs", filepath.Join(dir, "logs"),
		"-sims", "3", "-sim-args", "--num-blocks 2500", "-replicas", "2", "-runs", "1", "-scenarios", "", // TestBenchSmokeLate runs a scenario
		"-configs", "round_robin,cache_aware/approx,cache_aware/events", "-skew", "", "-chat-configs", "", "-responses-configs", "", // the uniform claims only; TestChatWorkers, TestBenchSmokeResponses cover the others
		"-num-requests", "360", "-num-prefixes", "90", "-prefix-tokens", "1000", "-suffix-tokens", "50", "-output-tokens", "32",
		"-rate", "40", "-time-scale", "0.25", "-progress", "never", "-overload=false", "-out", md, "-png", png,
		"-messages-configs", "", "-pd-configs", "", "-pd-chat-configs", ""}}, dir) // TestBenchSmokePD runs the P/D rows
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bench.Stop(harness.DefaultStopTimeout) }) // the checks below report its failures
	select {
	case <-bench.Done():
	case <-ctx.Done():
		t.Fatalf("bench still running after %v:\n%s", smokeTimeout, bench.LogTail(3000))
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
	hit := map[string]float64{} // by index: none (round_robin), approx, events
	for _, line := range strings.Split(log, "\n") {
		if !strings.HasPrefix(line, "RESULT ") {
			continue
		}
		kv := resultFields(line)
		mustf(t, kv["gateways"] == "2" && kv["errors"] == "0", "RESULT line %q: want gateways=2 errors=0", line)
		h, err := strconv.ParseFloat(kv["hit_rate"], 64)
		mustf(t, err == nil, "RESULT line %q: hit_rate: %v", line, err)
		hit[kv["index"]] = h
	}
	mustf(t, len(hit) == 3, "got RESULT lines for %v, want one per configuration (none, approx, events):\n%s", hit, log)
	t.Logf("hit rates with 2 gateways: round_robin %.3f, cache_aware approx %.3f, cache_aware events %.3f (bench took %v)",
		hit["none"], hit["approx"], hit["events"], time.Since(start).Round(time.Second))
	if hit["events"] < hit["approx"]+eventsMargin {
		t.Errorf("cache_aware events hit rate %.3f < approximate tree's %.3f + %.2f with 2 gateways: the event index no longer beats the tree", hit["events"], hit["approx"], eventsMargin)
	}
	if hit["events"] < 2*hit["none"] {
		t.Errorf("cache_aware events hit rate %.3f < 2 × round_robin's %.3f: the core claim regressed", hit["events"], hit["none"])
	}
	report, err := os.ReadFile(md)
	mustf(t, err == nil && strings.Contains(string(report), "| cache_aware | events | 2 |"), "report %s: %v\n%s", md, err, report)
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("plot %s: %v, want a non-empty PNG", png, err)
	}
}

// resultFields parses a RESULT line's key=value fields.
func resultFields(line string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(strings.TrimPrefix(line, "RESULT ")) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// lateSmokeBound is the share of the clean run's hit rate the late scenario must keep at the
// smoke size. Measured here (two runs of each, seed 1): 0.91 and 0.93 of clean with this
// gateway; 0.86 and 0.88 with the gateway before issue 21 (SMG's imbalance guard first, every
// failed check forgetting the cache). The full bench's target, 0.95, is for its larger run,
// where the join is a smaller part of the load.
const lateSmokeBound = 0.89

// TestBenchSmokeLate runs the bench's late scenario at half the size of DESIGN §9 (300
// prefixes, 900 requests, at time scale 0.25) beside its clean row (cache_aware events, one
// gateway, three simulators, the last listed lateSmokeAfter into the load) and fails when the
// join costs the fleet more than lateSmokeBound of the clean hit rate (issue 21).
func TestBenchSmokeLate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), smokeTimeout)
	defer cancel()
	dir := t.TempDir()
	built, err := harness.Build(ctx, dir, "tools/bench")
	if err != nil {
		t.Fatal(err)
	}
	bench, err := harness.Start(harness.Command{Name: "bench-late", Path: built["tools/bench"], Args: []string{"bench",
		"-bin", filepath.Dir(bins.Gateway), "-tokenizer", tokenizerPath, "-model", testModel, "-logs", filepath.Join(dir, "logs"),
		"-sims", "3", "-replicas", "1", "-nginx=false", "-runs", "1", "-seed", "1",
		"-configs", "cache_aware/events", "-skew", "", "-chat-configs", "", "-responses-configs", "", "-scenarios", "late", "-scenario-configs", "cache_aware/events", "-messages-configs", "", "-pd-configs", "", "-pd-chat-configs", "",
		"-late-after", lateSmokeAfter.String(),
		"-num-requests", "900", "-num-prefixes", "300", "-prefix-tokens", "1000", "-suffix-tokens", "50", "-output-tokens", "64",
		"-rate", "30", "-time-scale", "0.25", "-progress", "never", "-overload=false", "-out", filepath.Join(dir, "benchmarks.md"), "-png", filepath.Join(dir, "benchmarks.png")}}, dir)
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
	hit := map[string]float64{} // by scenario: "" (clean), late
	for _, line := range strings.Split(bench.LogTail(1<<20), "\n") {
		if !strings.HasPrefix(line, "RESULT ") {
			continue
		}
		kv := resultFields(line)
		mustf(t, kv["errors"] == "0", "RESULT line %q: want errors=0", line)
		h, err := strconv.ParseFloat(kv["hit_rate"], 64)
		mustf(t, err == nil, "RESULT line %q: hit_rate: %v", line, err)
		hit[kv["scenario"]] = h
	}
	clean, late := hit[""], hit["late"]
	mustf(t, len(hit) == 2 && clean > 0, "got RESULT lines for %v, want a clean and a late one", hit)
	t.Logf("cache_aware events, 1 gateway: clean hit %.3f, late %.3f (%.2f × clean)", clean, late, late/clean)
	if late < lateSmokeBound*clean {
		t.Errorf("a worker joining the loaded fleet cost the hit rate: late %.3f < %.2f × clean %.3f", late, lateSmokeBound, clean)
	}
}

// lateSmokeAfter is when the last simulator joins in TestBenchSmokeLate: a third into its
// load (900 requests at 30 per simulated second, at time scale 0.25: 7.5 s of wall time).
const lateSmokeAfter = 2500 * time.Millisecond

// respSmokeMargin is how far cache_aware events' hit rate must be above round_robin's on the
// responses smoke run (measured at 4 gateways, 240 requests: 0.832 against 0.694; with one
// gateway 0.828 against 0.698), and respSmokeIdeal the share of its ideal it must reach (0.94
// there).
const (
	respSmokeMargin = 0.07
	respSmokeIdeal  = 0.85
)

// TestBenchSmokeResponses runs the bench's responses rows (issue 22) small: agent sessions of
// 6 turns by previous_response_id on simulators scripted to call a tool every other
// generation, round_robin and cache_aware events with two gateway replicas behind nginx on the
// Redis store the bench starts (so every other follow-up reaches the replica that did not
// serve its previous turn). It fails when a turn is lost (an error: a follow-up whose chain the
// other replica could not find is a 404) or when routing on the expanded chain stops paying:
// events must beat round_robin by respSmokeMargin and reach respSmokeIdeal of the ideal.
func TestBenchSmokeResponses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), smokeTimeout)
	defer cancel()
	dir := t.TempDir()
	built, err := harness.Build(ctx, dir, "tools/bench")
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(dir, "logs")
	bench, err := harness.Start(harness.Command{Name: "bench-responses", Path: built["tools/bench"], Args: []string{"bench",
		"-bin", filepath.Dir(bins.Gateway), "-tokenizer", tokenizerPath, "-model", testModel, "-logs", logs,
		"-sims", "3", "-runs", "1", "-seed", "1", "-configs", "", "-skew", "", "-chat-configs", "", "-scenarios", "",
		"-responses-configs", "round_robin,cache_aware/events", "-responses-replicas", "2", "-messages-configs", "", "-pd-configs", "", "-pd-chat-configs", "",
		"-responses-requests", "180", "-responses-turns", "6", "-responses-rate", "5",
		"-time-scale", "0.25", "-progress", "never", "-overload=false", "-out", filepath.Join(dir, "benchmarks.md"), "-png", filepath.Join(dir, "benchmarks.png")}}, dir)
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
		mustf(t, kv["errors"] == "0" && kv["requests"] == "180" && kv["workload"] == "responses" && kv["gateways"] == "2",
			"RESULT line %q: want 180 responses requests through 2 gateways, errors=0", line)
		h, err := strconv.ParseFloat(kv["hit_rate"], 64)
		mustf(t, err == nil, "RESULT line %q: hit_rate: %v", line, err)
		hit[kv["policy"]] = h
	}
	mustf(t, len(hit) == 2, "got RESULT lines for %v, want round_robin and cache_aware", hit)
	b, err := os.ReadFile(filepath.Join(logs, "responses-cache_aware-events-2gw-run0.json"))
	mustf(t, err == nil, "events row's report: %v", err)
	var rep struct {
		Ideal *float64 `json:"ideal_hit_rate"`
	}
	mustf(t, json.Unmarshal(b, &rep) == nil && rep.Ideal != nil && *rep.Ideal > 0, "events row's report has no ideal: %s", b)
	ev, rr := hit["cache_aware"], hit["round_robin"]
	t.Logf("responses, 2 gateways on Redis: round_robin %.3f, cache_aware events %.3f, ideal %.3f (%.2f × ideal)", rr, ev, *rep.Ideal, ev / *rep.Ideal)
	if ev < rr+respSmokeMargin {
		t.Errorf("cache_aware events hit rate %.3f < round_robin's %.3f + %.2f: follow-ups no longer land where their chain is cached", ev, rr, respSmokeMargin)
	}
	if ev < respSmokeIdeal**rep.Ideal {
		t.Errorf("cache_aware events hit rate %.3f < %.2f × the ideal %.3f", ev, respSmokeIdeal, *rep.Ideal)
	}
}

// TestBenchSmokePD runs the bench's prefill/decode rows small (80 long-prompt requests and 40
// multi-turn ones with 64-token answers, one run each, at time scale 0.5): 4 aggregated
// simulators against 2 prefill + 2 decode. Every
// request is answered; the pairs' decode workers, which never compute a prompt, have a lower
// inter-token p99 than the aggregated workers, whose decode steps carry the 2k-token prefills
// (the stall the simulator's chunked-prefill model makes); conditional disaggregation runs some
// multi-turn requests whole (prefill legs skipped), and the report has the P/D section.
func TestBenchSmokePD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), smokeTimeout)
	defer cancel()
	dir := t.TempDir()
	built, err := harness.Build(ctx, dir, "tools/bench")
	if err != nil {
		t.Fatal(err)
	}
	logs, md := filepath.Join(dir, "logs"), filepath.Join(dir, "benchmarks.md")
	bench, err := harness.Start(harness.Command{Name: "bench-pd", Path: built["tools/bench"], Args: []string{"bench",
		"-bin", filepath.Dir(bins.Gateway), "-tokenizer", tokenizerPath, "-model", testModel, "-logs", logs, "-runs", "1", "-seed", "1",
		"-configs", "", "-skew", "", "-chat-configs", "", "-responses-configs", "", "-scenarios", "", "-nginx=false",
		"-messages-configs", "", "-overload=false", "-pd-configs", "agg,pd", "-pd-chat-configs", "pd", "-pd-requests", "80", "-pd-output-tokens", "64",
		"-pd-chat-requests", "40", "-pd-chat-output-tokens", "64", "-pd-time-scale", "0.5",
		"-progress", "never", "-out", md, "-png", filepath.Join(dir, "benchmarks.png")}}, dir)
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
	itl99 := map[string]float64{}
	for _, tag := range []string{"pd-long-cache_aware-events-agg-1gw-run0", "pd-long-cache_aware-events-pd-1gw-run0", "pd-chat-cache_aware-events-pd-1gw-run0"} {
		b, err := os.ReadFile(filepath.Join(logs, tag+".json"))
		mustf(t, err == nil, "%s: %v", tag, err)
		var rep struct {
			Completed int `json:"completed"`
			Errors    int `json:"errors"`
			ITL       struct {
				P50 float64 `json:"p50"`
				P99 float64 `json:"p99"`
			} `json:"itl_ms"`
		}
		mustf(t, json.Unmarshal(b, &rep) == nil && rep.Errors == 0 && rep.Completed > 0 && rep.ITL.P50 > 0, "%s: %s", tag, b)
		itl99[tag] = rep.ITL.P99
	}
	agg, pd := itl99["pd-long-cache_aware-events-agg-1gw-run0"], itl99["pd-long-cache_aware-events-pd-1gw-run0"]
	t.Logf("long prompts: ITL p99 aggregated %.1f ms, pairs %.1f ms", agg, pd)
	// Measured (two runs on a loaded machine): 31 and 112 ms against 199 and 589 ms; with
	// prefill free in the simulator both were about 61 ms.
	if pd >= 0.7*agg {
		t.Errorf("ITL p99 of the pairs %.1f ms ≥ 0.7 × the aggregated workers' %.1f ms: prefill no longer stalls aggregated decode, or the pairs do not remove it", pd, agg)
	}
	var outcomes map[string]float64
	b, err := os.ReadFile(filepath.Join(logs, "pd-chat-cache_aware-events-pd-1gw-run0.pd.json"))
	mustf(t, err == nil && json.Unmarshal(b, &outcomes) == nil, "multi-turn outcomes: %v %s", err, b)
	mustf(t, outcomes["decode_cached"] > 0 && outcomes["pair"] > 0 && outcomes["decode_cached"]+outcomes["pair"] == 40,
		"multi-turn outcomes %v: want pairs and skipped prefill legs, 40 in all", outcomes)
	report, err := os.ReadFile(md)
	mustf(t, err == nil && strings.Contains(string(report), "### Prefill/decode disaggregation") && strings.Contains(string(report), "| 2 prefill + 2 decode | 1 |"),
		"report %s: %v\n%s", md, err, report)
}
