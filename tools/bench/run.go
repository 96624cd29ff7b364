package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kvgate/kvgate/deploy"
	"github.com/kvgate/kvgate/internal/harness"
)

// options are the flags shared by demo and bench.
type options struct {
	bin, tokenizer, model string
	logDir                string
	keepLogs              bool

	sims     int
	simArgs  string
	replicas []int
	// configs run on the uniform workload at every replica count; skew (a --prefix-dist such
	// as zipf:1.2, "" for none) runs skewConfigs at every skewReplicas count.
	configs      []configuration
	skew         string
	skewConfigs  []configuration
	skewReplicas []int
	// chatConfigs run loadgen's chat workload (multi-turn sessions over a shared system prompt,
	// sent to /v1/chat/completions) at every chatReplicas count; none when empty.
	chatConfigs  []configuration
	chatReplicas []int
	chat         chatWorkload
	// respConfigs run loadgen's responses workload (agent sessions by previous_response_id on
	// /v1/responses, responses.go) at every respReplicas count; none when empty.
	respConfigs  []configuration
	respReplicas []int
	resp         respWorkload
	// msgConfigs run loadgen's messages workload (coding-agent sessions on /v1/messages,
	// messages.go) at every msgReplicas count; none when empty.
	msgConfigs  []configuration
	msgReplicas []int
	msg         respWorkload
	// overload is the overload rows (issue 27, overload.go).
	overload overloadOptions
	// runs is how many times each row runs (each run with its own seed, seed+i): the report
	// gives the median and the min–max of the runs.
	runs int
	// scenarios (race, late, leave; see scenario.go) run scenarioConfigs on the uniform
	// workload at 1 gateway, beside the clean rows; none when empty.
	scenarios       []string
	scenarioConfigs []configuration
	// pdConfigs and pdChatConfigs are the prefill/decode rows (pd.go) on the long-prompt and
	// multi-turn workloads, sized by pd; none when empty.
	pdConfigs, pdChatConfigs []configuration
	pd                       pdWorkload
	// raceDelay, lateAfter and leaveAfter are the scenarios' moments (wall time).
	raceDelay, lateAfter, leaveAfter time.Duration
	nginx                            bool
	timeScale                        float64
	rate                             float64
	burstiness                       float64
	requests                         int
	prefixes                         int
	prefixTok                        int
	suffixTok                        int
	outputTok                        int
	seed                             uint64
	progress                         string

	out, png string // bench: docs files
	// note is a free-text line for the report (set by runBench: the machine's load).
	note string
}

var demoDefaults = options{
	sims: 3, replicas: []int{1}, nginx: false,
	configs: mustConfigs("round_robin,cache_aware/approx,cache_aware/events"),
	// A prefix-heavy workload whose prefixes (90 × 1000 tokens) do not fit in one simulator
	// (--num-blocks 2500 × 16 = 40k tokens) but do across three, like DESIGN §9 at 1/7 scale.
	simArgs:   "--num-blocks 2500",
	timeScale: 0.25, rate: 40, burstiness: 1, requests: 360, prefixes: 90, prefixTok: 1000, suffixTok: 50, outputTok: 32,
	// The skewed and chat workloads are off (-skew and -chat-configs turn them on, at 1 gateway).
	skewReplicas: []int{1}, chatReplicas: []int{1}, respReplicas: []int{1}, msgReplicas: []int{1},
	chat: defaultChat, resp: defaultResponses, msg: defaultMessages, runs: 1, pd: defaultPD,
	seed: 1, progress: "never",
}

