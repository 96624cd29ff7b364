package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kvgate/kvgate/internal/harness"
)

// Prefill/decode disaggregation rows (issue 26): the same pdSims simulated GPUs as aggregated
// workers, or as half prefill and half decode workers (vLLM NIXL pairs), on a long-prompt
// workload at a load where an aggregated engine's decode steps carry other requests'
// prefills (chunked prefill: every token of a decoding request waits for the prefill computed
// beside it), and on a multi-turn chat workload, where conditional disaggregation runs a
// follow-up whole on a decode worker that holds its history.

// Workloads of the P/D rows.
const (
	workloadPDLong = "pd-long"
	workloadPDChat = "pd-chat"
)

// Fleets of the P/D rows (configuration.Fleet).
const (
	fleetAggregated = "agg" // pdSims workers serving whole requests
	fleetPD         = "pd"  // pdSims/2 role=prefill and pdSims/2 role=decode workers
)

// pdSims is the P/D rows' simulator count, whatever -sims says: the 4 GPUs.
const pdSims = 4

// pdWorkload sizes the P/D rows' workloads.
type pdWorkload struct {
	// Long prompts: requests of a prefixTok-token shared prefix (one of prefixes) and a
	// unique suffixTok-token suffix, outputTok output tokens, at rate per simulated second.
	requests, prefixes, prefixTok, suffixTok, outputTok int
	rate                                                float64
	// chat is the multi-turn workload (rate: sessions per simulated second).
	chat chatWorkload
	// timeScale is the P/D rows' --time-scale: slower than the other rows' so that a decode
	// step (about 30 ms simulated) is not lost in the timer and scheduling noise of a loaded
	// 2-core machine, since inter-token latency is what these rows compare.
	timeScale float64
}

// defaultPD: 2k-token prompts (1k shared over 64 prefixes, 1k unique) with 256 output tokens at
// 8 requests per simulated second. Four aggregated workers then each prefill about 2 prompts
// a second inside their decode steps (about 100 ms of a 30 ms step each time); two decode
// workers hold about 30 decoding requests each, well within their KV and batch. The chat rows:
// 4-turn sessions over a 1000-token system prompt with 100-token user turns and 128-token
// answers, 2 sessions per simulated second. A follow-up's new tokens on the decode worker that
// ran the turn before are the previous answer as the template renders it (which is not the
// ids the worker generated and cached: with 256-token answers and 200-token user turns no
// follow-up ever ran whole) and the new user message, about 240 tokens, fewer than
// --pd-min-uncached-tokens' 256; on the other decode worker, which holds only the system
// prompt, they are the whole history after it.
var defaultPD = pdWorkload{requests: 400, prefixes: 64, prefixTok: 1024, suffixTok: 1024, outputTok: 256, rate: 8,
	chat:      chatWorkload{requests: 300, turns: 4, systemTok: 1000, userTok: 100, outputTok: 128, rate: 2},
	timeScale: 1}

// defaultPDConfigs and defaultPDChatConfigs are the rows: FLEET[/VARIANT], VARIANT gateway
// flags as in -configs.
const (
	defaultPDConfigs     = "agg,pd"
	defaultPDChatConfigs = "agg,pd/pd-min-uncached-tokens=-1,pd,pd/decode-policy=cache_aware"
)

// parsePDConfigs parses -pd-configs: FLEET[/VARIANT], comma-separated, for workload.
func parsePDConfigs(s, workload string) ([]configuration, error) {
	var out []configuration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		fleet, variant, _ := strings.Cut(f, "/")
		if fleet != fleetAggregated && fleet != fleetPD {
			return nil, fmt.Errorf("P/D configuration %q: fleet %q: want agg or pd", f, fleet)
		}
		if variant != "" && variantArgs(variant) == nil {
			return nil, fmt.Errorf("P/D configuration %q: unknown variant %q (known: %s)", f, variant, variantNames())
		}
		out = append(out, configuration{Policy: "cache_aware", Index: "events", Variant: variant, Workload: workload, Gateways: 1, Fleet: fleet})
	}
	return out, nil
}

