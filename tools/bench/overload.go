package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvgate/kvgate/internal/harness"
)

// The overload rows (issue 27): the fleet at 1.5× its capacity with two classes, interactive
// (short prompts, band 0) and batch (long prompts, band 10), on loadgen's two_class workload,
// without the admission queue, with it, and with it and --queue-reserve 1; and the interactive
// class alone on the same fleet, its unloaded reference.

// workloadOverload labels the overload rows.
const workloadOverload = "overload"

// The overload rows' variants: how the gateway admits, and (unloaded) the load. The reserve
// row's is overloadReserve followed by -overload-reserve.
const (
	overloadNoQueue  = ""
	overloadQueue    = "queue"
	overloadReserve  = "queue-reserve"
	overloadUnloaded = "unloaded"
)

// reserveVariant is the reserve row's variant.
func (o *overloadOptions) reserveVariant() string { return fmt.Sprint(overloadReserve, o.reserve) }

// The simulator's step model (pkg/sim Config defaults, which the overload rows keep): a step
// costs stepOverhead + decodePerSeq per sequence in it + prefillPerToken per uncached prompt
// token it prefills.
const (
	simStepOverhead    = 26 * time.Millisecond
	simDecodePerSeq    = 125 * time.Microsecond
	simPrefillPerToken = time.Second / 12000
)

// overloadOptions size the overload rows.
type overloadOptions struct {
	on bool
	// maxRunning is each simulator's --max-running (vLLM max_num_seqs) and the queue rows'
	// --max-inflight-per-worker: the fleet's slots.
	maxRunning int
	// reserve is the reserve row's --queue-reserve.
	reserve int
	// load is the offered load in units of the fleet's capacity; interactiveShare of the
	// capacity is the interactive class's, the rest of load the batch class's.
	load, interactiveShare float64
	arrivalTime            time.Duration // simulated
	interactive, batch     overloadClass
}

// overloadClass is one class's prompts: a shared prefix (cached after its first use), a
// unique suffix, the output, and the band.
type overloadClass struct {
	prefixes, prefixTok, suffixTok, outputTok, priority int
}

// defaultOverload: 3 simulators of 8 sequences; interactive 32 + 32 prompt tokens and 16
// output tokens at band 0, batch one of 24 documents of 512 tokens + 512 unique tokens and 64
// output tokens at band 10; a quarter of the capacity interactive, 1.25 batch; 40 simulated
// seconds of arrivals.
var defaultOverload = overloadOptions{on: true, maxRunning: 8, reserve: 1, load: 1.5, interactiveShare: 0.25, arrivalTime: 40 * time.Second,
	interactive: overloadClass{prefixes: 1, prefixTok: 32, suffixTok: 32, outputTok: 16, priority: 0},
	batch:       overloadClass{prefixes: 24, prefixTok: 512, suffixTok: 512, outputTok: 64, priority: 10}}

// registerOverload adds the -overload flags to fs, with defaults from def.
func registerOverload(fs *flag.FlagSet, o *overloadOptions, def overloadOptions) {
	if def.maxRunning == 0 { // a command without overload defaults (demo): the bench's, off
		def = defaultOverload
		def.on = false
	}
	*o = def
	fs.BoolVar(&o.on, "overload", def.on, "run the overload rows: two classes at -overload-load × the fleet's capacity, without the admission queue, with it and with --queue-reserve 1, and the interactive class alone")
	fs.IntVar(&o.maxRunning, "overload-max-running", def.maxRunning, "overload: each simulator's --max-running and the queue's --max-inflight-per-worker")
	fs.IntVar(&o.reserve, "overload-reserve", def.reserve, "overload: the reserve row's --queue-reserve")
	fs.Float64Var(&o.load, "overload-load", def.load, "overload: offered load, in units of the fleet's capacity")
	fs.Float64Var(&o.interactiveShare, "overload-interactive-share", def.interactiveShare, "overload: the interactive class's part of -overload-load")
	fs.DurationVar(&o.arrivalTime, "overload-arrival-time", def.arrivalTime, "overload: simulated time over which the requests arrive")
}

