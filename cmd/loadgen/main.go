package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(realMain())
}

// realMain runs the command and returns its exit status: 0 (also for -help), 1 on error.
func realMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// options is the parsed command line.
type options struct {
	gen           genConfig
	url, endpoint string
	chatEndpoint  string
	respEndpoint  string
	msgEndpoint   string
	model         string
	apiKey        string
	tokenizer     string
	chatTemplate  string
	tokenIDs      bool
	concurrency   int
	timeScale     float64
	timeout       time.Duration
	workerMetrics []string
	jsonPath      string
	resultLine    string
	idealOnly     bool
	progress      string
	// two is the two_class workload (twoclass.go).
	two twoClassConfig
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g := &o.gen
	fs.StringVar(&o.url, "url", "http://127.0.0.1:30000", "base URL of the OpenAI-compatible server (gateway, nginx or engine)")
	fs.StringVar(&o.endpoint, "endpoint", "/v1/completions", "completions path (prefix_repetition, trace)")
	fs.StringVar(&o.chatEndpoint, "chat-endpoint", "/v1/chat/completions", "chat completions path (chat)")
	fs.StringVar(&o.respEndpoint, "responses-endpoint", "/v1/responses", "Responses API path (responses)")
	fs.StringVar(&o.msgEndpoint, "messages-endpoint", "/v1/messages", "Anthropic Messages API path (messages)")
	fs.StringVar(&o.model, "model", "", "model name sent in requests (default: the first of GET /v1/models)")
	fs.StringVar(&o.apiKey, "api-key", os.Getenv("OPENAI_API_KEY"), "`KEY` sent as Authorization: Bearer to --url (a gateway started with --api-key); default $OPENAI_API_KEY, as the OpenAI clients read it. Never sent to --worker-metrics")
	fs.StringVar(&g.kind, "workload", workloadPrefix, "prefix_repetition, chat, responses (agent sessions by previous_response_id, with a function tool), messages (coding-agent sessions on Anthropic's /v1/messages, with tools), trace or two_class (interactive and batch classes at their own rates and bands)")
	fs.IntVar(&g.numRequests, "num-requests", 1800, "requests to send (trace: 0 = every line)")
	fs.IntVar(&g.numPrefixes, "num-prefixes", 600, "prefix_repetition: distinct shared prefixes")
	fs.Func("prefix-dist", "prefix_repetition: prefix popularity, uniform (each prefix equally often) or zipf:S (prefix k drawn with probability ∝ 1/(k+1)^S)", func(s string) error {
		d, err := parsePrefixDist(s)
		g.prefixDist = d
		return err
	})
	fs.IntVar(&g.prefixTokens, "prefix-tokens", 1000, "prefix_repetition: tokens per shared prefix")
	fs.IntVar(&g.suffixTokens, "suffix-tokens", 50, "prefix_repetition: tokens of each request's unique suffix")
	fs.IntVar(&g.outputTokens, "output-tokens", 128, "tokens generated per request (max_tokens with ignore_eos)")
	fs.IntVar(&g.turns, "turns", 4, "chat, responses, messages: turns per session")
	fs.IntVar(&g.systemTokens, "system-tokens", 200, "chat, messages: tokens of the system prompt shared by all sessions (responses: of the instructions)")
	fs.IntVar(&g.userTokens, "user-tokens", 100, "chat, responses, messages: tokens per user message")
	fs.IntVar(&g.imagePx, "chat-image-px", 0, "chat: each session's first user turn carries one PX×PX PNG (data: URL) of its own before its text; 0 = none")
	fs.BoolVar(&g.imageUUID, "chat-image-uuid", true, "chat: the images carry a uuid per session (the engine's mm hash, which lets the gateway route exactly past them)")
	fs.IntVar(&g.toolTokens, "tool-tokens", 100, "responses: tokens of each function_call_output (messages: of each tool_result), the tool's result")
	fs.DurationVar(&g.thinkTime, "think-time", 0, "chat, responses: simulated pause between an answer and the next turn")
	fs.StringVar(&g.tracePath, "trace", "", "trace: JSONL file")
	fs.IntVar(&g.traceBlockSize, "trace-block-size", 512, "trace: tokens per hash id (512 in the Mooncake traces)")
	fs.Float64Var(&g.rate, "rate", 0, "open-loop arrival rate in requests (chat: sessions) per simulated second; 0 = all at once (trace: use its timestamps)")
	fs.Float64Var(&g.burstiness, "burstiness", 1, "gamma shape of inter-arrival gaps: 1 = Poisson, <1 burstier, >1 smoother")
	fs.Uint64Var(&g.seed, "seed", 0, "random seed of the workload and schedule")
	fs.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json, or a model directory holding it: build prompts as text of exact token lengths (chat: a model directory's template renders the conversations for the ideal hit rate)")
	fs.StringVar(&o.chatTemplate, "chat-template", "", "chat: the template FILE the server renders with, when not the --tokenizer directory's (for the ideal hit rate)")
	fs.BoolVar(&o.tokenIDs, "token-ids", false, "send prompts as token ids (no tokenizer needed)")
	vocabLo := fs.Uint("min-token-id", 1000, "token-id prompts: smallest id")
	vocabHi := fs.Uint("max-token-id", 32000, "token-id prompts: largest id + 1")
	fs.IntVar(&o.concurrency, "concurrency", 0, "maximum requests in flight (0 = unbounded); without --rate, a closed loop")
	fs.Float64Var(&o.timeScale, "time-scale", 1, "the simulators' --time-scale F (wall = simulated × F, e.g. 0.02 = 50× faster): the schedule is run × F, times are reported ÷ F and rates × F")
	fs.DurationVar(&o.timeout, "request-timeout", 10*time.Minute, "real-time limit per request")
	fs.Func("worker-metrics", "a worker's Prometheus /metrics URL (repeatable); the fleet hit rate is read before and after", func(s string) error {
		if _, err := url.ParseRequestURI(s); err != nil {
			return err
		}
		o.workerMetrics = append(o.workerMetrics, s)
		return nil
	})
	fs.StringVar(&o.jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&o.resultLine, "result-line", "", `print a final "RESULT <these k=v> requests=.. errors=.. hit_rate=.. ttft_p50_ms=.. ttft_mean_ms=.." line`)
	fs.BoolVar(&o.idealOnly, "ideal", false, "only generate the workload and print its ideal prefix-cache hit rate; send nothing")
	fs.StringVar(&o.progress, "progress", "auto", "progress bar on stderr: auto (when a terminal), always, never")
	registerTwoClass(fs, &o.two)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("loadgen: unexpected arguments %q", fs.Args())
	}
	switch {
	case (o.tokenizer == "") == !o.tokenIDs && g.kind != workloadTrace:
		return nil, errors.New("loadgen: give exactly one of --tokenizer FILE and --token-ids")
	case o.tokenizer != "" && o.tokenIDs:
		return nil, errors.New("loadgen: --tokenizer and --token-ids are exclusive")
	case g.kind == workloadChat && o.tokenIDs:
		return nil, errChatNeedsText
	case g.kind == workloadResponses && o.tokenIDs:
		return nil, errResponsesNeedsText
	case g.kind == workloadMessages && o.tokenIDs:
		return nil, errMessagesNeedsText
	case !(o.timeScale > 0) || math.IsInf(o.timeScale, 0):
		return nil, errors.New("loadgen: --time-scale must be > 0")
	case g.rate < 0 || !(g.burstiness > 0):
		return nil, errors.New("loadgen: --rate must be ≥ 0 and --burstiness > 0")
	case *vocabHi <= *vocabLo || *vocabHi > math.MaxUint32:
		return nil, errors.New("loadgen: need --min-token-id < --max-token-id")
	case g.kind == workloadTrace && g.tracePath == "":
		return nil, errors.New("loadgen: --workload trace needs --trace FILE")
	case g.imagePx < 0 || g.imagePx > maxImagePx || g.imagePx > 0 && g.kind != workloadChat:
		return nil, fmt.Errorf("loadgen: --chat-image-px is 0 to %d, and only for --workload chat", maxImagePx)
	case o.progress != "auto" && o.progress != "always" && o.progress != "never":
		return nil, errors.New("loadgen: --progress is auto, always or never")
	}
	g.vocabLo, g.vocabHi = uint32(*vocabLo), uint32(*vocabHi)
	return o, nil
}