// pdSpec is the -pd-configs form of c.
func (c configuration) pdSpec() string {
	if c.Variant == "" {
		return c.Fleet
	}
	return c.Fleet + "/" + c.Variant
}

func joinPDConfigs(cs []configuration) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.pdSpec())
	}
	return strings.Join(out, ",")
}

// addPDFlags registers the P/D rows' flags on fs; the returned function parses their lists
// into o once fs has parsed.
func addPDFlags(fs *flag.FlagSet, o *options) func() error {
	configs := fs.String("pd-configs", joinPDConfigs(o.pdConfigs), `P/D rows on the long-prompt workload: agg|pd[/VARIANT], comma-separated ("" runs none)`)
	chatConfigs := fs.String("pd-chat-configs", joinPDConfigs(o.pdChatConfigs), `P/D rows on the multi-turn workload (same syntax; "" runs none)`)
	w := &o.pd
	fs.IntVar(&w.requests, "pd-requests", w.requests, "P/D long prompts: requests per row")
	fs.IntVar(&w.prefixes, "pd-prefixes", w.prefixes, "P/D long prompts: distinct shared prefixes")
	fs.IntVar(&w.prefixTok, "pd-prefix-tokens", w.prefixTok, "P/D long prompts: tokens per shared prefix")
	fs.IntVar(&w.suffixTok, "pd-suffix-tokens", w.suffixTok, "P/D long prompts: unique suffix tokens per request")
	fs.IntVar(&w.outputTok, "pd-output-tokens", w.outputTok, "P/D long prompts: output tokens per request")
	fs.Float64Var(&w.rate, "pd-rate", w.rate, "P/D long prompts: requests per simulated second")
	fs.IntVar(&w.chat.requests, "pd-chat-requests", w.chat.requests, "P/D multi-turn: requests (turns) per row")
	fs.IntVar(&w.chat.turns, "pd-chat-turns", w.chat.turns, "P/D multi-turn: turns per session")
	fs.IntVar(&w.chat.systemTok, "pd-chat-system-tokens", w.chat.systemTok, "P/D multi-turn: system prompt tokens")
	fs.IntVar(&w.chat.userTok, "pd-chat-user-tokens", w.chat.userTok, "P/D multi-turn: tokens per user message")
	fs.IntVar(&w.chat.outputTok, "pd-chat-output-tokens", w.chat.outputTok, "P/D multi-turn: tokens per answer")
	fs.Float64Var(&w.chat.rate, "pd-chat-rate", w.chat.rate, "P/D multi-turn: sessions started per simulated second")
	fs.Float64Var(&w.timeScale, "pd-time-scale", w.timeScale, "P/D rows' simulator and loadgen --time-scale")
	return func() error {
		var err error
		if o.pdConfigs, err = parsePDConfigs(*configs, workloadPDLong); err != nil {
			return fmt.Errorf("-pd-configs: %w", err)
		}
		if o.pdChatConfigs, err = parsePDConfigs(*chatConfigs, workloadPDChat); err != nil {
			return fmt.Errorf("-pd-chat-configs: %w", err)
		}
		if len(o.pdConfigs)+len(o.pdChatConfigs) > 0 && (w.timeScale <= 0 || w.requests < 1 || w.chat.requests < 1) {
			return fmt.Errorf("-pd-time-scale, -pd-requests and -pd-chat-requests must be positive")
		}
		return nil
	}
}

// startPDFleet starts a P/D row's simulators (cold, with KV events) and its gateway.
func (r *runner) startPDFleet(ctx context.Context, f *fleet, c configuration, tag string) error {
	var common []string
	if s := strings.TrimSpace(r.o.simArgs); s != "" {
		common = strings.Fields(s)
	}
	f.sims = make([]*harness.Sim, pdSims)
	g, gctx := errgroup.WithContext(ctx)
	for i := range pdSims {
		g.Go(func() error {
			args := append(slices.Clip(common), pdSimArgs(c, i)...)
			s, err := r.l.StartSim(gctx, harness.SimOptions{Name: fmt.Sprintf("%s-sim%d", tag, i), Events: true, TimeScale: r.o.pd.timeScale, Args: args})
			f.sims[i] = s
			return err
		})
	}
	err := g.Wait()
	for _, s := range f.sims {
		if s != nil {
			f.procs = append(f.procs, s.Process)
		}
	}
	if err != nil {
		return err
	}
	var workers []string
	for i, s := range f.sims {
		workers = append(workers, s.WorkerSpec(true)+pdRoleSpec(c, i))
	}
	if c.Fleet == fleetPD {
		f.gwArgs = []string{"--pd-transfer", "nixl"}
	}
	return r.startGateways(ctx, f, c, workers, false)
}