// capacity is the requests per simulated second one simulator completes of a class alone at a
// full batch: each request holds a slot for outputTok steps (its prefill step gives the first
// token), a step of maxRunning sequences costs stepOverhead + maxRunning × decodePerSeq plus
// the prefill it does, and the suffix is the uncached part of the prompt (the prefix cached
// after its first use). With λ requests/s of a class, slot-steps per second are λ × out = M ÷
// step and step = s0 + M·d + λ·P·p·step, so λ = M ÷ (out·(s0 + M·d) + M·P·p). Loads add
// linearly across classes (Σ λ_c ÷ capacity_c = 1 fills the fleet).
func (c overloadClass) capacity(maxRunning int) float64 {
	m := float64(maxRunning)
	return m / (float64(c.outputTok)*(simStepOverhead+time.Duration(m)*simDecodePerSeq).Seconds() + m*float64(c.suffixTok)*simPrefillPerToken.Seconds())
}

// rates returns the interactive and batch arrival rates (requests per simulated second) of
// the overload rows for a fleet of sims simulators.
func (o *overloadOptions) rates(sims int) (interactive, batch float64) {
	n := float64(sims)
	return o.interactiveShare * n * o.interactive.capacity(o.maxRunning), (o.load - o.interactiveShare) * n * o.batch.capacity(o.maxRunning)
}

// overloadPlan is the overload rows, at 1 gateway with cache_aware on the engines' events.
func (o *options) overloadPlan() []configuration {
	if !o.overload.on {
		return nil
	}
	var out []configuration
	for _, v := range []string{overloadUnloaded, overloadNoQueue, overloadQueue, o.overload.reserveVariant()} {
		out = append(out, configuration{Policy: "cache_aware", Index: "events", Variant: v, Workload: workloadOverload, Gateways: 1})
	}
	return out
}

// overloadFleet sets f up for an overload row: the simulators' slots, and the admission queue
// of the queue rows (a timeout and a bound past anything a run reaches: a refusal is a lost
// request).
func (r *runner) overloadFleet(f *fleet, c configuration) {
	n := fmt.Sprint(r.o.overload.maxRunning)
	f.simArgs = append(f.simArgs, "--max-running", n)
	reserve := strings.HasPrefix(c.Variant, overloadReserve)
	if c.Variant == overloadQueue || reserve {
		f.gwArgs = append(f.gwArgs, "--max-inflight-per-worker", n, "--queue-max", "100000", "--queue-timeout", "600s")
	}
	if reserve {
		f.gwArgs = append(f.gwArgs, "--queue-reserve", strings.TrimPrefix(c.Variant, overloadReserve))
	}
}

// overloadLoadgenArgs are loadgen's workload flags of an overload row.
func (r *runner) overloadLoadgenArgs(c configuration) []string {
	o := r.o.overload
	ri, rb := o.rates(r.o.sims)
	if c.Variant == overloadUnloaded {
		rb = 0
	}
	args := []string{"--tokenizer", r.l.Tokenizer, "--workload", "two_class", "--arrival-time", o.arrivalTime.String()}
	for _, cl := range []struct {
		name string
		c    overloadClass
		rate float64
	}{{"interactive", o.interactive, ri}, {"batch", o.batch, rb}} {
		args = append(args, "--"+cl.name+"-rate", fmt.Sprintf("%.4g", cl.rate), "--"+cl.name+"-prefixes", fmt.Sprint(cl.c.prefixes),
			"--"+cl.name+"-prefix-tokens", fmt.Sprint(cl.c.prefixTok), "--"+cl.name+"-suffix-tokens", fmt.Sprint(cl.c.suffixTok),
			"--"+cl.name+"-output-tokens", fmt.Sprint(cl.c.outputTok), "--"+cl.name+"-priority", fmt.Sprint(cl.c.priority))
	}
	return args
}

