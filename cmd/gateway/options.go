package main

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvgate/kvgate/pkg/admission"
	"github.com/kvgate/kvgate/pkg/discovery"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// options is the gateway's configuration: flags and the --config YAML file use the same names
// (dashes in flags, underscores in YAML). Flags given on the command line override the file;
// --worker and --discover flags add to the file's. The file's workers, discover specs and
// models are re-read when it changes and on SIGHUP (reload.go); the other keys need a restart.
type options struct {
	Host           string `yaml:"host"`
	Port           int    `yaml:"port"`
	PrometheusPort int    `yaml:"prometheus_port"`
	AdminHost      string `yaml:"admin_host"`
	AdminPort      int    `yaml:"admin_port"`

	// Client keys and their limits (DESIGN.md §11).
	APIKeys             []string `yaml:"api_keys"`
	APIKeyFile          string   `yaml:"api_key_file"`
	RateLimit           float64  `yaml:"rate_limit"`
	RateBurst           int      `yaml:"rate_burst"`
	MaxConcurrentPerKey int      `yaml:"max_concurrent_per_key"`

	ModelPath string `yaml:"model_path"`
	Tokenizer string `yaml:"tokenizer"`
	Model     string `yaml:"model"`
	// Chat rendering and parsing, with vLLM's flag names (DESIGN.md §10).
	chatOptions `yaml:",inline"`
	// The Responses API's store (responses.go).
	responsesOptions `yaml:",inline"`

	Workers []workerEntry `yaml:"workers"`
	// Discover are DNS names whose addresses become workers (pkg/discovery), re-resolved every
	// DiscoverInterval through DNSServer (empty: the system's resolver).
	Discover         []discoverEntry `yaml:"discover"`
	DiscoverInterval time.Duration   `yaml:"discover_interval"`
	DNSServer        string          `yaml:"dns_server"`
	// Models are further models, each with its own tokenizer, template, policy and workers
	// (config file only; the flags configure the default model).
	Models []modelOptions `yaml:"models"`

	Policy              string  `yaml:"policy"`
	CacheThreshold      float64 `yaml:"cache_threshold"`
	BalanceAbsThreshold int64   `yaml:"balance_abs_threshold"`
	BalanceRelThreshold float64 `yaml:"balance_rel_threshold"`
	BoundedLoadFactor   float64 `yaml:"bounded_load_factor"`
	PrefillWeight       float64 `yaml:"prefill_weight"`
	QueueWeight         float64 `yaml:"queue_weight"`
	DecodeWeight        float64 `yaml:"decode_weight"`
	Temperature         float64 `yaml:"temperature"`
	KVIndex             string  `yaml:"kv_index"`
	// Prefill/decode disaggregation (pipeline.PD), for models whose pool has role=prefill
	// workers; a models: entry may override the policies, the transfer and the threshold.
	PrefillPolicy       string        `yaml:"prefill_policy"`
	DecodePolicy        string        `yaml:"decode_policy"`
	PDTransfer          string        `yaml:"pd_transfer"`
	PDMinUncachedTokens int           `yaml:"pd_min_uncached_tokens"`
	PDTimeout           time.Duration `yaml:"pd_timeout"`
	BlockSize           int           `yaml:"block_size"`
	KVListen            string        `yaml:"kv_listen"`
	IndexMaxBlocks      int           `yaml:"index_max_blocks"`
	TreeMaxBlocks       int           `yaml:"tree_max_blocks"`
	TreeTTL             time.Duration `yaml:"tree_ttl"`
	PendingTTL          time.Duration `yaml:"pending_ttl"`

	ForwardTokenIDs      bool   `yaml:"forward_token_ids"`
	ForwardPriority      bool   `yaml:"forward_priority"`
	AdminToken           string `yaml:"admin_token"`
	Pprof                bool   `yaml:"pprof"`
	MaxPromptTokens      int    `yaml:"max_prompt_tokens"`
	MaxBodyBytes         int64  `yaml:"max_body_bytes"`
	MaxN                 int    `yaml:"max_n"`
	MaxPrompts           int    `yaml:"max_prompts"`
	MaxInFlightPerWorker int    `yaml:"max_inflight_per_worker"`

	QueueMax       int           `yaml:"queue_max"`
	QueueTimeout   time.Duration `yaml:"queue_timeout"`
	QueueMaxWait   time.Duration `yaml:"queue_max_wait"`
	QueueLookAhead int           `yaml:"queue_look_ahead"`
	// MaxWaitingPerWorker: a worker whose engine queues this many requests is full too.
	MaxWaitingPerWorker int `yaml:"max_waiting_per_worker"`
	// QueueReserve: slots per worker kept for bands ≤ 0.
	QueueReserve int `yaml:"queue_reserve"`

	EngineMetricsInterval time.Duration `yaml:"engine_metrics_interval"`
	HealthInterval        time.Duration `yaml:"health_interval"`
	HealthTimeout         time.Duration `yaml:"health_timeout"`
	UpstreamTimeout       time.Duration `yaml:"upstream_timeout"`
	DrainTimeout          time.Duration `yaml:"drain_timeout"`

	OTLPTracesEndpoint    string  `yaml:"otlp_traces_endpoint"`
	OTLPTracesSampleRatio float64 `yaml:"otlp_traces_sample_ratio"`

	LogLevel  string `yaml:"log_level"`
	AccessLog string `yaml:"access_log"`

	// workerErr is the first invalid --worker or --discover: the flag package would quote the
	// raw value in its message, and a spec may carry a password, so Set keeps the error here.
	workerErr error
	// args are the command-line arguments the options were parsed from, parsed again with the
	// file on a reload.
	args []string
	// configSum is the SHA-256 of the --config content these options were parsed from: a
	// reload compares the file with what is in force, not with a later read.
	configSum [sha256.Size]byte
}

