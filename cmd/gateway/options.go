package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/router"
	"github.com/kvgate/kvgate/pkg/worker"
)

// options is the gateway's configuration: flags and the --config YAML file use the same names
// (dashes in flags, underscores in YAML). Flags given on the command line override the file;
// --worker flags add to the file's workers.
type options struct {
	Host           string `yaml:"host"`
	Port           int    `yaml:"port"`
	PrometheusPort int    `yaml:"prometheus_port"`

	ModelPath string `yaml:"model_path"`
	Tokenizer string `yaml:"tokenizer"`
	Model     string `yaml:"model"`

	Workers []workerEntry `yaml:"workers"`

	Policy              string        `yaml:"policy"`
	CacheThreshold      float64       `yaml:"cache_threshold"`
	BalanceAbsThreshold int64         `yaml:"balance_abs_threshold"`
	BalanceRelThreshold float64       `yaml:"balance_rel_threshold"`
	BoundedLoadFactor   float64       `yaml:"bounded_load_factor"`
	PrefillWeight       float64       `yaml:"prefill_weight"`
	QueueWeight         float64       `yaml:"queue_weight"`
	DecodeWeight        float64       `yaml:"decode_weight"`
	Temperature         float64       `yaml:"temperature"`
	KVIndex             string        `yaml:"kv_index"`
	BlockSize           int           `yaml:"block_size"`
	KVListen            string        `yaml:"kv_listen"`
	IndexMaxBlocks      int           `yaml:"index_max_blocks"`
	TreeMaxBlocks       int           `yaml:"tree_max_blocks"`
	TreeTTL             time.Duration `yaml:"tree_ttl"`
	PendingTTL          time.Duration `yaml:"pending_ttl"`

	ForwardTokenIDs      bool   `yaml:"forward_token_ids"`
	AdminToken           string `yaml:"admin_token"`
	MaxPromptTokens      int    `yaml:"max_prompt_tokens"`
	MaxBodyBytes         int64  `yaml:"max_body_bytes"`
	MaxN                 int    `yaml:"max_n"`
	MaxInFlightPerWorker int    `yaml:"max_inflight_per_worker"`

	EngineMetricsInterval time.Duration `yaml:"engine_metrics_interval"`
	HealthInterval        time.Duration `yaml:"health_interval"`
	HealthTimeout         time.Duration `yaml:"health_timeout"`
	UpstreamTimeout       time.Duration `yaml:"upstream_timeout"`
	DrainTimeout          time.Duration `yaml:"drain_timeout"`

	LogLevel string `yaml:"log_level"`

	// workerErr is the first invalid --worker: the flag package would quote the raw value in
	// its message, and a spec may carry a password, so Set keeps the error here instead.
	workerErr error
}

// workerEntry is one worker of the YAML file: a --worker string or a mapping of the same keys.
type workerEntry struct{ worker.Spec }

func (e *workerEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		s, err := worker.ParseSpec(n.Value)
		if err != nil {
			return err
		}
		e.Spec = s
		return nil
	}
	var s worker.Spec
	if err := n.Decode(&s); err != nil {
		return err
	}
	ns, err := s.Normalize()
	if err != nil {
		return err
	}
	e.Spec = ns
	return nil
}

func defaultOptions() options {
	pc := policy.DefaultConfig()
	return options{
		Host:                "127.0.0.1",
		Port:                30000,
		PrometheusPort:      29000,
		Policy:              policy.NameCacheAware,
		CacheThreshold:      pc.CacheThreshold,
		BalanceAbsThreshold: pc.BalanceAbsThreshold,
		BalanceRelThreshold: pc.BalanceRelThreshold,
		BoundedLoadFactor:   pc.BoundedLoadFactor,
		PrefillWeight:       pc.PrefillWeight,
		QueueWeight:         pc.QueueWeight,
		DecodeWeight:        pc.DecodeWeight,
		Temperature:         pc.Temperature,
		KVIndex:             router.KVIndexAuto,
		BlockSize:           router.DefaultBlockSize,
		TreeMaxBlocks:       65536,
		TreeTTL:             10 * time.Minute,
		PendingTTL:          5 * time.Second,
		MaxBodyBytes:        router.DefaultMaxBodyBytes,
		MaxN:                router.DefaultMaxN,
		HealthInterval:      router.DefaultHealthInterval,
		HealthTimeout:       router.DefaultHealthTimeout,
		DrainTimeout:        30 * time.Second,
		LogLevel:            "info",
	}
}

// workerFlag appends each --worker to the options' workers.
type workerFlag struct{ o *options }