// classFigures mirror loadgen's per-class report of the two_class workload.
type classFigures struct {
	Priority         int     `json:"priority"`
	Requests         int     `json:"requests"`
	Completed        int     `json:"completed"`
	Errors           int     `json:"errors"`
	Refused429       int     `json:"refused_429"`
	Refused503       int     `json:"refused_503"`
	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	TTFTms           summary `json:"ttft_ms"`
}

func (c classFigures) lost() int { return c.Errors + c.Refused429 + c.Refused503 }

// queueWait is one band's admission-queue waits over a run, from the gateway's
// kvgate_queue_wait_seconds histogram: how many requests waited, and their total wait (real
// seconds).
type queueWait struct {
	Count uint64
	SumS  float64
}

// handOffs is the admission queue's hand-offs over a run, from the gateway's
// kvgate_queue_handoffs_total (by fit: where each left the request's cached prefix) and
// kvgate_queue_handoff_copied_blocks_total.
type handOffs struct {
	Fits   map[string]float64 `json:"fits"`
	Copied float64            `json:"copied_blocks"`
}

// copying is the share of hand-offs that made the worker prefill what another held (late and
// elsewhere), NaN without hand-offs.
func (h handOffs) copying() float64 {
	all := 0.0
	for _, n := range h.Fits {
		all += n
	}
	if all == 0 {
		return math.NaN()
	}
	return (h.Fits["late"] + h.Fits["elsewhere"]) / all
}