// pdRole is simulator i's role in c's fleet ("" for an aggregated worker).
func pdRole(c configuration, i int) string {
	switch {
	case c.Fleet != fleetPD:
		return ""
	case i < pdSims/2:
		return "prefill"
	}
	return "decode"
}

// pdSimArgs are simulator i's P/D flags.
func pdSimArgs(c configuration, i int) []string {
	if role := pdRole(c, i); role != "" {
		return []string{"--pd-role", role, "--pd-transfer", "nixl"}
	}
	return nil
}

// pdRoleSpec is the worker spec suffix of simulator i.
func pdRoleSpec(c configuration, i int) string {
	if role := pdRole(c, i); role != "" {
		return ",role=" + role
	}
	return ""
}

// pdLoadgenArgs are loadgen's flags of run run of P/D row c.
func (r *runner) pdLoadgenArgs(c configuration, run int, url, jsonPath string, f *fleet) []string {
	o, w := r.o, r.o.pd
	args := []string{"--url", url, "--model", o.model, "--burstiness", fmt.Sprint(o.burstiness),
		"--time-scale", fmt.Sprint(w.timeScale), "--seed", fmt.Sprint(o.seed + uint64(run)),
		"--json", jsonPath, "--progress", o.progress, "--result-line", c.resultLabels(run)}
	if c.Workload == workloadPDChat {
		ch := w.chat
		args = append(args, "--tokenizer", filepath.Dir(r.l.Tokenizer), "--workload", workloadChat,
			"--num-requests", fmt.Sprint(ch.requests), "--turns", fmt.Sprint(ch.turns), "--system-tokens", fmt.Sprint(ch.systemTok),
			"--user-tokens", fmt.Sprint(ch.userTok), "--output-tokens", fmt.Sprint(ch.outputTok), "--rate", fmt.Sprint(ch.rate))
	} else {
		args = append(args, "--tokenizer", r.l.Tokenizer, "--workload", "prefix_repetition", "--prefix-dist", "uniform",
			"--num-prefixes", fmt.Sprint(w.prefixes), "--prefix-tokens", fmt.Sprint(w.prefixTok),
			"--suffix-tokens", fmt.Sprint(w.suffixTok), "--output-tokens", fmt.Sprint(w.outputTok),
			"--num-requests", fmt.Sprint(w.requests), "--rate", fmt.Sprint(w.rate))
	}
	for _, s := range f.sims {
		args = append(args, "--worker-metrics", s.MetricsURL())
	}
	return args
}

