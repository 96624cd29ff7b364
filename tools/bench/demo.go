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
	var results []result
	for _, gw := range o.replicas {
		for _, p := range policies {
			c := p
			c.Gateways = gw
			res, err := r.runOne(ctx, c)
			if err != nil {
				return err
			}
			results = append(results, res)
		}
	}
	printTable(stdout, results)
	for _, res := range results {
		fmt.Fprintln(stdout, res.ResultLine)
	}
	return nil
}

// printTable writes the readable comparison (simulated times).
func printTable(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tindex\tgateways\trequests\terrors\thit rate\tTTFT p50\tTTFT mean\tTTFT p99\treq/s\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.1f\t\n", r.Policy, r.Index, r.Gateways, r.Requests, r.Errors,
			pct(r.hit()), fmtMS(r.TTFTms.P50), fmtMS(r.TTFTms.Mean), fmtMS(r.TTFTms.P99), r.RequestsPerS)
	}
	if len(results) > 0 && results[0].IdealHitRate != nil {
		fmt.Fprintf(tw, "ideal\t(every repeat hits)\t\t\t\t%s\t\t\t\t\t\n", pct(*results[0].IdealHitRate))
	}
	tw.Flush()
}