var benchDefaults = options{
	sims: 3, replicas: []int{1, 2, 4}, nginx: true,
	// prefix_hash is the capacity reference (a static partition of the prefixes: no copy is
	// ever duplicated, no load balance); least_load is the balance reference of the skewed run.
	configs:     mustConfigs("round_robin,prefix_hash,cache_aware/approx,cache_aware/events,cost/events"),
	skew:        "zipf:1.2",
	skewConfigs: mustConfigs("least_load,prefix_hash,cache_aware/approx,cache_aware/events,cache_aware/events/smg,cost/events"), skewReplicas: []int{1},
	chatConfigs: mustConfigs("round_robin,cache_aware/approx,cache_aware/events"), chatReplicas: []int{1, 4},
	chat: defaultChat,
	// Issue 22: the agent workload, one gateway and four (sharing a Redis store).
	respConfigs: mustConfigs("round_robin,cache_aware/events"), respReplicas: []int{1, 4}, resp: defaultResponses,
	// Issue 23: coding agents on Anthropic's Messages API, one gateway and four.
	msgConfigs: mustConfigs("round_robin,cache_aware/events"), msgReplicas: []int{1, 4}, msg: defaultMessages,
	overload: defaultOverload,
	// Issue 21: every row three times, and the fleet that is not steady (least_load is the
	// latency reference of a join: it loses the same capacity and keeps no affinity).
	runs: 3, scenarios: []string{scenarioRace, scenarioLate, scenarioLeave},
	scenarioConfigs: mustConfigs("cache_aware/events,cost/events,least_load"),
	// Issue 26: 4 aggregated workers vs 2 prefill + 2 decode.
	pdConfigs: mustPDConfigs(defaultPDConfigs, workloadPDLong), pdChatConfigs: mustPDConfigs(defaultPDChatConfigs, workloadPDChat), pd: defaultPD,
	// DESIGN §9: 600 prefixes × 1000 tokens, 50-token suffix, 128 output tokens, 1800 requests,
	// on simulators with their default capacity (12500 blocks × 16 = 200k tokens each).
	timeScale: 0.5, rate: 30, burstiness: 1, requests: 1800, prefixes: 600, prefixTok: 1000, suffixTok: 50, outputTok: 128,
	seed: 1, progress: "auto",
	out: "docs/benchmarks.md", png: "docs/benchmarks.png",
}

// chatWorkload sizes loadgen's chat workload.
type chatWorkload struct {
	requests, turns, systemTok, userTok, outputTok int
	// rate is sessions per simulated second.
	rate float64
}

// defaultChat: 300 sessions of 4 turns (1200 requests) over a 500-token system prompt,
// 150-token user turns and 128-token answers, 7.5 sessions (30 requests) per second: a
// session's last prompt is about 1.5k tokens, and the 300 histories (about 450k tokens) are
// about what the three simulators' caches hold, so where a turn lands decides whether its history
// is a hit.
var defaultChat = chatWorkload{requests: 1200, turns: 4, systemTok: 500, userTok: 150, outputTok: 128, rate: 7.5}

