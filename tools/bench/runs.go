package main

import (
	"context"
	"math"
	"slices"
)

// A routing benchmark quoted from one run is not a result on a small, shared machine: every
// row runs -runs times (each with its own seed) and is reported as the median of its runs,
// with their min and max. The prose and the plot use the medians.

// runSpread is the min and max over a row's runs of the figures the tables show.
type runSpread struct {
	Hit, TTFTMean, TTFTP95, Duplicated [2]float64
	// The prefill/decode rows' (pd.go): inter-token latency, output tokens/s, prefill legs
	// skipped.
	ITLP50, ITLP99, OutTok, Skipped [2]float64
}

// runRows runs every configuration of plan o.runs times and returns one row per
// configuration: the median of its runs.
func (r *runner) runRows(ctx context.Context, plan []configuration) ([]result, error) {
	var rows []result
	for _, c := range plan {
		runs := make([]result, 0, r.o.runs)
		for i := range r.o.runs {
			res, err := r.runOne(ctx, c, i)
			if err != nil {
				return nil, err
			}
			runs = append(runs, res)
		}
		rows = append(rows, medianOf(runs))
	}
	return rows, nil
}

// medianOf folds one configuration's runs into its row: each figure the median of the runs
// (the mean of the middle two for an even count), errors and requests summed, the workers'
// shares pooled, and the spread of the shown figures.
func medianOf(runs []result) result {
	row := runs[0]
	row.Runs = len(runs)
	row.Each = runs
	row.ResultLines = nil
	row.Workers = map[string]int{}
	row.Requests, row.Completed, row.Errors = 0, 0, 0
	for _, r := range runs {
		row.ResultLines = append(row.ResultLines, r.ResultLine)
		row.Requests += r.Requests
		row.Completed += r.Completed
		row.Errors += r.Errors
		for w, n := range r.Workers {
			row.Workers[w] += n
		}
	}
	fig := func(f func(result) float64) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	if runs[0].HitRate != nil {
		h := fig(result.hit)
		row.HitRate = &h
	}
	row.RequestsPerS = fig(func(r result) float64 { return r.RequestsPerS })
	row.OutputTokensPerS = fig(func(r result) float64 { return r.OutputTokensPerS })
	row.DurationS = fig(func(r result) float64 { return r.DurationS })
	row.RealDurationS = fig(func(r result) float64 { return r.RealDurationS })
	for _, s := range []struct {
		dst *summary
		get func(result) summary
	}{{&row.TTFTms, func(r result) summary { return r.TTFTms }}, {&row.E2Ems, func(r result) summary { return r.E2Ems }},
		{&row.ITLms, func(r result) summary { return r.ITLms }}} {
		s.dst.Mean = fig(func(r result) float64 { return s.get(r).Mean })
		s.dst.P50 = fig(func(r result) float64 { return s.get(r).P50 })
		s.dst.P95 = fig(func(r result) float64 { return s.get(r).P95 })
		s.dst.P99 = fig(func(r result) float64 { return s.get(r).P99 })
	}
	row.IndexKeys = int(math.Round(fig(func(r result) float64 { return float64(r.IndexKeys) })))
	row.IndexBlocks = int(math.Round(fig(func(r result) float64 { return float64(r.IndexBlocks) })))
	if len(runs) > 1 {
		row.Spread = &runSpread{
			Hit:        spreadOf(runs, result.hit),
			TTFTMean:   spreadOf(runs, func(r result) float64 { return r.TTFTms.Mean }),
			TTFTP95:    spreadOf(runs, func(r result) float64 { return r.TTFTms.P95 }),
			Duplicated: spreadOf(runs, func(r result) float64 { return float64(r.duplicated()) }),
		}
		if row.Fleet != "" {
			pdSpread(row.Spread, runs)
		}
	}
	row.PD = medianPD(runs)
	return row
}

// median returns the median of xs (NaN for none, or when any is NaN).
func median(xs []float64) float64 {
	if len(xs) == 0 || slices.ContainsFunc(xs, math.IsNaN) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// spreadOf returns the min and max of f over runs.
func spreadOf(runs []result, f func(result) float64) [2]float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		v := f(r)
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return [2]float64{lo, hi}
}
