package main

import (
	"context"
	"fmt"
	"io"
	"os"
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
	elapsed := time.Since(start)
	printTable(stdout, results)
	if o.png != "" {
		img, err := plotPNG(results, plotPanels(results))
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
	for _, res := range results {
		fmt.Fprintln(stdout, res.ResultLine)
	}
	return nil
}