func parseOptions(name string, args []string, def options, stderr io.Writer) (*options, error) {
	o := def
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin", "directory holding the gateway, simworker and loadgen binaries (make build)")
	fs.StringVar(&o.tokenizer, "tokenizer", ".cache/tokenizers/qwen3/tokenizer.json", "tokenizer.json shared by simulators, gateways and loadgen (tools/testdata.sh)")
	fs.StringVar(&o.model, "model", "qwen3-sim", "served model name")
	fs.StringVar(&o.logDir, "logs", "", "directory for process logs and loadgen reports (default: a temp dir, removed unless -keep-logs)")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the logs directory and print its path")
	fs.IntVar(&o.sims, "sims", def.sims, "simulated workers")
	fs.StringVar(&o.simArgs, "sim-args", def.simArgs, "extra simworker flags, space-separated")
	replicas := fs.String("replicas", joinInts(def.replicas), "gateway replica counts to run, comma-separated")
	configs := fs.String("configs", joinConfigs(def.configs), "configurations run on the uniform workload: policy[/index[/variant]], comma-separated; index none|approx|events (default events for cache_aware and cost, none otherwise); variant "+variantNames())
	fs.StringVar(&o.skew, "skew", def.skew, `loadgen --prefix-dist of the skewed workload (e.g. zipf:1.2); "" runs none`)
	skewConfigs := fs.String("skew-configs", joinConfigs(def.skewConfigs), "configurations run on the skewed workload (same syntax as -configs)")
	skewReplicas := fs.String("skew-replicas", joinInts(def.skewReplicas), "gateway replica counts of the skewed workload")
	chatConfigs := fs.String("chat-configs", joinConfigs(def.chatConfigs), `configurations run on the chat workload (same syntax as -configs; "" runs none)`)
	chatReplicas := fs.String("chat-replicas", joinInts(def.chatReplicas), "gateway replica counts of the chat workload")
	fs.IntVar(&o.chat.requests, "chat-requests", def.chat.requests, "chat: requests (turns) per configuration")
	fs.IntVar(&o.chat.turns, "chat-turns", def.chat.turns, "chat: turns per session")
	fs.IntVar(&o.chat.systemTok, "chat-system-tokens", def.chat.systemTok, "chat: tokens of the shared system prompt")
	fs.IntVar(&o.chat.userTok, "chat-user-tokens", def.chat.userTok, "chat: tokens per user message")
	fs.IntVar(&o.chat.outputTok, "chat-output-tokens", def.chat.outputTok, "chat: tokens per answer")
	fs.Float64Var(&o.chat.rate, "chat-rate", def.chat.rate, "chat: sessions started per simulated second")
	respConfigs := fs.String("responses-configs", joinConfigs(def.respConfigs), `configurations run on the responses workload (same syntax as -configs; "" runs none)`)
	respReplicas := fs.String("responses-replicas", joinInts(def.respReplicas), "gateway replica counts of the responses workload (more than one share a Redis store)")
	fs.IntVar(&o.resp.requests, "responses-requests", def.resp.requests, "responses: requests (turns) per configuration")
	fs.IntVar(&o.resp.turns, "responses-turns", def.resp.turns, "responses: turns per session")
	fs.IntVar(&o.resp.systemTok, "responses-system-tokens", def.resp.systemTok, "responses: tokens of the shared instructions")
	fs.IntVar(&o.resp.userTok, "responses-user-tokens", def.resp.userTok, "responses: tokens per user message")
	fs.IntVar(&o.resp.toolTok, "responses-tool-tokens", def.resp.toolTok, "responses: tokens per tool result")
	fs.IntVar(&o.resp.outputTok, "responses-output-tokens", def.resp.outputTok, "responses: most output tokens per turn (the scripted answers are shorter)")
	fs.Float64Var(&o.resp.rate, "responses-rate", def.resp.rate, "responses: sessions started per simulated second")
	msgConfigs := fs.String("messages-configs", joinConfigs(def.msgConfigs), `configurations run on the messages workload (same syntax as -configs; "" runs none)`)
	msgReplicas := fs.String("messages-replicas", joinInts(def.msgReplicas), "gateway replica counts of the messages workload")
	fs.IntVar(&o.msg.requests, "messages-requests", def.msg.requests, "messages: requests (turns) per configuration")
	fs.IntVar(&o.msg.turns, "messages-turns", def.msg.turns, "messages: turns per session")
	fs.IntVar(&o.msg.systemTok, "messages-system-tokens", def.msg.systemTok, "messages: tokens of the shared system prompt")
	fs.IntVar(&o.msg.userTok, "messages-user-tokens", def.msg.userTok, "messages: tokens per user message")
	fs.IntVar(&o.msg.toolTok, "messages-tool-tokens", def.msg.toolTok, "messages: tokens per tool result")
	fs.IntVar(&o.msg.outputTok, "messages-output-tokens", def.msg.outputTok, "messages: most output tokens per turn (the scripted answers are shorter)")
	fs.Float64Var(&o.msg.rate, "messages-rate", def.msg.rate, "messages: sessions started per simulated second")
	registerOverload(fs, &o.overload, def.overload)
	fs.IntVar(&o.runs, "runs", def.runs, "runs of every row, seeds -seed, -seed+1, ...: the report gives their median and min–max")
	scenarios := fs.String("scenarios", strings.Join(def.scenarios, ","), `fleets that are not steady, run on the uniform workload at 1 gateway: race (gateway first, workers -race-delay later), late (one worker joins -late-after into the load), leave (one drained -leave-after into it); "" runs none`)
	scenarioConfigs := fs.String("scenario-configs", joinConfigs(def.scenarioConfigs), "configurations run in each scenario (same syntax as -configs)")
	fs.DurationVar(&o.raceDelay, "race-delay", defaultRaceDelay, "race: how long after the gateways the workers start (wall time)")
	fs.DurationVar(&o.lateAfter, "late-after", defaultLateAfter, "late: when the last worker joins, after the load starts (wall time)")
	fs.DurationVar(&o.leaveAfter, "leave-after", defaultLeaveAfter, "leave: when one worker is drained, after the load starts (wall time)")
	fs.BoolVar(&o.nginx, "nginx", def.nginx, "put a real nginx (round-robin, SSE-safe) in front of the replicas")
	fs.Float64Var(&o.timeScale, "time-scale", def.timeScale, "simulator and loadgen --time-scale (wall = simulated × F)")
	fs.Float64Var(&o.rate, "rate", def.rate, "Poisson arrival rate, requests per simulated second")
	fs.Float64Var(&o.burstiness, "burstiness", def.burstiness, "gamma shape of inter-arrival gaps (1 = Poisson)")
	fs.IntVar(&o.requests, "num-requests", def.requests, "requests per configuration")
	fs.IntVar(&o.prefixes, "num-prefixes", def.prefixes, "distinct shared prefixes")
	fs.IntVar(&o.prefixTok, "prefix-tokens", def.prefixTok, "tokens per shared prefix")
	fs.IntVar(&o.suffixTok, "suffix-tokens", def.suffixTok, "unique suffix tokens per request")
	fs.IntVar(&o.outputTok, "output-tokens", def.outputTok, "output tokens per request")
	fs.Uint64Var(&o.seed, "seed", def.seed, "workload seed (the same for every configuration)")
	fs.StringVar(&o.progress, "progress", def.progress, "loadgen progress bar: auto, always, never")
	fs.StringVar(&o.note, "note", "", "free text added to the report's machine line")
	if def.out != "" {
		fs.StringVar(&o.out, "out", def.out, "markdown report to write")
		fs.StringVar(&o.png, "png", def.png, "PNG plot to write")
	}
	finishPD := addPDFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := finishPD(); err != nil {
		return nil, err
	}
	var err error
	if o.replicas, err = parseInts(*replicas); err != nil {
		return nil, fmt.Errorf("-replicas: %w", err)
	}
	if o.configs, err = parseConfigs(*configs); err != nil {
		return nil, fmt.Errorf("-configs: %w", err)
	}
	if o.skewConfigs, err = parseConfigs(*skewConfigs); err != nil {
		return nil, fmt.Errorf("-skew-configs: %w", err)
	}
	if o.skewReplicas, err = parseInts(*skewReplicas); err != nil {
		return nil, fmt.Errorf("-skew-replicas: %w", err)
	}
	if o.chatConfigs, err = parseConfigs(*chatConfigs); err != nil {
		return nil, fmt.Errorf("-chat-configs: %w", err)
	}
	if o.chatReplicas, err = parseInts(*chatReplicas); err != nil {
		return nil, fmt.Errorf("-chat-replicas: %w", err)
	}
	if o.respConfigs, err = parseConfigs(*respConfigs); err != nil {
		return nil, fmt.Errorf("-responses-configs: %w", err)
	}
	if o.respReplicas, err = parseInts(*respReplicas); err != nil {
		return nil, fmt.Errorf("-responses-replicas: %w", err)
	}
	if o.msgConfigs, err = parseConfigs(*msgConfigs); err != nil {
		return nil, fmt.Errorf("-messages-configs: %w", err)
	}
	if o.msgReplicas, err = parseInts(*msgReplicas); err != nil {
		return nil, fmt.Errorf("-messages-replicas: %w", err)
	}
	if o.scenarios, err = parseScenarios(*scenarios); err != nil {
		return nil, fmt.Errorf("-scenarios: %w", err)
	}
	if o.scenarioConfigs, err = parseConfigs(*scenarioConfigs); err != nil {
		return nil, fmt.Errorf("-scenario-configs: %w", err)
	}
	if o.sims < 1 || o.requests < 1 || o.timeScale <= 0 || o.runs < 1 {
		return nil, fmt.Errorf("-sims, -num-requests, -time-scale and -runs must be positive")
	}
	if len(o.scenarios) > 0 && o.sims < 2 {
		return nil, fmt.Errorf("-scenarios need at least 2 simulators (one joins or leaves)")
	}
	return &o, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// configuration is one row of the comparison.
type configuration struct {
	Policy  string // a gateway --policy
	Index   string // none | approx | events
	Variant string // "" or a key of variants: extra gateway flags
	// Workload is the loadgen --prefix-dist ("uniform" or e.g. "zipf:1.2"), workloadChat,
	// workloadResponses or workloadMessages.
	Workload string
	Gateways int
	// Scenario is how the fleet changes during the run ("" for a steady fleet; scenario.go).
	Scenario string
	// Fleet is a prefill/decode row's fleet (fleetAggregated or fleetPD; pd.go), "" for the
	// other rows.
	Fleet string
}

// variants are named sets of extra gateway flags a configuration may add.
var variants = map[string][]string{
	// SMG's cache_aware rule cascade unchanged: no per-worker load bound on cache hits.
	"smg": {"--bounded-load-factor", "0"},
}

func variantNames() string {
	names := make([]string, 0, len(variants))
	for n := range variants {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, "|") + " or FLAG=VALUE[+FLAG=VALUE...] (gateway flags without dashes)"
}

// variantArgs returns the gateway flags of a variant: a named one, or FLAG=VALUE pairs
// joined by '+'; nil when it is neither.
func variantArgs(v string) []string {
	if a, ok := variants[v]; ok || v == "" {
		return a
	}
	var args []string
	for _, kv := range strings.Split(v, "+") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "-") {
			return nil
		}
		args = append(args, "--"+k, val)
	}
	return args
}