// run is the whole command; tests call it with a context and captured outputs.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, stderrTTY bool) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.gen.kind == workloadTwoClass {
		return runTwoClass(ctx, o, stdout)
	}
	p, tok, err := buildPlan(o)
	if err != nil {
		return err
	}
	if o.idealOnly {
		if p.sessions != nil {
			return fmt.Errorf("loadgen: --ideal: %s's ideal depends on the answers; it is reported after a run", o.gen.kind)
		}
		fmt.Fprintf(stdout, "%s\nideal prefix cache hit rate: %s (%d of %d prompt tokens)\n", p.describe, pct(ptr(p.ideal())), p.idealHit, p.idealTotal)
		return nil
	}

	labels, err := parseLabels(o.resultLine)
	if err != nil {
		return err
	}
	streams := o.concurrency
	if streams == 0 {
		streams = 1024
	}
	base := strings.TrimRight(o.url, "/")
	client, err := newHTTPClient(streams, base, o.apiKey)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	r, err := newPlanRunner(ctx, o, client, base, p, tok)
	if err != nil {
		return err
	}
	rep := newReport(o, p, r.c.url, labels)
	if p.sessions != nil && r.chatIDs == nil {
		rep.IdealNote = o.gen.kind + "'s ideal needs the chat template: give --tokenizer a model directory, or --chat-template"
	}
	fleet := scrapeBefore(ctx, client, o.workerMetrics)

	var bar *progress
	if o.progress == "always" || (o.progress == "auto" && stderrTTY) {
		bar = startProgress(stderr, r.total, func() (int64, int64) { return r.done.Load(), r.errs.Load() }, 250*time.Millisecond)
	}
	_, elapsed := r.run(ctx)
	if bar != nil {
		bar.stop()
	}
	buildReport(rep, r, elapsed)
	fleet.after(ctx, rep)
	if p.sessions != nil {
		if t := r.idealTotal.Load(); t > 0 {
			rep.IdealHitRate = ptr(float64(r.idealHit.Load()) / float64(t))
		}
	} else {
		rep.IdealHitRate = ptr(p.ideal())
	}
	return writeResults(ctx, stdout, o, rep)
}