// workerEntry is one worker of the YAML file (a --worker string or a mapping of the same keys)
// or of a --worker flag (fromFlag).
type workerEntry struct {
	worker.Spec
	fromFlag bool
}

// discoverEntry is one --discover spec, of the YAML file (a string) or a flag (fromFlag).
type discoverEntry struct {
	discovery.Spec
	fromFlag bool
}

func (e *discoverEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("discover: want a spec string, dns=NAME,url=http://{host}:PORT,...")
	}
	s, err := discovery.ParseSpec(n.Value)
	if err != nil {
		return err
	}
	e.Spec = s
	return nil
}

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
		chatOptions:         defaultChatOptions(),
		responsesOptions:    defaultResponsesOptions(),
		Host:                "127.0.0.1",
		Port:                30000,
		PrometheusPort:      29000,
		AdminHost:           "127.0.0.1",
		AdminPort:           defaultAdminPort,
		Policy:              policy.NameCacheAware,
		CacheThreshold:      pc.CacheThreshold,
		BalanceAbsThreshold: pc.BalanceAbsThreshold,
		BalanceRelThreshold: pc.BalanceRelThreshold,
		BoundedLoadFactor:   pc.BoundedLoadFactor,
		PrefillWeight:       pc.PrefillWeight,
		QueueWeight:         pc.QueueWeight,
		DecodeWeight:        pc.DecodeWeight,
		Temperature:         pc.Temperature,
		KVIndex:             fleet.KVIndexAuto,
		PrefillPolicy:       policy.NameCacheAware,
		DecodePolicy:        policy.NameLeastLoad,
		PDMinUncachedTokens: pipeline.DefaultPDMinUncachedTokens,
		PDTimeout:           pipeline.DefaultPDTimeout,
		BlockSize:           fleet.DefaultBlockSize,
		TreeMaxBlocks:       65536,
		TreeTTL:             10 * time.Minute,
		PendingTTL:          5 * time.Second,
		MaxBodyBytes:        pipeline.DefaultMaxBodyBytes,
		MaxN:                pipeline.DefaultMaxN,
		MaxPrompts:          pipeline.DefaultMaxPrompts,
		QueueTimeout:        pipeline.DefaultQueueTimeout,
		QueueLookAhead:      admission.DefaultLookAhead,
		HealthInterval:      fleet.DefaultHealthInterval,
		HealthTimeout:       fleet.DefaultHealthTimeout,
		DrainTimeout:        fleet.DefaultDrainTimeout,
		DiscoverInterval:    discovery.DefaultInterval,
		LogLevel:            "info",
		AccessLog:           "off",
		// -1: the sampler of OTEL_TRACES_SAMPLER (default parentbased_always_on).
		OTLPTracesSampleRatio: -1,
	}
}

