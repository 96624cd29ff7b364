package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is the outcome of a run; it is written as JSON by --json. Times are simulated:
// wall-clock measurements ÷ time scale; rates are per simulated second.
type report struct {
	Workload    string            `json:"workload"`
	Description string            `json:"description"`
	URL         string            `json:"url"`
	Model       string            `json:"model,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	TimeScale   float64           `json:"time_scale"`
	Rate        float64           `json:"rate"`
	Burstiness  float64           `json:"burstiness"`
	Concurrency int               `json:"concurrency"`
	Seed        uint64            `json:"seed"`
	Started     time.Time         `json:"started"`

	Requests   int            `json:"requests"`
	Sent       int            `json:"sent"`
	Completed  int            `json:"completed"`
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"error_kinds,omitempty"`

	DurationS        float64 `json:"duration_s"`
	RealDurationS    float64 `json:"real_duration_s"`
	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	PromptTokens     int64   `json:"prompt_tokens"`
	OutputTokens     int64   `json:"output_tokens"`

	TTFTms summary `json:"ttft_ms"`
	E2Ems  summary `json:"e2e_ms"`
	// ITLms is the inter-token latency: the gaps between successive output chunks of every
	// completed stream, pooled (itl.go).
	ITLms summary `json:"itl_ms"`

	// HitRate is Δhits ÷ Δqueries of the workers' prefix-cache counters over the run.
	HitRate      *float64 `json:"hit_rate"`
	HitTokens    float64  `json:"hit_tokens"`
	QueryTokens  float64  `json:"query_tokens"`
	MetricsError string   `json:"metrics_error,omitempty"`
	// UsageCachedRate is Σ usage cached_tokens ÷ Σ prompt tokens, when the server reports it.
	UsageCachedRate *float64 `json:"usage_cached_rate,omitempty"`
	// IdealHitRate: every repeat of a prefix hits an infinite cache (chat: on the ids of the
	// conversations as the chat template renders them); IdealNote says why it is missing.
	IdealHitRate *float64 `json:"ideal_hit_rate"`
	IdealNote    string   `json:"ideal_note,omitempty"`
	// Workers counts requests per x-kvgate-worker response header.
	Workers map[string]int `json:"workers,omitempty"`
	// Classes holds the two_class workload's figures per class (twoclass.go).
	Classes map[string]*classReport `json:"classes,omitempty"`
}

// MarshalJSON-safe summaries: NaN is not JSON, so empty distributions become zeros.
func finite(s summary) summary {
	f := func(x float64) float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0
		}
		return x
	}
	return summary{f(s.Mean), f(s.P50), f(s.P95), f(s.P99), f(s.Max)}
}