// buildPlan generates the workload of o: prompts of token ids, or, with --tokenizer, text of
// exact token lengths (tok is then its codec, else nil).
func buildPlan(o *options) (p *plan, tok *hfCodec, err error) {
	m := promptMaker{lo: o.gen.vocabLo, hi: o.gen.vocabHi}
	if o.tokenizer != "" {
		if tok, err = loadCodec(o.tokenizer); err != nil {
			return nil, nil, err
		}
		if m.tb, err = newTextBuilder(tok); err != nil {
			return nil, nil, err
		}
	}
	if p, err = generate(o.gen, m); err != nil {
		return nil, nil, err
	}
	return p, tok, nil
}

// newPlanRunner returns the runner of p against base: completions, or chat for chat sessions
// (with the template's ids for chat's ideal hit rate when there is a template), for --model or
// else the server's first model.
func newPlanRunner(ctx context.Context, o *options, client *http.Client, base string, p *plan, tok *hfCodec) (*runner, error) {
	if o.model == "" {
		var err error
		if o.model, err = firstModel(ctx, client, base); err != nil {
			return nil, err
		}
	}
	c := &completer{client: client, url: base + o.endpoint, model: o.model}
	var ids *chatIDs
	if p.sessions != nil {
		c.url, c.chat, c.keepText = base+o.chatEndpoint, true, true
		var err error
		if ids, err = loadChatIDs(o.tokenizer, o.chatTemplate, tok.t); err != nil {
			return nil, err
		}
	}
	if p.agent {
		c.url = base + o.respEndpoint
	}
	if p.messages {
		c.url = base + o.msgEndpoint
	}
	r := newRunner(c, p, o.timeScale, o.concurrency, o.timeout)
	if p.sessions != nil {
		r.chatIDs, r.tok = ids, tok
	}
	if p.agent {
		var err error
		if r.agentIDs, err = newAgentIDs(ids); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// newReport starts the report of a run of p against url: what was asked for, when.
func newReport(o *options, p *plan, url string, labels map[string]string) *report {
	rep := &report{
		Workload: o.gen.kind, Description: p.describe, URL: url, Model: o.model,
		TimeScale: o.timeScale, Rate: o.gen.rate, Burstiness: o.gen.burstiness, Concurrency: o.concurrency,
		Seed: o.gen.seed, Started: time.Now().UTC(), Labels: labels,
	}
	if len(labels) == 0 {
		rep.Labels = nil
	}
	return rep
}

// fleetScrape measures the fleet's prefix-cache hit rate over a run from the --worker-metrics
// counters read before and after it.
type fleetScrape struct {
	client *http.Client
	urls   []string // none: nothing is measured
	before cacheCounters
	err    error // the first failed scrape
}

// scrapeBefore reads the counters before the run.
func scrapeBefore(ctx context.Context, client *http.Client, urls []string) *fleetScrape {
	f := &fleetScrape{client: client, urls: urls}
	if len(urls) > 0 {
		f.before, f.err = scrapeFleet(ctx, client, urls)
	}
	return f
}

// after reads the counters again and records the run's hits, queries and hit rate in rep, or
// the error that prevented it.
func (f *fleetScrape) after(ctx context.Context, rep *report) {
	if len(f.urls) > 0 && f.err == nil {
		// The run's context may be cancelled (Ctrl-C): still read the counters.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		after, err := scrapeFleet(sctx, f.client, f.urls)
		cancel()
		f.err = err
		if err == nil {
			rep.HitTokens, rep.QueryTokens = after.hits-f.before.hits, after.queries-f.before.queries
			if rep.QueryTokens > 0 {
				rep.HitRate = ptr(rep.HitTokens / rep.QueryTokens)
			}
		}
	}
	if f.err != nil {
		rep.MetricsError = f.err.Error()
	}
}

// writeResults prints the report's table (and its RESULT line with --result-line), writes
// --json, and reports an interrupted run as an error.
func writeResults(ctx context.Context, stdout io.Writer, o *options, rep *report) error {
	writeTable(stdout, rep)
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, rep); err != nil {
			return err
		}
	}
	if o.resultLine != "" {
		fmt.Fprintln(stdout, resultLine(o.resultLine, rep))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("loadgen: interrupted: %w", err)
	}
	return nil
}

// firstModel asks the server for its models and returns the first id.
func firstModel(ctx context.Context, client *http.Client, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("loadgen: models: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("loadgen: models: %w (or pass --model)", err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("loadgen: models: status %d (or pass --model)", resp.StatusCode)
	}
	if err := decodeJSON(resp.Body, &list); err != nil || len(list.Data) == 0 {
		return "", fmt.Errorf("loadgen: models: no model listed (or pass --model): %v", err)
	}
	return list.Data[0].ID, nil
}
