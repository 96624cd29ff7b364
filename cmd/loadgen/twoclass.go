package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// workloadTwoClass is the overload workload (issue 27): two classes of completions sharing one
// fleet, each an open loop of its own rate and admission band.
const workloadTwoClass = "two_class"

// Class names, as the report keys them.
const (
	classInteractive = "interactive"
	classBatch       = "batch"
)

// twoClassConfig sizes the two classes. Interactive requests are short: a shared system
// prompt, a short user message and a short answer, at a high band (a low number; 0 is the
// gateway's default band). Batch requests are long: one of a few long documents, a long unique
// part and a longer answer, at a low band.
type twoClassConfig struct {
	arrivalTime time.Duration // simulated span over which both classes arrive
	interactive classConfig
	batch       classConfig
}

// classConfig is one class: rate 0 sends none of it.
type classConfig struct {
	rate                                 float64 // requests per simulated second (Poisson)
	prefixes, prefixTokens, suffixTokens int     // shared prefixes, their length, the unique part
	outputTokens                         int
	priority                             int // the body's vLLM priority field: the gateway's band
}

// registerTwoClass adds the two_class flags to fs.
func registerTwoClass(fs *flag.FlagSet, c *twoClassConfig) {
	fs.DurationVar(&c.arrivalTime, "arrival-time", 60*time.Second, "two_class: simulated time over which both classes arrive")
	for _, cl := range []struct {
		name string
		c    *classConfig
		def  classConfig
	}{
		{classInteractive, &c.interactive, classConfig{rate: 10, prefixes: 1, prefixTokens: 32, suffixTokens: 32, outputTokens: 16, priority: 0}},
		{classBatch, &c.batch, classConfig{rate: 10, prefixes: 24, prefixTokens: 512, suffixTokens: 512, outputTokens: 64, priority: 10}},
	} {
		*cl.c = cl.def
		n := cl.name
		fs.Float64Var(&cl.c.rate, n+"-rate", cl.def.rate, "two_class: "+n+" requests per simulated second (0: none)")
		fs.IntVar(&cl.c.prefixes, n+"-prefixes", cl.def.prefixes, "two_class: distinct shared prefixes of the "+n+" prompts")
		fs.IntVar(&cl.c.prefixTokens, n+"-prefix-tokens", cl.def.prefixTokens, "two_class: tokens per "+n+" shared prefix")
		fs.IntVar(&cl.c.suffixTokens, n+"-suffix-tokens", cl.def.suffixTokens, "two_class: unique tokens per "+n+" prompt")
		fs.IntVar(&cl.c.outputTokens, n+"-output-tokens", cl.def.outputTokens, "two_class: output tokens per "+n+" request")
		fs.IntVar(&cl.c.priority, n+"-priority", cl.def.priority, "two_class: the "+n+" requests' vLLM priority field (the gateway's band: lower runs first)")
	}
}

// validate checks the two classes.
func (c *twoClassConfig) validate() error {
	if c.arrivalTime <= 0 {
		return errors.New("loadgen: --arrival-time must be > 0")
	}
	if c.interactive.rate <= 0 && c.batch.rate <= 0 {
		return errors.New("loadgen: two_class needs --interactive-rate or --batch-rate > 0")
	}
	for _, cl := range []struct {
		name string
		c    classConfig
	}{{classInteractive, c.interactive}, {classBatch, c.batch}} {
		if cl.c.rate < 0 || cl.c.prefixes < 1 || cl.c.prefixTokens < 0 || cl.c.suffixTokens < 0 || cl.c.outputTokens < 1 {
			return fmt.Errorf("loadgen: two_class %s: need rate ≥ 0, prefixes ≥ 1, non-negative lengths and output tokens ≥ 1", cl.name)
		}
		// The arrivals are generated up front: bound them.
		if n := cl.c.rate * c.arrivalTime.Seconds(); n > 1e6 {
			return fmt.Errorf("loadgen: two_class %s: %.0f requests (rate × arrival time) is too many", cl.name, n)
		}
	}
	return nil
}