// indexed reports whether a policy routes on cache state (and so takes an index mode).
func indexed(policy string) bool { return policy == "cache_aware" || policy == "cost" }

// parseConfigs parses -configs: policy[/index[/variant]], comma-separated.
func parseConfigs(s string) ([]configuration, error) {
	var out []configuration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		parts := strings.Split(f, "/")
		c := configuration{Policy: parts[0], Index: "none"}
		if indexed(c.Policy) {
			c.Index = "events"
		}
		if len(parts) > 1 {
			c.Index = parts[1]
		}
		if len(parts) > 2 {
			c.Variant = parts[2]
		}
		switch {
		case len(parts) > 3 || c.Policy == "":
			return nil, fmt.Errorf("bad configuration %q: want policy[/index[/variant]]", f)
		case c.Index != "none" && c.Index != "approx" && c.Index != "events":
			return nil, fmt.Errorf("configuration %q: index %q: want none, approx or events", f, c.Index)
		case c.Index != "none" && !indexed(c.Policy):
			return nil, fmt.Errorf("configuration %q: %s does not use an index", f, c.Policy)
		case c.Variant != "" && variantArgs(c.Variant) == nil:
			return nil, fmt.Errorf("configuration %q: unknown variant %q (known: %s)", f, c.Variant, variantNames())
		}
		out = append(out, c)
	}
	return out, nil
}