func ptr(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// buildReport aggregates the outcomes of the slots that were sent.
func buildReport(rep *report, r *runner, realElapsed time.Duration) {
	scale := r.scale
	var ttft, e2e []float64
	var cached int64
	rep.ErrorKinds = map[string]int{}
	rep.Workers = map[string]int{}
	rep.Requests = r.total
	for i, o := range r.outcomes {
		if !r.sent[i] {
			continue
		}
		rep.Sent++
		if o.worker != "" {
			rep.Workers[o.worker]++
		}
		if !o.ok {
			rep.Errors++
			rep.ErrorKinds[errorKind(o.err)]++
			continue
		}
		rep.Completed++
		rep.PromptTokens += int64(o.promptTokens)
		rep.OutputTokens += int64(o.outputTokens)
		cached += int64(o.cachedTokens)
		ttft = append(ttft, ms(o.ttft)/scale)
		e2e = append(e2e, ms(o.e2e)/scale)
	}
	rep.RealDurationS = realElapsed.Seconds()
	rep.DurationS = realElapsed.Seconds() / scale
	if rep.DurationS > 0 {
		rep.RequestsPerS = float64(rep.Completed) / rep.DurationS
		rep.OutputTokensPerS = float64(rep.OutputTokens) / rep.DurationS
	}
	rep.TTFTms = finite(summarize(ttft))
	rep.E2Ems = finite(summarize(e2e))
	rep.ITLms = itlSummary(r)
	if cached > 0 && rep.PromptTokens > 0 {
		rep.UsageCachedRate = ptr(float64(cached) / float64(rep.PromptTokens))
	}
	if len(rep.ErrorKinds) == 0 {
		rep.ErrorKinds = nil
	}
	if len(rep.Workers) == 0 {
		rep.Workers = nil
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// errorKind groups error messages by their first words (status code, transport, ...).
func errorKind(msg string) string {
	if i := strings.IndexByte(msg, ':'); i > 0 {
		return msg[:i]
	}
	return msg
}

func writeJSON(path string, rep *report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("loadgen: encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("loadgen: write report: %w", err)
	}
	return nil
}

func pct(x *float64) string {
	if x == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *x*100)
}

// writeTable prints the human-readable report.
func writeTable(w io.Writer, rep *report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "workload\t%s\n", rep.Description)
	fmt.Fprintf(tw, "target\t%s (model %q)\n", rep.URL, rep.Model)
	arr := "all at once"
	if rep.Rate > 0 {
		arr = fmt.Sprintf("%.3g req/s, burstiness %.3g", rep.Rate, rep.Burstiness)
	}
	if rep.Concurrency > 0 {
		arr += fmt.Sprintf(", at most %d in flight", rep.Concurrency)
	}
	fmt.Fprintf(tw, "arrivals\t%s; time scale %g (times below are simulated = measured ÷ %g)\n", arr, rep.TimeScale, rep.TimeScale)
	fmt.Fprintf(tw, "requests\t%d planned, %d sent, %d ok, %d errors\n", rep.Requests, rep.Sent, rep.Completed, rep.Errors)
	for _, k := range slices.Sorted(maps.Keys(rep.ErrorKinds)) {
		fmt.Fprintf(tw, "  error\t%s × %d\n", k, rep.ErrorKinds[k])
	}
	fmt.Fprintf(tw, "duration\t%.2f s (real %.2f s)\n", rep.DurationS, rep.RealDurationS)
	fmt.Fprintf(tw, "throughput\t%.3f req/s, %.1f output tok/s\n", rep.RequestsPerS, rep.OutputTokensPerS)
	fmt.Fprintf(tw, "\tmean\tp50\tp95\tp99\tmax\n")
	for _, row := range []struct {
		name string
		s    summary
	}{{"TTFT ms", rep.TTFTms}, {"E2E ms", rep.E2Ems}, {"ITL ms", rep.ITLms}} {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\n", row.name, row.s.Mean, row.s.P50, row.s.P95, row.s.P99, row.s.Max)
	}
	hit := pct(rep.HitRate)
	if rep.MetricsError != "" {
		hit += " (" + rep.MetricsError + ")"
	}
	ideal := pct(rep.IdealHitRate)
	if rep.IdealNote != "" {
		ideal += ": " + rep.IdealNote
	}
	fmt.Fprintf(tw, "prefix cache hit rate\t%s (ideal %s)\n", hit, ideal)
	if rep.UsageCachedRate != nil {
		fmt.Fprintf(tw, "cached tokens (usage)\t%s\n", pct(rep.UsageCachedRate))
	}
	for _, k := range slices.Sorted(maps.Keys(rep.Workers)) {
		fmt.Fprintf(tw, "  worker\t%s × %d\n", k, rep.Workers[k])
	}
	tw.Flush()
}

// resultLine is make demo's machine-readable summary (issue 7): the caller's k=v labels, then
// the run's figures. A missing hit rate prints as NaN.
func resultLine(labels string, rep *report) string {
	hit := math.NaN()
	if rep.HitRate != nil {
		hit = *rep.HitRate
	}
	prefix := "RESULT"
	if labels = strings.TrimSpace(labels); labels != "" {
		prefix += " " + labels
	}
	return fmt.Sprintf("%s requests=%d errors=%d hit_rate=%.4f ttft_p50_ms=%.1f ttft_mean_ms=%.1f",
		prefix, rep.Sent, rep.Errors, hit, rep.TTFTms.P50, rep.TTFTms.Mean)
}

// parseLabels splits "k=v k2=v2" for the JSON report.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("loadgen: --result-line: %q is not k=v", f)
		}
		out[k] = v
	}
	return out, nil
}

func decodeJSON(r io.Reader, v any) error {
	return json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(v)
}
