package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
)

// runDemo runs the three configurations with one gateway and prints the comparison table,
// then one RESULT line per configuration as the last lines.
func runDemo(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	r, cleanup, err := newRunner(o, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(stderr, "bench: demo: %d simulators (%s), %d requests over %d prefixes × %d tokens (+%d suffix, %d out), %.0f req/s, time scale %g\n",
		o.sims, o.simArgs, o.requests, o.prefixes, o.prefixTok, o.suffixTok, o.outputTok, o.rate, o.timeScale)
	results, err := r.runRows(ctx, o.plan())
	if err != nil {
		return err
	}
	printTable(stdout, results)
	printResultLines(stdout, results)
	return nil
}

// printTable writes the readable comparison (simulated times), with each workload's ideal
// hit rate after its rows, then the scenarios' rows.
func printTable(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tpolicy\tindex\tgateways\trequests\terrors\thit rate\tTTFT p50\tTTFT mean\tTTFT p95\tTTFT p99\tbusiest\treq/s\t")
	for _, rs := range workloads(results) {
		for _, r := range rs {
			name := r.Policy
			if r.Variant != "" {
				name += " (" + r.Variant + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n", r.Workload, name, r.Index, r.Gateways, r.Requests, r.Errors,
				hitCell(r), fmtMS(r.TTFTms.P50), fmtMS(r.TTFTms.Mean), fmtMS(r.TTFTms.P95), fmtMS(r.TTFTms.P99), pct(r.busiest()), r.RequestsPerS)
		}
		if rs[0].IdealHitRate != nil {
			fmt.Fprintf(tw, "%s\tideal\t(every repeat hits)\t\t\t\t%s\t\t\t\t\t\t\t\n", rs[0].Workload, pct(*rs[0].IdealHitRate))
		}
	}
	for _, r := range results {
		if r.Fleet != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n", r.Workload, pdFleetName(r), r.Index, r.Gateways, r.Requests, r.Errors,
				hitCell(r), fmtMS(r.TTFTms.P50), fmtMS(r.TTFTms.Mean), fmtMS(r.TTFTms.P95), fmtMS(r.TTFTms.P99), pct(r.busiest()), r.RequestsPerS)
		}
		if r.Scenario != "" {
			name := r.Policy
			if r.Variant != "" {
				name += " (" + r.Variant + ")"
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n", r.Workload, r.Scenario, name, r.Index, r.Gateways, r.Requests, r.Errors,
				hitCell(r), fmtMS(r.TTFTms.P50), fmtMS(r.TTFTms.Mean), fmtMS(r.TTFTms.P95), fmtMS(r.TTFTms.P99), pct(r.busiest()), r.RequestsPerS)
		}
	}
	tw.Flush()
}
