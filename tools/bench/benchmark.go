package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runBench runs every configuration for every replica count behind nginx, prints the table and
// the RESULT lines, and writes the markdown report and the plot.
func runBench(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	r, cleanup, err := newRunner(o, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	start := time.Now()
	load0 := loadAvg()
	results, err := r.runRows(ctx, o.plan())
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	o.note = strings.TrimSpace(fmt.Sprintf("Load average (1 min) of the machine: %s at the start, %s at the end. %s", load0, loadAvg(), o.note))
	printTable(stdout, results)
	fmt.Fprint(stdout, overloadSection(o, results))
	if err := writeReport(o, results, elapsed, stderr); err != nil {
		return err
	}
	printResultLines(stdout, results)
	return nil
}

// printResultLines prints every run's RESULT line, row by row: the machine-readable output.
func printResultLines(w io.Writer, rows []result) {
	for _, r := range rows {
		for _, l := range r.ResultLines {
			fmt.Fprintln(w, l)
		}
	}
}

// writeReport writes the markdown and the plot for results.
func writeReport(o *options, results []result, elapsed time.Duration, stderr io.Writer) error {
	if o.png != "" && len(steadyRows(results)) > 0 { // the P/D, overload and scenario rows have tables, not plots
		img, err := plotPNG(steadyRows(results), plotPanels)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.png, img, 0o644); err != nil {
			return err
		}
	}
	if o.out != "" {
		md, err := benchmarkMarkdown(o, results, elapsed)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote %s and %s\n", o.out, o.png)
	}
	return nil
}

// loadAvg returns the 1-minute load average from /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

// runReport re-renders the report from a kept logs directory (-keep-logs of an earlier run):
// the loadgen JSON reports and RESULT lines saved there, with the flags given now describing
// the run (pass the same flags as the run).
func runReport(o *options, stdout, stderr io.Writer) error {
	if o.logDir == "" {
		return fmt.Errorf("report needs -logs DIR of a kept run")
	}
	files, err := filepath.Glob(filepath.Join(o.logDir, "*gw-run*.json"))
	if err != nil {
		return err
	}
	var runs []result
	for _, f := range files {
		if strings.HasSuffix(f, ".index.json") || strings.HasSuffix(f, ".pd.json") || strings.HasSuffix(f, ".queue.json") {
			continue // a run's side files, read with its report below
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var res result
		var labels struct {
			Labels map[string]string `json:"labels"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := json.Unmarshal(b, &labels); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		res.Policy, res.Index, res.Variant = labels.Labels["policy"], labels.Labels["index"], labels.Labels["variant"]
		res.Workload, res.Scenario = workloadOf(labels.Labels["workload"]), labels.Labels["scenario"]
		res.Gateways, _ = strconv.Atoi(labels.Labels["gateways"])
		res.Fleet = labels.Labels["fleet"]
		if res.PD, err = readPDLog(f); err != nil {
			return err
		}
		txt, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".loadgen.txt")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(txt), "\n") {
			if strings.HasPrefix(line, "RESULT ") {
				res.ResultLine = strings.TrimSpace(line)
			}
		}
		if ix, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".index.json"); err == nil {
			var v indexCounts
			if err := json.Unmarshal(ix, &v); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			res.IndexKeys, res.IndexBlocks = v.Keys, v.Blocks
		}
		if qw, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".queue.json"); err == nil {
			if err := json.Unmarshal(qw, &res.QueueWaits); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
		if ho, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".handoffs.json"); err == nil {
			if err := json.Unmarshal(ho, &res.HandOffs); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
		runs = append(runs, res)
	}
	if len(runs) == 0 {
		return fmt.Errorf("no *gw.json reports in %s", o.logDir)
	}
	// One row per configuration, the median of its runs, in the order the runs were found.
	var results []result
	byConfig := map[configuration][]result{}
	var found []configuration
	for _, r := range runs {
		if _, ok := byConfig[r.configuration]; !ok {
			found = append(found, r.configuration)
		}
		byConfig[r.configuration] = append(byConfig[r.configuration], r)
	}
	for _, c := range found {
		results = append(results, medianOf(byConfig[c]))
	}
	// The table order is the plan's; rows the plan does not name go last.
	order := map[configuration]int{}
	for i, c := range o.plan() {
		order[c] = i + 1
	}
	rank := func(r result) int {
		if k := order[r.configuration]; k > 0 {
			return k
		}
		return len(order) + 1
	}
	slices.SortStableFunc(results, func(a, b result) int { return rank(a) - rank(b) })
	printTable(stdout, results)
	if err := writeReport(o, results, 0, stderr); err != nil {
		return err
	}
	printResultLines(stdout, results)
	return nil
}