func mustPDConfigs(s, workload string) []configuration {
	c, err := parsePDConfigs(s, workload)
	if err != nil {
		panic(err)
	}
	return c
}

func mustConfigs(s string) []configuration {
	c, err := parseConfigs(s)
	if err != nil {
		panic(err)
	}
	return c
}

func joinConfigs(cs []configuration) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.spec())
	}
	return strings.Join(out, ",")
}

// spec is the -configs form of c.
func (c configuration) spec() string {
	s := c.Policy
	if c.Index != "none" || c.Variant != "" {
		s += "/" + c.Index
	}
	if c.Variant != "" {
		s += "/" + c.Variant
	}
	return s
}

// workloadChat labels loadgen's chat workload.
const workloadChat = "chat"

// workloadOf returns the workload label of a --prefix-dist value.
func workloadOf(dist string) string {
	if dist == "" {
		return "uniform"
	}
	return dist
}

// plan is every configuration a command runs, in table order: the uniform workload at each
// replica count, then the skewed one.
func (o *options) plan() []configuration {
	var out []configuration
	add := func(cs []configuration, workload string, replicas []int) {
		for _, gw := range replicas {
			for _, c := range cs {
				c.Workload, c.Gateways = workload, gw
				out = append(out, c)
			}
		}
	}
	add(o.configs, "uniform", o.replicas)
	if o.skew != "" {
		add(o.skewConfigs, workloadOf(o.skew), o.skewReplicas)
	}
	add(o.chatConfigs, workloadChat, o.chatReplicas)
	add(o.respConfigs, workloadResponses, o.respReplicas)
	add(o.msgConfigs, workloadMessages, o.msgReplicas)
	for _, sc := range o.scenarios {
		for _, c := range o.scenarioConfigs {
			c.Workload, c.Gateways, c.Scenario = "uniform", 1, sc
			out = append(out, c)
		}
	}
	out = append(out, o.pdConfigs...)
	out = append(out, o.pdChatConfigs...)
	return append(out, o.overloadPlan()...)
}

// gatewayOptions are the --policy, --kv-index and extra flags of c.
func (c configuration) gatewayOptions() (policy, kvIndex string, args []string) {
	args = variantArgs(c.Variant)
	switch c.Index {
	case "approx":
		return c.Policy, "off", args
	case "events":
		return c.Policy, "auto", args
	}
	return c.Policy, "", args
}

// tag names c's processes, log files and reports.
func (c configuration) tag() string {
	t := fmt.Sprintf("%s-%s-%s", strings.ReplaceAll(c.Workload, ":", ""), c.Policy, c.Index)
	if c.Variant != "" {
		t += "-" + c.Variant
	}
	if c.Scenario != "" {
		t += "-" + c.Scenario
	}
	if c.Fleet != "" {
		t += "-" + c.Fleet
	}
	return fmt.Sprintf("%s-%dgw", strings.NewReplacer("=", "", "+", "-").Replace(t), c.Gateways)
}

// resultLabels are c's labels on loadgen's RESULT line and in its JSON report, for run run.
func (c configuration) resultLabels(run int) string {
	l := fmt.Sprintf("policy=%s index=%s gateways=%d workload=%s", c.Policy, c.Index, c.Gateways, c.Workload)
	if c.Variant != "" {
		l += " variant=" + c.Variant
	}
	if c.Scenario != "" {
		l += " scenario=" + c.Scenario
	}
	if c.Fleet != "" {
		l += " fleet=" + c.Fleet
	}
	return l + fmt.Sprintf(" run=%d", run)
}

// summary mirrors loadgen's JSON summaries (milliseconds, simulated).
type summary struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
}