func (f workerFlag) String() string { return "" }
func (f workerFlag) Set(s string) error {
	sp, err := worker.ParseSpec(s)
	if err != nil {
		// Not returned: flag would print `invalid value "<spec>"`, echoing credentials.
		// ParseSpec's errors name the field, never the value.
		if f.o.workerErr == nil {
			f.o.workerErr = fmt.Errorf("gateway: --worker #%d: %w", len(f.o.Workers)+1, err)
		}
		return nil
	}
	f.o.Workers = append(f.o.Workers, workerEntry{sp})
	return nil
}

const usageHead = `gateway: kvgate, a cache-aware OpenAI-compatible gateway for LLM inference workers.

Usage:
  gateway [flags]                 serve (POST /v1/completions, GET /v1/models, /health, /readiness,
                                  admin /workers, /debug/route; metrics on --prometheus-port)
  gateway tokenize [flags]        print the token ids the gateway routes on (see gateway tokenize -h)

A worker SPEC is comma-separated key=value pairs (a bare URL works too):
  url=http://host:port | https://... | grpc://host:port   (required)
  runtime=vllm|sglang|tokenspeed   grpc:// engine service (default: detected by HealthCheck)
  model=NAME                       served model (default: the gateway's --model)
  kv_events=tcp://host:port        engine ZMQ PUB (rank r on port+r); grpc://host:port for a
                                   kvbridge sidecar; off to disable (grpc:// default: the worker)
  replay=tcp://host:port           engine ZMQ replay ROUTER; topic=PREFIX; dp_size=N; block_size=N
Example: --worker url=http://10.0.0.1:8000,kv_events=tcp://10.0.0.1:5557,replay=tcp://10.0.0.1:5558

Flags (each also a key of the --config YAML file, with underscores):
`

func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	fs.String("config", "", "YAML `FILE` with the same keys as the flags (workers: a list of specs or mappings); flags override it")
	fs.StringVar(&o.Host, "host", o.Host, "address to listen on for the API")
	fs.IntVar(&o.Port, "port", o.Port, "API port (0: any free port, logged at start)")
	fs.IntVar(&o.PrometheusPort, "prometheus-port", o.PrometheusPort, "port of the /metrics listener on --host (-1: disabled)")
	fs.StringVar(&o.ModelPath, "model-path", o.ModelPath, "model `DIR` holding tokenizer.json (and tokenizer_config.json); its base name is the default --model")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "tokenizer.json `FILE` (instead of --model-path)")
	fs.StringVar(&o.Model, "model", o.Model, "served model `NAME` (default: --model-path's base name, else the name the first worker reports)")
	fs.Var(workerFlag{o}, "worker", "worker `SPEC` (repeatable; see above)")
	fs.StringVar(&o.Policy, "policy", o.Policy, "routing policy: "+strings.Join(policy.Names(), ", "))
	fs.Float64Var(&o.CacheThreshold, "cache-threshold", o.CacheThreshold, "cache_aware: minimum matched/request block ratio for the best-matching worker to win")
	fs.Int64Var(&o.BalanceAbsThreshold, "balance-abs-threshold", o.BalanceAbsThreshold, "cache_aware/cost: imbalance when max_load-min_load exceeds this (and the relative threshold)")
	fs.Float64Var(&o.BalanceRelThreshold, "balance-rel-threshold", o.BalanceRelThreshold, "cache_aware/cost: imbalance when max_load exceeds this times min_load (and the absolute threshold)")
	fs.Float64Var(&o.BoundedLoadFactor, "bounded-load-factor", o.BoundedLoadFactor, "cache_aware/cost: a worker whose load reaches this times the mean (counting the new request) cannot win on its cache, so hot prefixes spread over workers (0: off, SMG's cache_aware exactly)")
	fs.Float64Var(&o.PrefillWeight, "prefill-weight", o.PrefillWeight, "cost: weight of the request's blocks a worker does not hold (the prefill a hit saves)")
	fs.Float64Var(&o.QueueWeight, "queue-weight", o.QueueWeight, "cost: weight of the blocks a worker's in-flight requests have not prefilled yet")
	fs.Float64Var(&o.DecodeWeight, "decode-weight", o.DecodeWeight, "cost: weight of the KV blocks held by the worker's in-flight requests, in blocks of prefill")
	fs.Float64Var(&o.Temperature, "temperature", o.Temperature, "cost: softmax temperature (0: always the cheapest)")
	fs.StringVar(&o.KVIndex, "kv-index", o.KVIndex, "auto: score workers with KV events from the event index, others from the approximate tree; off: the tree for every worker")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "KV block size in tokens for workers whose spec and events do not give one")
	fs.StringVar(&o.KVListen, "kv-listen", o.KVListen, "bind one ZMQ SUB (tcp://*:PORT) for publishers that connect; batches are attributed by topic kv@<host:port>@<model>")
	fs.IntVar(&o.IndexMaxBlocks, "index-max-blocks", o.IndexMaxBlocks, "bound on block keys in the event index, least recently touched evicted (0: unbounded)")
	fs.IntVar(&o.TreeMaxBlocks, "tree-max-blocks", o.TreeMaxBlocks, "approximate tree: blocks remembered per worker (its modelled KV cache), least recently used dropped")
	fs.DurationVar(&o.TreeTTL, "tree-ttl", o.TreeTTL, "approximate tree: a routed prefix not seen again for this long stops matching")
	fs.DurationVar(&o.PendingTTL, "pending-ttl", o.PendingTTL, "pending overlay: how long blocks just routed to an event-fed worker count as held before its events confirm them")
	fs.BoolVar(&o.ForwardTokenIDs, "forward-token-ids", o.ForwardTokenIDs, "send the gateway's token ids as the prompt to http:// workers")
	fs.StringVar(&o.AdminToken, "admin-token", o.AdminToken, "bearer token required on /workers and /debug/route (default: $KVGATE_ADMIN_TOKEN; empty: open)")
	fs.IntVar(&o.MaxPromptTokens, "max-prompt-tokens", o.MaxPromptTokens, "reject prompts longer than this with 413 (0: no limit)")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "reject request bodies larger than this with 413")
	fs.IntVar(&o.MaxN, "max-n", o.MaxN, "largest n accepted")
	fs.IntVar(&o.MaxInFlightPerWorker, "max-inflight-per-worker", o.MaxInFlightPerWorker, "a worker with this many in-flight requests takes no more; all full: 429 (0: no limit)")
	fs.DurationVar(&o.EngineMetricsInterval, "engine-metrics-interval", o.EngineMetricsInterval, "scrape each http:// worker's /metrics (vllm:num_requests_running+waiting) this often and blend it into the load (0: off)")
	fs.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "worker health check period (/health or gRPC HealthCheck)")
	fs.DurationVar(&o.HealthTimeout, "health-timeout", o.HealthTimeout, "timeout of one health check")
	fs.DurationVar(&o.UpstreamTimeout, "upstream-timeout", o.UpstreamTimeout, "bound on a whole request to a worker (0: none)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "on SIGTERM, how long in-flight requests and streams may finish")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error (debug logs one line per routing decision)")
	return fs
}