// readQueueMetrics reads the gateway's kvgate_queue_wait_seconds by priority band, and its
// hand-offs.
func readQueueMetrics(ctx context.Context, metricsURL string) (map[string]queueWait, handOffs, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ho := handOffs{Fits: map[string]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, ho, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, ho, fmt.Errorf("read the queue metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, ho, fmt.Errorf("read the queue metrics: %w", err)
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	out := map[string]queueWait{}
	for _, m := range fams["kvgate_queue_wait_seconds"].GetMetric() {
		band := label(m, "priority")
		w := out[band]
		w.Count += m.GetHistogram().GetSampleCount()
		w.SumS += m.GetHistogram().GetSampleSum()
		out[band] = w
	}
	for _, m := range fams["kvgate_queue_handoffs_total"].GetMetric() {
		ho.Fits[label(m, "fit")] += m.GetCounter().GetValue()
	}
	for _, m := range fams["kvgate_queue_handoff_copied_blocks_total"].GetMetric() {
		ho.Copied += m.GetCounter().GetValue()
	}
	return out, ho, nil
}

// overloadRow is one overload configuration's medians (and min–max) over its runs.
type overloadRow struct {
	variant string
	runs    int
	// Per class: TTFT p50 and p95, req/s, out tok/s; each [median, min, max].
	iP50, iP95, iMean, bRPS, bTPS, iWait, bWait, hit [3]float64
	// copying is the share of hand-offs that copied a prefix, copied the blocks they copied.
	copying, copied [3]float64
	lost, refused   int
}

// fold returns the median, min and max of f over runs.
func fold(runs []result, f func(result) float64) [3]float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	s := spreadOf(runs, f)
	return [3]float64{median(xs), s[0], s[1]}
}

// overloadRows folds the overload results, in plan order.
func overloadRows(o *options, results []result) []overloadRow {
	var out []overloadRow
	for _, r := range results {
		if r.Workload != workloadOverload {
			continue
		}
		runs := r.Each
		if len(runs) == 0 {
			runs = []result{r}
		}
		// Mean queue wait over the class's completed requests, simulated ms.
		wait := func(class string, band int) func(result) float64 {
			return func(x result) float64 {
				c := x.Classes[class]
				if c.Completed == 0 {
					return 0
				}
				return x.QueueWaits[fmt.Sprint(band)].SumS * 1000 / o.timeScale / float64(c.Completed)
			}
		}
		row := overloadRow{variant: r.Variant, runs: len(runs),
			iP50:    fold(runs, func(x result) float64 { return x.Classes["interactive"].TTFTms.P50 }),
			iP95:    fold(runs, func(x result) float64 { return x.Classes["interactive"].TTFTms.P95 }),
			iMean:   fold(runs, func(x result) float64 { return x.Classes["interactive"].TTFTms.Mean }),
			bRPS:    fold(runs, func(x result) float64 { return x.Classes["batch"].RequestsPerS }),
			bTPS:    fold(runs, func(x result) float64 { return x.Classes["batch"].OutputTokensPerS }),
			iWait:   fold(runs, wait("interactive", o.overload.interactive.priority)),
			bWait:   fold(runs, wait("batch", o.overload.batch.priority)),
			hit:     fold(runs, result.hit),
			copying: fold(runs, func(x result) float64 { return x.HandOffs.copying() }),
			copied:  fold(runs, func(x result) float64 { return x.HandOffs.Copied }),
		}
		for _, x := range runs {
			for _, c := range x.Classes {
				row.lost += c.lost()
				row.refused += c.Refused429 + c.Refused503
			}
		}
		out = append(out, row)
	}
	return out
}

// cell formats a [median, min, max] figure with f.
func cell(v [3]float64, f func(float64) string) string {
	if math.IsNaN(v[0]) {
		return "n/a"
	}
	if v[1] == v[2] {
		return f(v[0])
	}
	return fmt.Sprintf("%s (%s–%s)", f(v[0]), f(v[1]), f(v[2]))
}

func fmt1(v float64) string   { return fmt.Sprintf("%.1f", v) }
func fmt0(v float64) string   { return fmt.Sprintf("%.0f", v) }
func fmtPct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// overloadSection renders the overload table and, from its numbers, each of issue 27's
// targets met or missed.
func overloadSection(o *options, results []result) string {
	rows := overloadRows(o, results)
	if len(rows) == 0 {
		return ""
	}
	ov := o.overload
	ri, rb := ov.rates(o.sims)
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("### Overload: two classes at %.3g× the fleet's capacity (issue 27)\n\n", ov.load)
	p("%d simulators of %d sequences (`--max-running %d`), 1 gateway (cache_aware, events). Interactive: %d + %d prompt tokens (a shared system prompt and a unique message), %d output tokens, band %d (the body's vLLM `priority`), %.3g requests/s; batch: one of %d documents of %d tokens + %d unique tokens, %d output tokens, band %d, %.3g requests/s; Poisson arrivals over %s (simulated). ",
		o.sims, ov.maxRunning, ov.maxRunning, ov.interactive.prefixTok, ov.interactive.suffixTok, ov.interactive.outputTok, ov.interactive.priority, ri,
		ov.batch.prefixes, ov.batch.prefixTok, ov.batch.suffixTok, ov.batch.outputTok, ov.batch.priority, rb, ov.arrivalTime)
	p("The rates come from the simulator's step model (step = %v + %v per sequence + %v per uncached prompt token): a class alone fills one simulator at λ = M ÷ (out·(%v + M·%v) + M·P·%v) requests/s with M = %d sequences, P its uncached (suffix) tokens, out its output tokens, i.e. %.2f interactive or %.2f batch requests/s per simulator; interactive gets %.3g of the fleet's capacity and batch %.3g. ",
		simStepOverhead, simDecodePerSeq, simPrefillPerToken, simStepOverhead, simDecodePerSeq, simPrefillPerToken, ov.maxRunning,
		ov.interactive.capacity(ov.maxRunning), ov.batch.capacity(ov.maxRunning), ov.interactiveShare, ov.load-ov.interactiveShare)
	p("Rows: *unloaded* is the interactive class alone; *no queue* sends everything on (the engines' FCFS queues take the excess); *queue* is `--max-inflight-per-worker %d --queue-max 100000 --queue-timeout 600s`; *queue, --queue-reserve %d* adds that flag. Batch throughput is its completions (and output tokens) over the time from the start to its last completion. *Queue wait* is the gateway's `kvgate_queue_wait_seconds` of the band, summed and divided by the class's completed requests (simulated). *Copying hand-offs* is the share of the queue's hand-offs (`kvgate_queue_handoffs_total`) that gave a freed slot to a request another worker held more of (fit `late` or `elsewhere`), and in brackets the blocks they made the worker prefill again per run (`kvgate_queue_handoff_copied_blocks_total`, blocks of 16 tokens). Median of the runs, min–max in brackets.\n\n", ov.maxRunning, ov.reserve)
	p("| row | runs | interactive TTFT p50 | p95 | mean | its queue wait | batch req/s | batch out tok/s | batch queue wait | fleet hit rate | copying hand-offs (blocks) | lost (of which refused) |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	name := map[string]string{overloadUnloaded: "unloaded (interactive only)", overloadNoQueue: "no queue", overloadQueue: "queue", ov.reserveVariant(): fmt.Sprintf("queue, --queue-reserve %d", ov.reserve)}
	byVariant := map[string]overloadRow{}
	for _, r := range rows {
		byVariant[r.variant] = r
		bw, bRPS, bTPS := cell(r.bWait, fmt1), cell(r.bRPS, fmt1), cell(r.bTPS, fmt0)
		if r.variant == overloadUnloaded {
			bw, bRPS, bTPS = "", "", ""
		}
		copying := ""
		if r.variant != overloadUnloaded && r.variant != overloadNoQueue {
			copying = fmt.Sprintf("%s (%s)", cell(r.copying, fmtPct), cell(r.copied, fmt0))
		}
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d (%d) |\n", name[r.variant], r.runs, cell(r.iP50, fmt1), cell(r.iP95, fmt1), cell(r.iMean, fmt1),
			cell(r.iWait, fmt1), bRPS, bTPS, bw, cell(r.hit, fmtPct), copying, r.lost, r.refused)
	}
	p("\n(times in simulated ms)\n\n%s\n\n", overloadTargets(ov, byVariant))
	p("These rows alone, and what each runs (`--time-scale %g` throughout; simulators `--max-running %d` with the bench's other flags, gateway as in the other rows plus the row's admission flags):\n\n```sh\n", o.timeScale, ov.maxRunning)
	p("go run ./tools/bench bench -configs '' -skew '' -chat-configs '' -responses-configs '' -scenarios '' -runs %d -seed %d -time-scale %g -sims %d \\\n    -overload-max-running %d -overload-load %g -overload-interactive-share %g -overload-arrival-time %s -overload-reserve %d -png /tmp/x.png\n",
		o.runs, o.seed, o.timeScale, o.sims, ov.maxRunning, ov.load, ov.interactiveShare, ov.arrivalTime, ov.reserve)
	var r runner
	r.o, r.l = o, &harness.Launcher{Tokenizer: o.tokenizer}
	p("loadgen --url http://127.0.0.1:X --model %s %s \\\n    --time-scale %g --seed %d --worker-metrics ... --json FILE   # unloaded: --batch-rate 0\n```\n\n",
		o.model, strings.Join(r.overloadLoadgenArgs(configuration{}), " "), o.timeScale, o.seed)
	return b.String()
}

// overloadTargets says, from the numbers, which of issue 27's targets each queue row meets.
func overloadTargets(ov overloadOptions, rows map[string]overloadRow) string {
	u, okU := rows[overloadUnloaded]
	n, okN := rows[overloadNoQueue]
	if !okU || !okN {
		return ""
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	var lines []string
	for _, v := range []string{overloadQueue, ov.reserveVariant()} {
		q, ok := rows[v]
		if !ok {
			continue
		}
		t := q.iP95[0] / u.iP95[0]
		lines = append(lines, fmt.Sprintf("%s: interactive TTFT p95 %.1f ms = %.2f× its unloaded %.1f ms (target ≤ 2×: %s); batch %.1f req/s against %.1f without the queue (target no lower: %s); hit rate %s against %s (target no lower: %s); %d lost (target 0: %s).",
			v, q.iP95[0], t, u.iP95[0], verdict(t <= 2), q.bRPS[0], n.bRPS[0], verdict(q.bRPS[0] >= n.bRPS[0]), fmtPct(q.hit[0]), fmtPct(n.hit[0]), verdict(q.hit[0] >= n.hit[0]),
			q.lost, verdict(q.lost == 0)))
	}
	return "Against issue 27's targets (medians): " + strings.Join(lines, " ")
}