// defaultAdminPort is the admin listener's port: its own, away from the API's 30000 (and the
// ports of a few replicas run side by side, 30000+i) and the metrics' 29000.
const defaultAdminPort = 30900

// secretFlag is a string flag whose value --help never shows (the flag package prints a
// flag's value as its default, and after --config that may be a token).
type secretFlag struct{ p *string }

func (f secretFlag) String() string     { return "" }
func (f secretFlag) Set(s string) error { *f.p = s; return nil }

// keysFlag appends each --api-key to the options' keys; like secretFlag it shows none.
type keysFlag struct{ p *[]string }

func (f keysFlag) String() string     { return "" }
func (f keysFlag) Set(s string) error { *f.p = append(*f.p, s); return nil }

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
	f.o.Workers = append(f.o.Workers, workerEntry{Spec: sp, fromFlag: true})
	return nil
}

// discoverFlag appends each --discover to the options' discover specs; like workerFlag it
// keeps an error instead of returning it.
type discoverFlag struct{ o *options }

func (f discoverFlag) String() string { return "" }
func (f discoverFlag) Set(s string) error {
	sp, err := discovery.ParseSpec(s)
	if err != nil {
		if f.o.workerErr == nil {
			f.o.workerErr = fmt.Errorf("gateway: --discover #%d: %w", len(f.o.Discover)+1, err)
		}
		return nil
	}
	f.o.Discover = append(f.o.Discover, discoverEntry{Spec: sp, fromFlag: true})
	return nil
}

const usageHead = `gateway: kvgate, a cache-aware OpenAI-compatible gateway for LLM inference workers.

Usage:
  gateway [flags]                 serve (POST /v1/completions, /v1/chat/completions and /v1/responses,
                                  /v1/conversations, GET /v1/models,
                                  /health, /readiness on --port; admin /workers, /debug/route on
                                  --admin-port; metrics on --prometheus-port)
  gateway tokenize [flags]        print the token ids the gateway routes on (see gateway tokenize -h)
  gateway render [flags]          print the chat prompts and ids the gateway routes on (gateway render -h)

A worker SPEC is comma-separated key=value pairs (a bare URL works too):
  url=http://host:port | https://... | grpc://host:port   (required)
  runtime=vllm|sglang|tokenspeed   grpc:// engine service (default: detected by HealthCheck)
  model=NAME                       served model (default: the gateway's --model)
  kv_events=tcp://host:port        engine ZMQ PUB (rank r on port+r); grpc://host:port for a
                                   kvbridge sidecar; off to disable (grpc:// default: the worker)
  replay=tcp://host:port           engine ZMQ replay ROUTER; topic=PREFIX; dp_size=N; block_size=N
  api_key=KEY | api_key_file=FILE  sent as Authorization: Bearer on every call to the worker
  tls=true                         TLS on the worker's gRPC connections (grpc:// url, grpc:// sidecar)
  tls_ca_file=FILE                 CAs trusted for the worker (https:// or tls=true)
  tls_cert_file=FILE,tls_key_file=FILE   client certificate for mTLS
Example: --worker url=http://10.0.0.1:8000,kv_events=tcp://10.0.0.1:5557,replay=tcp://10.0.0.1:5558

A --discover SPEC is a worker SPEC whose url (and any other value) names {host}, plus dns=NAME:
every address NAME resolves to becomes a worker, re-resolved every --discover-interval; an
address that leaves is drained. With srv=true NAME's SRV records give the hosts and {port}:
  --discover dns=vllm.ns.svc.cluster.local,url=http://{host}:8000,kv_events=tcp://{host}:5557,replay=tcp://{host}:5558
  --discover dns=_http._tcp.vllm.ns.svc.cluster.local,srv=true,url=http://{host}:{port}
Several models: the --config file's models: list (docs/operations.md).

Flags (each also a key of the --config YAML file, with underscores):
`