// readPDOutcomes returns a gateway's kvgate_pd_requests_total by outcome (pair, or why a
// request ran whole).
func readPDOutcomes(ctx context.Context, metricsURL string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the P/D outcomes: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the P/D outcomes: GET %s: %s", metricsURL, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	const prefix = `kvgate_pd_requests_total{outcome="`
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("read the P/D outcomes: %q: %w", sc.Text(), err)
		}
		out[name] = v
	}
	return out, sc.Err()
}

// recordPDOutcomes reads the P/D row's outcomes into res and keeps them in the logs (for
// bench report).
func (r *runner) recordPDOutcomes(ctx context.Context, res *result, f *fleet, tag string) error {
	if res.Fleet != fleetPD {
		return nil
	}
	var err error
	if res.PD, err = readPDOutcomes(ctx, f.gws[0].MetricsURL()); err != nil {
		return err
	}
	b, _ := json.Marshal(res.PD)
	return os.WriteFile(filepath.Join(r.l.LogDir, tag+".pd.json"), b, 0o644)
}

// readPDLog reads the outcomes recordPDOutcomes kept beside a run's report (none: nil).
func readPDLog(reportPath string) (map[string]float64, error) {
	b, err := os.ReadFile(strings.TrimSuffix(reportPath, ".json") + ".pd.json")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", reportPath, err)
	}
	return m, nil
}

// pairs and skipped are a P/D row's requests run as pairs, and those run whole because
// splitting did not pay (short prompt, or the decode worker held all but a few tokens).
func (r result) pairs() float64   { return r.PD["pair"] }
func (r result) skipped() float64 { return r.PD["decode_cached"] + r.PD["short_prompt"] }

// medianPD folds the runs' P/D outcomes into their medians (nil for rows without).
func medianPD(runs []result) map[string]float64 {
	keys := map[string]bool{}
	for _, r := range runs {
		for k := range r.PD {
			keys[k] = true
		}
	}
	if len(keys) == 0 {
		return nil
	}
	out := map[string]float64{}
	for k := range keys {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = r.PD[k]
		}
		out[k] = median(xs)
	}
	return out
}

// pdRows returns the P/D rows of workload.
func pdRows(results []result, workload string) []result {
	var out []result
	for _, r := range results {
		if r.Fleet != "" && r.Workload == workload {
			out = append(out, r)
		}
	}
	return out
}

// pdFleetName names a P/D row's fleet and gateway flags in a table.
func pdFleetName(r result) string {
	n := "4 aggregated"
	if r.Fleet == fleetPD {
		n = "2 prefill + 2 decode"
	}
	if a := variantArgs(r.Variant); len(a) > 0 {
		n += " (`" + strings.Join(a, " ") + "`)"
	}
	return n
}

// msCell is a median time in ms, one decimal, with its runs' min–max.
func msCell(median float64, s *[2]float64) string {
	if s == nil {
		return fmt.Sprintf("%.1f ms", median)
	}
	return fmt.Sprintf("%.1f ms (%.1f–%.1f)", median, s[0], s[1])
}

// rateCell is a median rate with its runs' min–max.
func rateCell(median float64, s *[2]float64) string {
	if s == nil {
		return fmt.Sprintf("%.0f", median)
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", median, s[0], s[1])
}

// pdTable writes one P/D workload's table.
func pdTable(p func(string, ...any), rs []result) {
	p("| fleet | runs | requests | errors | TTFT mean | TTFT p95 | ITL p50 | ITL p99 | out tok/s | hit rate | pairs | prefill skipped |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		pairs, skipped := "—", "—"
		if r.Fleet == fleetPD {
			pairs, skipped = fmt.Sprintf("%.0f", r.pairs()), fmt.Sprintf("%.0f", r.skipped())
			if s := spreadPart(r, func(s *runSpread) [2]float64 { return s.Skipped }); s != nil {
				skipped += fmt.Sprintf(" (%.0f–%.0f)", s[0], s[1])
			}
		}
		p("| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", pdFleetName(r), max(r.Runs, 1), r.Requests, r.Errors,
			ttftCell(r.TTFTms.Mean, spreadPart(r, func(s *runSpread) [2]float64 { return s.TTFTMean })),
			ttftCell(r.TTFTms.P95, spreadPart(r, func(s *runSpread) [2]float64 { return s.TTFTP95 })),
			msCell(r.ITLms.P50, spreadPart(r, func(s *runSpread) [2]float64 { return s.ITLP50 })),
			msCell(r.ITLms.P99, spreadPart(r, func(s *runSpread) [2]float64 { return s.ITLP99 })),
			rateCell(r.OutputTokensPerS, spreadPart(r, func(s *runSpread) [2]float64 { return s.OutTok })),
			hitCell(r), pairs, skipped)
	}
}

// pdCompare states, from the numbers, how each P/D row compares with the aggregated row.
func pdCompare(rs []result) string {
	var agg *result
	for i := range rs {
		if rs[i].Fleet == fleetAggregated {
			agg = &rs[i]
		}
	}
	if agg == nil {
		return ""
	}
	var lines []string
	for _, r := range rs {
		if r.Fleet != fleetPD {
			continue
		}
		l := fmt.Sprintf("%s: ITL p99 %s the aggregated fleet's, p50 %s, TTFT mean %s, output throughput %s", pdFleetName(r),
			ratio(r.ITLms.P99, agg.ITLms.P99), ratio(r.ITLms.P50, agg.ITLms.P50), ratio(r.TTFTms.Mean, agg.TTFTms.Mean), ratio(r.OutputTokensPerS, agg.OutputTokensPerS))
		if total := r.pairs() + r.skipped(); r.skipped() > 0 && total > 0 {
			l += fmt.Sprintf("; %.0f of %.0f prefill legs skipped (%.0f%%)", r.skipped(), total, 100*r.skipped()/total)
		}
		lines = append(lines, l+".")
	}
	return strings.Join(lines, " ")
}

// pdSection renders the P/D rows ("" when there are none).
func pdSection(o *options, results []result) string {
	long, chat := pdRows(results, workloadPDLong), pdRows(results, workloadPDChat)
	if len(long)+len(chat) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w := o.pd
	p("### Prefill/decode disaggregation (4 simulated GPUs: 4 aggregated workers vs 2 prefill + 2 decode)\n\n")
	p("The same %d simulators either serve whole requests (`cache_aware`, events) or are split into `role=prefill` and `role=decode` workers running vLLM NIXL pairs (`--pd-transfer nixl`; prefill policy `cache_aware`, decode policy `least_load` unless the row says otherwise). An aggregated engine runs other requests' prefills inside its decode steps (chunked prefill, 8192 tokens a step), so a decoding request waits for them between two tokens; a decode worker receives the prompt's KV (%d bytes a token over 25 GB/s, simulated) and computes only its last token. *ITL* is the gap between two successive streamed chunks, pooled over every request (loadgen, as vLLM's benchmark_serving); *pairs* and *prefill skipped* are the gateway's `kvgate_pd_requests_total` (`pair`; `decode_cached` + `short_prompt`), the median of the runs. The fleet's hit rate counts each pair's prompt twice (the prefill worker's lookup and the decode worker's, which finds only what it cached itself). Times simulated at `--time-scale %g`.\n\n", pdSims, 262144, w.timeScale)
	if len(long) > 0 {
		p("Long prompts: %d requests of %d tokens (%d shared over %d prefixes + %d unique), %d output tokens, %g requests per simulated second.\n\n",
			w.requests, w.prefixTok+w.suffixTok, w.prefixTok, w.prefixes, w.suffixTok, w.outputTok, w.rate)
		pdTable(p, long)
		if s := pdCompare(long); s != "" {
			p("\n%s\n", s)
		}
		p("\n")
	}
	if len(chat) > 0 {
		ch := w.chat
		p("Multi-turn (conditional disaggregation): %d requests in sessions of %d turns, %g sessions per simulated second, a %d-token system prompt, %d-token user turns, %d-token answers; a request whose decode worker holds all but fewer than `--pd-min-uncached-tokens` (256) of its prompt runs whole there.\n\n",
			ch.requests, ch.turns, ch.rate, ch.systemTok, ch.userTok, ch.outputTok)
		pdTable(p, chat)
		if s := pdCompare(chat); s != "" {
			p("\n%s\n", s)
		}
		p("\n")
	}
	p("Command of these rows alone: `go run ./tools/bench bench -configs '' -skew '' -chat-configs '' -responses-configs '' -scenarios '' -pd-configs '%s' -pd-chat-configs '%s' -pd-time-scale %g -out FILE -png FILE`.\n\n",
		joinPDConfigs(o.pdConfigs), joinPDConfigs(o.pdChatConfigs), w.timeScale)
	return b.String()
}

// pdSpread adds the P/D figures' min–max over runs to s.
func pdSpread(s *runSpread, runs []result) {
	s.ITLP50 = spreadOf(runs, func(r result) float64 { return r.ITLms.P50 })
	s.ITLP99 = spreadOf(runs, func(r result) float64 { return r.ITLms.P99 })
	s.OutTok = spreadOf(runs, func(r result) float64 { return r.OutputTokensPerS })
	if runs[0].PD != nil {
		s.Skipped = spreadOf(runs, result.skipped)
	}
}