// result is one configuration's outcome: loadgen's JSON report plus its RESULT line.
type result struct {
	configuration
	Requests         int      `json:"requests"`
	Completed        int      `json:"completed"`
	Errors           int      `json:"errors"`
	RequestsPerS     float64  `json:"requests_per_s"`
	OutputTokensPerS float64  `json:"output_tokens_per_s"`
	DurationS        float64  `json:"duration_s"`
	RealDurationS    float64  `json:"real_duration_s"`
	HitRate          *float64 `json:"hit_rate"`
	IdealHitRate     *float64 `json:"ideal_hit_rate"`
	TTFTms           summary  `json:"ttft_ms"`
	E2Ems            summary  `json:"e2e_ms"`
	ITLms            summary  `json:"itl_ms"`
	Workers          map[string]int
	// PD is a prefill/decode row's kvgate_pd_requests_total by outcome at the end of the run.
	PD map[string]float64 `json:"-"`
	// IndexKeys and IndexBlocks are the first gateway's event index at the end of the run
	// (GET /workers, the default pool): distinct block keys, and (worker, block) pairs; their
	// difference is the blocks cached on more than one worker.
	IndexKeys   int `json:"-"`
	IndexBlocks int `json:"-"`
	// Runs is how many runs a row's figures are the median of (runs.go), Spread their
	// min–max (nil for one run); ResultLines holds every run's RESULT line.
	Runs        int        `json:"-"`
	Spread      *runSpread `json:"-"`
	ResultLines []string   `json:"-"`
	ResultLine  string     `json:"-"`
	// Classes (overload rows: loadgen's two_class figures per class), QueueWaits (the
	// gateway's queue waits by band at the end of the run) and Each (a row's runs).
	Classes    map[string]classFigures `json:"classes,omitempty"`
	QueueWaits map[string]queueWait    `json:"-"`
	HandOffs   handOffs                `json:"-"`
	Each       []result                `json:"-"`
}

// label names the configuration in the plot's legend (workload and replicas aside).
func (r result) label() string {
	l := r.Policy
	if r.Index != "none" {
		l += " " + r.Index
	}
	if r.Variant != "" {
		l += " " + r.Variant
	}
	if r.Scenario != "" {
		l += " " + r.Scenario
	}
	if r.Fleet != "" {
		l += " " + r.Fleet
	}
	return l
}

// duplicated is the blocks the event index holds on more than one worker at the end of the
// run: (worker, block) pairs beyond one per distinct key.
func (r result) duplicated() int { return max(r.IndexBlocks-r.IndexKeys, 0) }

func (r result) hit() float64 {
	if r.HitRate == nil {
		return math.NaN()
	}
	return *r.HitRate
}

// runner starts fleets and runs loadgen.
type runner struct {
	o      *options
	l      *harness.Launcher
	stderr io.Writer
}

func newRunner(o *options, stderr io.Writer) (*runner, func(), error) {
	abs := func(p string) (string, error) { return filepath.Abs(p) }
	bin, err := abs(o.bin)
	if err != nil {
		return nil, nil, err
	}
	tok, err := abs(o.tokenizer)
	if err != nil {
		return nil, nil, err
	}
	bins := harness.Binaries{Gateway: filepath.Join(bin, "gateway"), Simworker: filepath.Join(bin, "simworker"), Loadgen: filepath.Join(bin, "loadgen")}
	for _, p := range []string{bins.Gateway, bins.Simworker, bins.Loadgen, tok} {
		if _, err := os.Stat(p); err != nil {
			return nil, nil, fmt.Errorf("%w (run make build and tools/testdata.sh, or pass -bin/-tokenizer)", err)
		}
	}
	logDir := o.logDir
	cleanup := func() {}
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "kvgate-bench"); err != nil {
			return nil, nil, err
		}
		if !o.keepLogs {
			cleanup = func() { os.RemoveAll(logDir) }
		}
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, nil, err
	}
	if o.keepLogs {
		fmt.Fprintf(stderr, "bench: logs in %s\n", logDir)
	}
	l := &harness.Launcher{Bin: bins, Tokenizer: tok, Model: o.model, LogDir: logDir, StartTimeout: 90 * time.Second}
	return &runner{o: o, l: l, stderr: stderr}, cleanup, nil
}

// fleet is the processes of one configuration.
type fleet struct {
	procs []*harness.Process
	sims  []*harness.Sim
	gws   []*harness.Gateway
	url   string
	// config is the gateways' --config file when the scenario changes the workers during the
	// run ("" otherwise: the workers are --worker flags).
	config string
	// simArgs and gwArgs are the workload's extra simulator and gateway flags (responses).
	simArgs, gwArgs []string
}