func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	fs.String("config", "", "YAML `FILE` with the same keys as the flags (workers: a list of specs or mappings; discover: specs; models: one entry per further model); flags override it; workers, discover and models are re-read when it changes and on SIGHUP")
	fs.StringVar(&o.Host, "host", o.Host, "address to listen on for the API and the metrics")
	fs.IntVar(&o.Port, "port", o.Port, "API port (0: any free port, logged at start)")
	fs.IntVar(&o.PrometheusPort, "prometheus-port", o.PrometheusPort, "port of the /metrics listener on --host (-1: disabled)")
	fs.StringVar(&o.AdminHost, "admin-host", o.AdminHost, "address of the admin listener (/workers, /debug/route); anything but loopback needs --admin-token")
	fs.IntVar(&o.AdminPort, "admin-port", o.AdminPort, "admin listener port (0: any free port; -1: disabled)")
	fs.Var(keysFlag{&o.APIKeys}, "api-key", "client `KEY` (or NAME:KEY) required as Authorization: Bearer on /v1/* (repeatable; default: none, no client authentication)")
	fs.StringVar(&o.APIKeyFile, "api-key-file", o.APIKeyFile, "`FILE` of client keys, one KEY or NAME:KEY per line (# comments); re-read on SIGHUP")
	fs.Float64Var(&o.RateLimit, "rate-limit", o.RateLimit, "requests per second per client key, over it 429 with Retry-After (without keys: for all clients together; 0: no limit)")
	fs.IntVar(&o.RateBurst, "rate-burst", o.RateBurst, "requests a client key may send at once within --rate-limit (0: --rate-limit rounded up)")
	fs.IntVar(&o.MaxConcurrentPerKey, "max-concurrent-per-key", o.MaxConcurrentPerKey, "requests in progress per client key, a stream counting until it ends; over it 429 (0: no limit)")
	fs.StringVar(&o.ModelPath, "model-path", o.ModelPath, "model `DIR` holding tokenizer.json (and tokenizer_config.json); its base name is the default --model")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "tokenizer.json `FILE` (instead of --model-path)")
	fs.StringVar(&o.Model, "model", o.Model, "served model `NAME` (default: --model-path's base name, else the name the first worker reports)")
	o.chatOptions.addFlags(fs)
	o.responsesOptions.addFlags(fs)
	fs.Var(workerFlag{o}, "worker", "worker `SPEC` (repeatable; see above)")
	fs.Var(discoverFlag{o}, "discover", "DNS discovery `SPEC`: dns=NAME[,srv=true] and a worker SPEC template with {host} (and {port}) (repeatable; see above)")
	fs.DurationVar(&o.DiscoverInterval, "discover-interval", o.DiscoverInterval, "how often --discover names are resolved again (a failed lookup keeps the last answer's workers)")
	fs.StringVar(&o.DNSServer, "dns-server", o.DNSServer, "`HOST:PORT` of the DNS server --discover asks (default: the system's resolver)")
	fs.StringVar(&o.Policy, "policy", o.Policy, "routing policy: "+strings.Join(policy.Names(), ", "))
	fs.StringVar(&o.PrefillPolicy, "prefill-policy", o.PrefillPolicy, "policy picking the prefill worker of a prefill/decode pair (any --policy name)")
	fs.StringVar(&o.DecodePolicy, "decode-policy", o.DecodePolicy, "policy picking the decode worker of a pair, and the worker of a request a disaggregated pool runs whole")
	fs.StringVar(&o.PDTransfer, "pd-transfer", o.PDTransfer, "KV hand-off of prefill/decode pairs: nixl (vLLM NixlConnector, sequential), mooncake (vLLM MooncakeConnector, concurrent) or sglang (bootstrap room, concurrent); empty: sglang for prefill workers with runtime=sglang, else nixl")
	fs.IntVar(&o.PDMinUncachedTokens, "pd-min-uncached-tokens", o.PDMinUncachedTokens, "a prompt shorter than this, or one the decode worker holds all but fewer than this many tokens of, runs whole on the decode worker (negative: always split)")
	fs.DurationVar(&o.PDTimeout, "pd-timeout", o.PDTimeout, "bound on a pair's prefill leg (its answer, or for sglang its whole call)")
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
	fs.BoolVar(&o.ForwardPriority, "forward-priority", o.ForwardPriority, "pass a request's priority field on to http:// workers, held to the client key's grant (engines running priority scheduling: vLLM --scheduling-policy priority); off, it is stripped. Either way it is the admission band when no x-kvgate-priority header gives one")
	fs.Var(secretFlag{&o.AdminToken}, "admin-token", "bearer `TOKEN` required by the admin listener (default: $KVGATE_ADMIN_TOKEN; empty: open, allowed on loopback only)")
	fs.BoolVar(&o.Pprof, "pprof", o.Pprof, "serve Go's runtime profiles on the admin listener at /debug/pprof/ (heap, allocs, goroutine, profile, trace), behind --admin-token")
	fs.IntVar(&o.MaxPromptTokens, "max-prompt-tokens", o.MaxPromptTokens, "reject prompts longer than this with 413 (0: no limit)")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "reject request bodies larger than this with 413")
	fs.IntVar(&o.MaxN, "max-n", o.MaxN, "largest n accepted")
	fs.IntVar(&o.MaxPrompts, "max-prompts", o.MaxPrompts, "most prompts one completion request may batch")
	fs.IntVar(&o.MaxInFlightPerWorker, "max-inflight-per-worker", o.MaxInFlightPerWorker, "a worker with this many in-flight requests takes no more; all full: 429, or the admission queue (--queue-max) (0: no limit)")
	fs.IntVar(&o.QueueMax, "queue-max", o.QueueMax, "admission queue per model: with --max-inflight-per-worker, at most this many requests wait for a worker's slot, by priority band (x-kvgate-priority, the key's priority=) and fairly across client keys; past it 429 (0: no queue, 429 at once)")
	fs.DurationVar(&o.QueueTimeout, "queue-timeout", o.QueueTimeout, "admission queue: the longest a request waits; past it 503 queue_timeout with Retry-After")
	fs.DurationVar(&o.QueueMaxWait, "queue-max-wait", o.QueueMaxWait, "admission queue: a request waiting this long goes before every later one, whatever its band (0: no age bound)")
	fs.IntVar(&o.QueueLookAhead, "queue-look-ahead", o.QueueLookAhead, "admission queue: waiting requests of the best band matched against a freed worker for the longest cached prefix (1: plain fair order)")
	fs.IntVar(&o.MaxWaitingPerWorker, "max-waiting-per-worker", o.MaxWaitingPerWorker, "admission queue: a worker whose engine reports this many waiting requests (vllm:num_requests_waiting, needs --engine-metrics-interval) is full too while this gateway has a request on it (0: off)")
	fs.IntVar(&o.QueueReserve, "queue-reserve", o.QueueReserve, "admission queue: slots of each worker's --max-inflight-per-worker kept for requests of band 0 and better; a request of a band > 0 (batch) takes a worker only below the limit minus this (0: none)")
	fs.DurationVar(&o.EngineMetricsInterval, "engine-metrics-interval", o.EngineMetricsInterval, "scrape each http:// worker's /metrics (vllm:num_requests_running+waiting) this often and blend it into the load (0: off)")
	fs.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "worker health check period (/health or gRPC HealthCheck)")
	fs.DurationVar(&o.HealthTimeout, "health-timeout", o.HealthTimeout, "timeout of one health check")
	fs.DurationVar(&o.UpstreamTimeout, "upstream-timeout", o.UpstreamTimeout, "bound on a whole request to a worker (0: none)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "on SIGTERM, how long in-flight requests and streams may finish; also how long a worker that leaves the fleet (DNS, config reload) may finish its own")
	fs.StringVar(&o.OTLPTracesEndpoint, "otlp-traces-endpoint", o.OTLPTracesEndpoint, "OTLP `URL` to export request traces to (default OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; unset: no tracing); the protocol and the rest from the standard OTEL_* variables (grpc by default, or http/protobuf)")
	fs.Float64Var(&o.OTLPTracesSampleRatio, "otlp-traces-sample-ratio", o.OTLPTracesSampleRatio, "fraction of new traces sampled, a client's sampled traceparent always followed (-1: OTEL_TRACES_SAMPLER and _ARG, default all)")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error (debug logs one line per routing decision)")
	fs.StringVar(&o.AccessLog, "access-log", o.AccessLog, "off or on: one JSON line per public API request on stderr (logger \"access\": request id, model, worker, routing reason, prompt and cached tokens, status, TTFT, duration)")
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
	o.args = args
	if f := pfs.Lookup("config").Value.String(); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return o, fmt.Errorf("gateway: config: %w", err)
		}
		o.configSum = sha256.Sum256(b)
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
	case o.OTLPTracesSampleRatio != -1 && !(o.OTLPTracesSampleRatio >= 0 && o.OTLPTracesSampleRatio <= 1):
		return fmt.Errorf("gateway: --otlp-traces-sample-ratio %v: want 0 to 1 (or -1 for OTEL_TRACES_SAMPLER)", o.OTLPTracesSampleRatio)
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("gateway: --port %d out of range", o.Port)
	case o.PrometheusPort < -1 || o.PrometheusPort > 65535:
		return fmt.Errorf("gateway: --prometheus-port %d out of range", o.PrometheusPort)
	case o.AdminPort < -1 || o.AdminPort > 65535:
		return fmt.Errorf("gateway: --admin-port %d out of range", o.AdminPort)
	case o.AdminPort > 0 && o.AdminPort == o.Port:
		return errors.New("gateway: --admin-port must differ from --port: the admin API is never served on the public listener")
	case o.RateLimit < 0 || o.RateBurst < 0 || o.MaxConcurrentPerKey < 0:
		return errors.New("gateway: --rate-limit, --rate-burst and --max-concurrent-per-key must not be negative")
	case o.ModelPath != "" && o.Tokenizer != "":
		return errors.New("gateway: give --model-path or --tokenizer, not both")
	case o.ChatTemplate != "" && o.ModelPath == "":
		return errors.New("gateway: --chat-template needs --model-path (the model's tokenizer_config.json gives the special tokens)")
	case o.DrainTimeout < 0:
		return errors.New("gateway: --drain-timeout must not be negative")
	case o.AccessLog != "off" && o.AccessLog != "on":
		return fmt.Errorf("gateway: --access-log %q: want off or on", o.AccessLog)
	case o.DiscoverInterval <= 0:
		return errors.New("gateway: --discover-interval must be positive")
	}
	if o.DNSServer != "" {
		if _, err := discovery.NewResolver(o.DNSServer); err != nil {
			return fmt.Errorf("gateway: --dns-server: %w", err)
		}
	}
	if err := o.chatOptions.validate(); err != nil {
		return err
	}
	if err := o.responsesOptions.validate(); err != nil {
		return err
	}
	return o.validateFleet()
}