// classRequest is one request of a two_class run.
type classRequest struct {
	class     string
	at        time.Duration // simulated offset from the start
	prompt    piece
	tokens    int
	maxTokens int
	priority  int
}

// twoClassPlan is the merged schedule of both classes, by arrival, and its ideal hit rate.
type twoClassPlan struct {
	requests             []classRequest
	idealHit, idealTotal int64
	describe             string
}

// genTwoClass draws each class's Poisson arrivals over the arrival time and its prompts: a
// uniformly drawn shared prefix and a unique suffix.
func genTwoClass(c *twoClassConfig, m promptMaker, seed uint64) *twoClassPlan {
	rng := rand.New(rand.NewPCG(seed, 0x32636c73)) // "2cls"
	p := &twoClassPlan{}
	var parts []string
	for _, cl := range []struct {
		name string
		c    classConfig
	}{{classInteractive, c.interactive}, {classBatch, c.batch}} {
		if cl.c.rate <= 0 {
			continue
		}
		prefixes := make([]piece, cl.c.prefixes)
		for i := range prefixes {
			prefixes[i] = m.make(rng, cl.c.prefixTokens)
		}
		used := map[int]bool{}
		theta := 1 / cl.c.rate
		for t := rng.ExpFloat64() * theta; t < c.arrivalTime.Seconds(); t += rng.ExpFloat64() * theta {
			k := rng.IntN(cl.c.prefixes)
			if used[k] {
				p.idealHit += int64(cl.c.prefixTokens)
			}
			used[k] = true
			n := cl.c.prefixTokens + cl.c.suffixTokens
			p.idealTotal += int64(n)
			p.requests = append(p.requests, classRequest{class: cl.name, at: time.Duration(t * float64(time.Second)),
				prompt: concat(prefixes[k], m.make(rng, cl.c.suffixTokens)), tokens: n, maxTokens: cl.c.outputTokens, priority: cl.c.priority})
		}
		parts = append(parts, fmt.Sprintf("%s %.3g req/s (priority %d, %d prefixes × %d + %d tokens, %d output)",
			cl.name, cl.c.rate, cl.c.priority, cl.c.prefixes, cl.c.prefixTokens, cl.c.suffixTokens, cl.c.outputTokens))
	}
	slices.SortStableFunc(p.requests, func(a, b classRequest) int { return cmp.Compare(a.at, b.at) })
	p.describe = fmt.Sprintf("%s over %s: %s; %d requests", workloadTwoClass, c.arrivalTime, strings.Join(parts, ", "), len(p.requests))
	return p
}

// classBody is a streamed completion carrying vLLM's priority field, which the gateway takes
// as the admission band when no x-kvgate-priority header is sent (and strips before the engine
// unless told to forward it).
type classBody struct {
	completionBody
	Priority int `json:"priority"`
}