// errHelp is returned by parseOptions for -h/--help (exit status 0).
var errHelp = flag.ErrHelp

// parseOptions builds the options: defaults, then the --config file, then the flags.
func parseOptions(args []string, stderr io.Writer) (options, error) {
	// First pass: find --config (every other flag is parsed again below).
	probe := defaultOptions()
	pfs := newFlagSet(&probe, io.Discard)
	if err := pfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			newFlagSet(&probe, stderr).Usage()
			return probe, errHelp
		}
		// Report through the real flag set below for a proper message.
		_ = newFlagSet(&probe, stderr).Parse(args)
		return probe, err
	}
	if probe.workerErr != nil {
		return probe, probe.workerErr
	}
	if pfs.NArg() > 0 {
		return probe, fmt.Errorf("gateway: unexpected arguments %q", pfs.Args())
	}
	o := defaultOptions()
	if f := pfs.Lookup("config").Value.String(); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return o, fmt.Errorf("gateway: config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&o); err != nil && !errors.Is(err, io.EOF) {
			return o, fmt.Errorf("gateway: config %s: %w", f, err)
		}
	}
	if err := newFlagSet(&o, stderr).Parse(args); err != nil {
		return o, err
	}
	if o.workerErr != nil {
		return o, o.workerErr
	}
	if o.AdminToken == "" {
		o.AdminToken = os.Getenv("KVGATE_ADMIN_TOKEN")
	}
	return o, o.validate()
}

func (o *options) validate() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("gateway: --port %d out of range", o.Port)
	case o.PrometheusPort < -1 || o.PrometheusPort > 65535:
		return fmt.Errorf("gateway: --prometheus-port %d out of range", o.PrometheusPort)
	case o.ModelPath != "" && o.Tokenizer != "":
		return errors.New("gateway: give --model-path or --tokenizer, not both")
	case o.DrainTimeout < 0:
		return errors.New("gateway: --drain-timeout must not be negative")
	}
	return nil
}