func (f *fleet) stop() {
	for i := len(f.procs) - 1; i >= 0; i-- {
		_ = f.procs[i].Stop(harness.DefaultStopTimeout)
	}
}

// startSims starts cold simulators first..first+n-1 (of -sims) into f.sims, at the fixed ports
// of ports when given (race).
func (r *runner) startSims(ctx context.Context, f *fleet, tag string, ports [][3]int, first, n int) error {
	var simArgs []string
	if s := strings.TrimSpace(r.o.simArgs); s != "" {
		simArgs = strings.Fields(s)
	}
	simArgs = append(simArgs, f.simArgs...)
	if f.sims == nil {
		f.sims = make([]*harness.Sim, r.o.sims)
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := first; i < first+n; i++ {
		g.Go(func() error {
			so := harness.SimOptions{Name: fmt.Sprintf("%s-sim%d", tag, i), Events: true, TimeScale: r.o.timeScale, Args: simArgs}
			if ports != nil {
				so.Port, so.EventsPort, so.ReplayPort = ports[i][0], ports[i][1], ports[i][2]
			}
			s, err := r.l.StartSim(gctx, so)
			f.sims[i] = s
			return err
		})
	}
	err := g.Wait()
	for _, s := range f.sims[first : first+n] {
		if s != nil {
			f.procs = append(f.procs, s.Process)
		}
	}
	return err
}

// startGateways starts c's gateway replicas over workers (or the --config file f.config) and
// waits for their readiness unless notReady.
func (r *runner) startGateways(ctx context.Context, f *fleet, c configuration, workers []string, notReady bool) error {
	policy, kvIndex, gwArgs := c.gatewayOptions()
	gwArgs = append(slices.Clip(gwArgs), f.gwArgs...)
	if f.config != "" {
		gwArgs, workers = append(slices.Clip(gwArgs), "--config", f.config), nil
	}
	f.gws = make([]*harness.Gateway, c.Gateways)
	g, gctx := errgroup.WithContext(ctx)
	for i := range f.gws {
		g.Go(func() error {
			gw, err := r.l.StartGateway(gctx, harness.GatewayOptions{Name: fmt.Sprintf("%s-gateway%d", c.tag(), i), Workers: workers,
				Policy: policy, KVIndex: kvIndex, Args: gwArgs, NotReadyOK: notReady})
			f.gws[i] = gw
			return err
		})
	}
	err := g.Wait()
	for _, gw := range f.gws {
		if gw != nil {
			f.procs = append(f.procs, gw.Process)
		}
	}
	return err
}

// startNginx puts nginx in front of the gateways when configured; f.url is where the load goes.
func (r *runner) startNginx(ctx context.Context, f *fleet) error {
	f.url = f.gws[0].URL
	if !r.o.nginx {
		return nil
	}
	var ups []string
	for _, gw := range f.gws {
		ups = append(ups, fmt.Sprintf("127.0.0.1:%d", gw.Port))
	}
	n, err := r.l.StartNginx(ctx, harness.NginxOptions{Upstreams: ups, Config: func(listen string, upstreams []string, prefix string) (string, error) {
		return deploy.NginxConfig(deploy.NginxParams{Listen: listen, Upstreams: upstreams, Standalone: true, Prefix: prefix, WorkerProcesses: 1})
	}})
	if err != nil {
		return err
	}
	f.procs = append(f.procs, n.Process)
	f.url = n.URL
	return nil
}

// workerSpecs are the --worker specs of the first n simulators.
func (f *fleet) workerSpecs(n int) []string {
	var out []string
	for _, s := range f.sims[:n] {
		out = append(out, s.WorkerSpec(true))
	}
	return out
}

// loadgenArgs are the loadgen flags of run run of configuration c against url.
func (r *runner) loadgenArgs(c configuration, run int, url, jsonPath string, f *fleet) []string {
	o := r.o
	if c.Fleet != "" {
		return r.pdLoadgenArgs(c, run, url, jsonPath, f)
	}
	args := []string{"--url", url, "--model", o.model, "--burstiness", fmt.Sprint(o.burstiness),
		"--time-scale", fmt.Sprint(o.timeScale), "--seed", fmt.Sprint(o.seed + uint64(run)),
		"--json", jsonPath, "--progress", o.progress, "--result-line", c.resultLabels(run)}
	if c.Workload == workloadOverload {
		args = append(args, r.overloadLoadgenArgs(c)...)
	} else if c.Workload == workloadResponses {
		args = append(args, r.responsesLoadgenArgs()...)
	} else if c.Workload == workloadMessages {
		args = append(args, r.messagesLoadgenArgs()...)
	} else if c.Workload == workloadChat {
		// The model directory: loadgen renders the conversations with its template for the
		// ideal hit rate on the engine's ids.
		ch := o.chat
		args = append(args, "--tokenizer", filepath.Dir(r.l.Tokenizer), "--workload", workloadChat,
			"--num-requests", fmt.Sprint(ch.requests), "--turns", fmt.Sprint(ch.turns), "--system-tokens", fmt.Sprint(ch.systemTok),
			"--user-tokens", fmt.Sprint(ch.userTok), "--output-tokens", fmt.Sprint(ch.outputTok), "--rate", fmt.Sprint(ch.rate))
	} else {
		args = append(args, "--tokenizer", r.l.Tokenizer, "--workload", "prefix_repetition", "--prefix-dist", c.Workload,
			"--num-prefixes", fmt.Sprint(o.prefixes), "--prefix-tokens", fmt.Sprint(o.prefixTok),
			"--suffix-tokens", fmt.Sprint(o.suffixTok), "--output-tokens", fmt.Sprint(o.outputTok),
			"--num-requests", fmt.Sprint(o.requests), "--rate", fmt.Sprint(o.rate))
	}
	for _, s := range f.sims {
		args = append(args, "--worker-metrics", s.MetricsURL())
	}
	return args
}

// runOne runs run run of configuration c on a fresh fleet and returns loadgen's report, with
// the first gateway's index at the end of the run.
func (r *runner) runOne(ctx context.Context, c configuration, run int) (result, error) {
	res := result{configuration: c}
	start := time.Now()
	f, err := r.startFleet(ctx, c, run)
	if err != nil {
		return res, fmt.Errorf("start fleet for %s: %w", res.label(), err)
	}
	defer f.stop()
	tag := fmt.Sprintf("%s-run%d", c.tag(), run)
	jsonPath := filepath.Join(r.l.LogDir, tag+".json")
	var out bytes.Buffer
	lg := harness.Command{Name: tag + "-loadgen", Path: r.l.Bin.Loadgen, Args: r.loadgenArgs(c, run, f.url, jsonPath, f)}
	lctx, stopEvent := context.WithCancel(ctx)
	event := r.scenarioEvent(lctx, c, f)
	runErr := harness.Run(ctx, lg, &out, r.stderr) // stderr: the progress bar
	stopEvent()
	eventErr := <-event
	_ = os.WriteFile(filepath.Join(r.l.LogDir, tag+".loadgen.txt"), out.Bytes(), 0o644)
	if runErr != nil {
		return res, fmt.Errorf("loadgen for %s: %w\n%s", res.label(), runErr, out.String())
	}
	if eventErr != nil {
		return res, fmt.Errorf("%s: scenario %s: %w", res.label(), c.Scenario, eventErr)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "RESULT ") {
			res.ResultLine = strings.TrimSpace(line)
		}
	}
	if res.ResultLine == "" {
		return res, fmt.Errorf("loadgen for %s printed no RESULT line:\n%s", res.label(), out.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("loadgen report %s: %w", jsonPath, err)
	}
	res.configuration = c
	if res.IndexKeys, res.IndexBlocks, err = readIndex(ctx, f.gws[0].AdminURL); err != nil {
		return res, fmt.Errorf("%s: %w", res.label(), err)
	}
	if c.Workload == workloadOverload {
		if res.QueueWaits, res.HandOffs, err = readQueueMetrics(ctx, f.gws[0].MetricsURL()); err != nil {
			return res, fmt.Errorf("%s: %w", res.label(), err)
		}
		qw, _ := json.Marshal(res.QueueWaits) // for bench report
		_ = os.WriteFile(filepath.Join(r.l.LogDir, tag+".queue.json"), qw, 0o644)
		ho, _ := json.Marshal(res.HandOffs)
		_ = os.WriteFile(filepath.Join(r.l.LogDir, tag+".handoffs.json"), ho, 0o644)
	}
	ix, _ := json.Marshal(indexCounts{Keys: res.IndexKeys, Blocks: res.IndexBlocks}) // for bench report
	_ = os.WriteFile(filepath.Join(r.l.LogDir, tag+".index.json"), ix, 0o644)
	if err := r.recordPDOutcomes(ctx, &res, f, tag); err != nil {
		return res, fmt.Errorf("%s: %w", res.label(), err)
	}
	fmt.Fprintf(r.stderr, "bench: %-8s %-32s gateways=%d run=%d  hit %s  TTFT mean %s  (%.0fs)\n", c.Workload, res.label(), c.Gateways, run,
		pct(res.hit()), fmtMS(res.TTFTms.Mean), time.Since(start).Seconds())
	return res, nil
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func fmtMS(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}