// classReport is one class's outcome. Lost requests are Errors (transport, status other than
// 429 and 503, a stream that failed) plus the refusals, which are counted apart.
type classReport struct {
	Priority   int     `json:"priority"`
	Rate       float64 `json:"rate"`
	Requests   int     `json:"requests"`
	Sent       int     `json:"sent"`
	Completed  int     `json:"completed"`
	Errors     int     `json:"errors"`
	Refused429 int     `json:"refused_429"`
	Refused503 int     `json:"refused_503"`
	// DurationS is from the run's start to the class's last completion (simulated): its
	// throughput is over the time the fleet took to serve it.
	DurationS        float64 `json:"duration_s"`
	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	PromptTokens     int64   `json:"prompt_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	TTFTms           summary `json:"ttft_ms"`
	E2Ems            summary `json:"e2e_ms"`
}

// lost is every request of the class that got no answer.
func (c *classReport) lost() int { return c.Errors + c.Refused429 + c.Refused503 }

// runTwoClass is the two_class command: it sends both classes' schedules and reports each
// class, and the fleet's hit rate over the run.
func runTwoClass(ctx context.Context, o *options, stdout io.Writer) error {
	if err := o.two.validate(); err != nil {
		return err
	}
	m := promptMaker{lo: o.gen.vocabLo, hi: o.gen.vocabHi}
	if o.tokenizer != "" {
		tok, err := loadCodec(o.tokenizer)
		if err != nil {
			return err
		}
		if m.tb, err = newTextBuilder(tok); err != nil {
			return err
		}
	}
	p := genTwoClass(&o.two, m, o.gen.seed)
	if o.idealOnly {
		fmt.Fprintf(stdout, "%s\nideal prefix cache hit rate: %s (%d of %d prompt tokens)\n", p.describe, pct(ptr(float64(p.idealHit)/float64(p.idealTotal))), p.idealHit, p.idealTotal)
		return nil
	}
	labels, err := parseLabels(o.resultLine)
	if err != nil {
		return err
	}
	base := strings.TrimRight(o.url, "/")
	client, err := newHTTPClient(1024, base, o.apiKey)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	if o.model == "" {
		if o.model, err = firstModel(ctx, client, base); err != nil {
			return err
		}
	}
	c := &completer{client: client, url: base + o.endpoint, model: o.model}
	rep := &report{Workload: workloadTwoClass, Description: p.describe, URL: c.url, Model: o.model, TimeScale: o.timeScale,
		Burstiness: 1, Seed: o.gen.seed, Started: time.Now().UTC(), Labels: labels}
	if len(labels) == 0 {
		rep.Labels = nil
	}
	fleet := scrapeBefore(ctx, client, o.workerMetrics)
	outcomes, sent, elapsed := sendTwoClass(ctx, c, p, o.timeScale, o.timeout)
	buildTwoClassReport(rep, &o.two, p, outcomes, sent, elapsed, o.timeScale)
	fleet.after(ctx, rep)
	if p.idealTotal > 0 {
		rep.IdealHitRate = ptr(float64(p.idealHit) / float64(p.idealTotal))
	}
	if err := writeResults(ctx, stdout, o, rep); err != nil {
		return err
	}
	writeClassTable(stdout, rep)
	return nil
}

// sendTwoClass sends p's requests at their arrival times (× scale in real time) and returns
// each one's outcome, whether it was sent, and the real time to the last completion.
// Cancelling ctx stops dispatch and cancels the requests in flight; it still waits for them.
func sendTwoClass(ctx context.Context, c *completer, p *twoClassPlan, scale float64, timeout time.Duration) ([]outcome, []bool, time.Duration) {
	outcomes := make([]outcome, len(p.requests))
	sent := make([]bool, len(p.requests))
	start := time.Now()
	var wg sync.WaitGroup
	for i, q := range p.requests {
		if !sleepUntil(ctx, start.Add(time.Duration(float64(q.at)*scale))) {
			break
		}
		sent[i] = true
		wg.Go(func() {
			body, err := json.Marshal(classBody{completionBody{Model: c.model, Prompt: q.prompt.prompt(), MaxTokens: q.maxTokens, IgnoreEOS: true,
				Stream: true, StreamOptions: map[string]any{"include_usage": true}}, q.priority})
			if err != nil {
				outcomes[i] = outcome{err: "encode: " + err.Error()}
				return
			}
			rctx := ctx
			if timeout > 0 {
				var cancel context.CancelFunc
				rctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			o := c.do(rctx, start, body)
			if o.promptTokens == 0 {
				o.promptTokens = q.tokens
			}
			outcomes[i] = o // each goroutine writes only its own slot, read after wg.Wait
		})
	}
	wg.Wait()
	var elapsed time.Duration
	for i := range outcomes {
		if sent[i] {
			elapsed = max(elapsed, outcomes[i].end)
		}
	}
	return outcomes, sent, elapsed
}

// prompt is the piece as a completion prompt: its ids, or its text.
func (p piece) prompt() any {
	if p.ids != nil {
		return p.ids
	}
	return p.text
}

// buildTwoClassReport fills rep: each class's figures in rep.Classes, and the whole run's in
// rep's own fields (as the other workloads report them). Refusals count as errors there.
func buildTwoClassReport(rep *report, cfg *twoClassConfig, p *twoClassPlan, outcomes []outcome, sent []bool, realElapsed time.Duration, scale float64) {
	rep.Classes = map[string]*classReport{}
	rates := map[string]classConfig{classInteractive: cfg.interactive, classBatch: cfg.batch}
	ttfts, e2es := map[string][]float64{}, map[string][]float64{}
	var allTTFT, allE2E []float64
	rep.ErrorKinds, rep.Workers = map[string]int{}, map[string]int{}
	for i, q := range p.requests {
		cr := rep.Classes[q.class]
		if cr == nil {
			cr = &classReport{Priority: rates[q.class].priority, Rate: rates[q.class].rate}
			rep.Classes[q.class] = cr
		}
		cr.Requests++
		rep.Requests++
		if !sent[i] {
			continue
		}
		o := outcomes[i]
		cr.Sent++
		rep.Sent++
		if o.worker != "" {
			rep.Workers[o.worker]++
		}
		cr.DurationS = max(cr.DurationS, o.end.Seconds()/scale)
		if !o.ok {
			rep.Errors++
			kind := errorKind(o.err)
			rep.ErrorKinds[q.class+" "+kind]++
			switch kind {
			case "status 429":
				cr.Refused429++
			case "status 503":
				cr.Refused503++
			default:
				cr.Errors++
			}
			continue
		}
		cr.Completed++
		rep.Completed++
		cr.PromptTokens += int64(o.promptTokens)
		cr.OutputTokens += int64(o.outputTokens)
		t, e := ms(o.ttft)/scale, ms(o.e2e)/scale
		ttfts[q.class], e2es[q.class] = append(ttfts[q.class], t), append(e2es[q.class], e)
		allTTFT, allE2E = append(allTTFT, t), append(allE2E, e)
	}
	for name, cr := range rep.Classes {
		if cr.DurationS > 0 {
			cr.RequestsPerS = float64(cr.Completed) / cr.DurationS
			cr.OutputTokensPerS = float64(cr.OutputTokens) / cr.DurationS
		}
		cr.TTFTms, cr.E2Ems = finite(summarize(ttfts[name])), finite(summarize(e2es[name]))
		rep.PromptTokens += cr.PromptTokens
		rep.OutputTokens += cr.OutputTokens
	}
	rep.RealDurationS = realElapsed.Seconds()
	rep.DurationS = realElapsed.Seconds() / scale
	if rep.DurationS > 0 {
		rep.RequestsPerS = float64(rep.Completed) / rep.DurationS
		rep.OutputTokensPerS = float64(rep.OutputTokens) / rep.DurationS
	}
	rep.TTFTms, rep.E2Ems = finite(summarize(allTTFT)), finite(summarize(allE2E))
	if len(rep.ErrorKinds) == 0 {
		rep.ErrorKinds = nil
	}
	if len(rep.Workers) == 0 {
		rep.Workers = nil
	}
}

// writeClassTable prints each class's figures after the run's table.
func writeClassTable(w io.Writer, rep *report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "class\tpriority\tsent\tok\terrors\t429\t503\treq/s\tout tok/s\tTTFT mean\tp50\tp95\tE2E p50\n")
	for _, name := range []string{classInteractive, classBatch} {
		c := rep.Classes[name]
		if c == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\n", name, c.Priority, c.Sent, c.Completed, c.Errors,
			c.Refused429, c.Refused503, c.RequestsPerS, c.OutputTokensPerS, c.TTFTms.Mean, c.TTFTms.P50, c.TTFTms.P95, c.E2Ems.P50)
	}
	tw.Flush()
}
