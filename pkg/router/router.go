package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// KV index modes of Config.KVIndex (--kv-index).
const (
	// KVIndexAuto scores each worker that has a KV-event stream from the event index and the
	// others from the approximate tree.
	KVIndexAuto = "auto"
	// KVIndexOff scores every worker from the approximate tree and subscribes to no events
	// (the "approximate" baseline of DESIGN.md §9).
	KVIndexOff = "off"
)

// Defaults of Config fields left zero: the block size of DESIGN.md §3, an 8 MiB body limit, at
// most 16 samples and 256 prompts per request, a health check every 5 s with a 2 s timeout.
const (
	DefaultBlockSize      = 16
	DefaultMaxBodyBytes   = 8 << 20
	DefaultMaxN           = 16
	DefaultHealthInterval = 5 * time.Second
	DefaultHealthTimeout  = 2 * time.Second
	DefaultMaxPrompts     = 256
)

// Config configures a Router. Zero durations and limits take the documented defaults.
//
// Config's model fields (Model, Tokenizer, Chat, ChatParsers, ReasoningField, Policy, BlockSize,
// Index, Tree, Pending) configure the default pool: the workers whose spec names no model of
// Models. Models adds one pool per further model, each with fields of its own (pool.go).
type Config struct {
	// Model is the served model name requests may use ("" or this name route to every worker
	// of the default pool whose spec names no model). Empty: the first model a worker of the
	// default pool reports, else the first of Models.
	Model string
	// Models are further models, each with its own tokenizer, chat template, policy, index and
	// pool of workers (those whose spec names it); SetModel and RemoveModel change them while
	// serving. nil: one model, the default pool, as configured by the fields around.
	Models []Model
	// Tokenizer turns text prompts into the token ids the gateway routes on (and sends to
	// grpc:// workers). nil: text prompts are proxied untokenized to http:// workers and
	// routed without prefix information; grpc:// workers then accept token-id prompts only.
	Tokenizer Tokenizer
	// Chat renders chat requests into the token ids the engine computes (nil: chat requests
	// are routed without prefix information, and only http:// workers can serve them).
	Chat ChatRenderer
	// ChatParsers splits reasoning and tool calls out of grpc:// workers' chat output as the
	// engine's own server would (nil: all text is content).
	ChatParsers *parse.Parsers
	// ReasoningField is where that reasoning goes (engine.Reasoning*; "" writes both fields).
	ReasoningField string
	// Policy picks the worker. Required.
	Policy policy.Policy
	// KVIndex is KVIndexAuto (default) or KVIndexOff.
	KVIndex string
	// BlockSize is the block size for workers whose spec and events do not give one (16).
	BlockSize int

	// Index is the exact event index (required); Tree the approximate tree and Pending the
	// pending overlay (both optional: nil disables them).
	Index   *indexer.Index
	Tree    *indexer.Tree
	Pending *indexer.Pending

	// ForwardTokenIDs sends the gateway's token ids as the prompt to http:// workers, so the
	// engine caches exactly what was indexed.
	ForwardTokenIDs bool
	// AdminToken, when set, is required as "Authorization: Bearer <token>" by AdminHandler.
	AdminToken string
	// APIKeys, when it holds keys, guards the public API (Handler): every request but /health
	// and /readiness must present one ("Authorization: Bearer KEY" or "api-key: KEY") or get a
	// 401. nil or empty: no client authentication. SetAPIKeys replaces them while serving.
	APIKeys *KeySet
	// RateLimit is each client key's sustained request rate in requests per second, with
	// bursts of RateBurst (default: RateLimit rounded up, at least 1); over it the gateway
	// answers 429 with Retry-After. Without keys the limit applies to all requests together.
	// 0: no rate limit.
	RateLimit float64
	RateBurst int
	// MaxConcurrentPerKey bounds each client key's requests in progress (a stream counts until
	// it ends); over it the gateway answers 429. Without keys it bounds all requests together.
	// 0: no limit.
	MaxConcurrentPerKey int
	// MaxPrompts is the most prompts one completion request may batch (default 256); more is a
	// 400. Each prompt is tokenized, routed and, on gRPC workers, generated separately.
	MaxPrompts int
	// MaxPromptTokens rejects prompts longer than this with 413 (0: no limit).
	MaxPromptTokens int
	// MaxBodyBytes rejects larger request bodies with 413 (default 8 MiB).
	MaxBodyBytes int64
	// MaxN is the largest n accepted (default 16).
	MaxN int
	// MaxInFlightPerWorker, when > 0, makes a worker at that many in-flight requests
	// ineligible; with every candidate full the gateway answers 429.
	MaxInFlightPerWorker int

	// HealthInterval and HealthTimeout pace the health checks (default 5 s and 2 s).
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// EngineMetricsInterval, when > 0, scrapes each http:// worker's /metrics for
	// vllm:num_requests_running + vllm:num_requests_waiting and blends it into the load.
	EngineMetricsInterval time.Duration
	// UpstreamTimeout bounds a whole request to a worker (0: none; client disconnects still
	// cancel).
	UpstreamTimeout time.Duration
	// DrainTimeout bounds how long a worker that leaves the fleet (SyncWorkers, a model
	// replaced) may take to finish its in-flight requests before its streams stop and its
	// blocks leave the index (default 30 s).
	DrainTimeout time.Duration

	// KVListen, when set (tcp://*:PORT), binds one ZMQ SUB socket that publishers connect to;
	// batches are attributed to workers by topic kv@<host:port>@<model>.
	KVListen string

	// Logger receives lifecycle logs at info and one debug line per routing decision.
	// nil: no logs.
	Logger *zap.Logger
	// Registerer receives the router's metrics. nil: metrics are not registered.
	Registerer prometheus.Registerer
	// KVMetrics is passed to the event sources (nil: none).
	KVMetrics *kvbridge.Metrics
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Router is the gateway: the OpenAI HTTP API, the fleet of workers (each with its engine client
// and event source), the routing decision and the relay of responses. Build it with New, add
// workers, serve Handler() and call Run for the background work (health checks, event streams,
// engine-load scrapes).
//
// A Router must not be copied.
type Router struct {
	cfg     Config
	log     *zap.Logger
	met     *metrics
	now     func() time.Time
	scratch sync.Pool // *routeScratch
	// transport is the HTTP transport shared by every http:// worker's engine; engineCfg is
	// what each member's engine is built with.
	transport *http.Transport
	engineCfg engine.Config

	// fleet is the immutable snapshot every request reads (workers and models); writers hold
	// mu.
	fleet atomic.Pointer[fleet]

	// mu guards the fields below and serialises fleet changes. It is never held while
	// calling a worker, running a source or updating the index; building a member (its engine
	// client: constructors, and reading its key and certificate files) and starting its
	// goroutines (which builds its event source: constructors only, no network I/O) happen
	// under it, so that one reconcile sees one fleet and Run and a reconcile cannot both start
	// or both miss a worker.
	mu      sync.Mutex
	nextID  indexer.WorkerID
	freeIDs []indexer.WorkerID
	runCtx  context.Context // nil until Run starts
	stopped bool            // Run has returned or is returning
	wg      sync.WaitGroup  // per-worker goroutines and drains started under runCtx
	// desired holds each origin's wanted workers (SyncWorkers, AddWorker), origins the order
	// the origins first appeared in: the first to list a URL owns it (fleet.go).
	desired map[string][]worker.Spec
	origins []string

	// auth is the current generation of client keys and their limiter state (auth.go); authMu
	// serialises SetAPIKeys. adminKeys holds the admin token (nil: the admin API is open).
	auth      atomic.Pointer[authState]
	authMu    sync.Mutex
	adminKeys *KeySet
	cmet      *clientMetrics

	// collector is the --kv-listen source (nil without one); set once by Run.
	collector atomic.Pointer[kvbridge.ZMQCollector]

	// aborted is cancelled (cause errShutdown) by AbortInFlight; every completion request's
	// context follows it.
	aborted context.Context
	abort   context.CancelCauseFunc
}

// New validates cfg and returns a Router with no workers. It starts no goroutines.
func New(cfg Config) (*Router, error) {
	if cfg.Policy == nil {
		return nil, errors.New("router: new: a policy is required")
	}
	if cfg.Index == nil {
		return nil, errors.New("router: new: an index is required")
	}
	switch cfg.KVIndex {
	case "":
		cfg.KVIndex = KVIndexAuto
	case KVIndexAuto, KVIndexOff:
	default:
		return nil, fmt.Errorf("router: new: kv-index %q: want auto or off", cfg.KVIndex)
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.BlockSize < 1 || cfg.BlockSize > worker.MaxBlockSize {
		return nil, fmt.Errorf("router: new: block size %d out of range", cfg.BlockSize)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxN == 0 {
		cfg.MaxN = DefaultMaxN
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = DefaultHealthTimeout
	}
	if cfg.MaxPrompts == 0 {
		cfg.MaxPrompts = DefaultMaxPrompts
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.RateBurst == 0 && cfg.RateLimit > 0 {
		cfg.RateBurst = max(1, int(math.Ceil(cfg.RateLimit)))
	}
	if cfg.RateLimit < 0 || math.IsNaN(cfg.RateLimit) || math.IsInf(cfg.RateLimit, 0) || cfg.RateBurst < 0 || cfg.MaxConcurrentPerKey < 0 || cfg.MaxPrompts < 0 {
		return nil, errors.New("router: new: rate limit, burst, concurrency limit and max prompts must be finite and not negative")
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxN < 0 || cfg.MaxPromptTokens < 0 || cfg.MaxInFlightPerWorker < 0 ||
		cfg.HealthInterval < 0 || cfg.HealthTimeout < 0 || cfg.EngineMetricsInterval < 0 || cfg.UpstreamTimeout < 0 || cfg.DrainTimeout < 0 {
		return nil, errors.New("router: new: limits and intervals must not be negative")
	}
	if cfg.KVListen != "" && cfg.KVIndex == KVIndexOff {
		return nil, errors.New("router: new: --kv-listen needs --kv-index auto")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rt := &Router{cfg: cfg, log: cfg.Logger, now: cfg.Now, transport: engine.NewTransport(), desired: map[string][]worker.Spec{}}
	rt.engineCfg = engine.Config{HTTP: rt.transport, Logger: cfg.Logger, Now: cfg.Now}
	f := &fleet{def: rt.newDefaultPool(), models: map[string]*pool{}}
	for _, m := range cfg.Models {
		p, err := rt.newModelPool(m)
		if err != nil {
			return nil, err
		}
		if f.models[m.Name] != nil {
			return nil, fmt.Errorf("router: new: model %q configured twice", m.Name)
		}
		f.models[m.Name] = p
		f.modelNames = append(f.modelNames, m.Name)
	}
	rt.fleet.Store(f.with(nil, nil))
	rt.aborted, rt.abort = context.WithCancelCause(context.Background())
	var err error
	if rt.met, err = newMetrics(cfg.Registerer, rt.fleet.Load); err != nil {
		return nil, err
	}
	if rt.cmet, err = newClientMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	if cfg.AdminToken != "" {
		if rt.adminKeys, err = NewKeySet([]APIKey{{Name: "admin", Key: cfg.AdminToken}}); err != nil {
			return nil, errors.New("router: new: the admin token must be 1-4096 printable ASCII characters without spaces")
		}
	}
	rt.auth.Store(rt.newAuthState(cfg.APIKeys, nil))
	rt.scratch.New = func() any { return new(routeScratch) }
	return rt, nil
}

// Run runs the background work until ctx is done: per worker a health loop (with model
// discovery and engine-load scrapes) and its KV-event stream, plus the --kv-listen collector.
// It returns after every goroutine it started has exited. Run must be called at most once.
func (rt *Router) Run(ctx context.Context) error {
	rt.mu.Lock()
	if rt.runCtx != nil || rt.stopped {
		rt.mu.Unlock()
		return errors.New("router: run: already running")
	}
	rt.runCtx = ctx
	for _, m := range rt.fleet.Load().members {
		rt.startLocked(m)
	}
	if rt.cfg.KVListen != "" {
		if err := rt.startCollectorLocked(ctx); err != nil {
			rt.stopped = true
			rt.mu.Unlock()
			rt.stopAll()
			return err
		}
	}
	rt.mu.Unlock()
	rt.log.Info("router running", zap.Int("workers", len(rt.members())), zap.String("policy", policyName(rt.cfg.Policy)),
		zap.String("kv_index", rt.cfg.KVIndex), zap.Strings("models", rt.ModelNames()))
	<-ctx.Done()
	rt.mu.Lock()
	rt.stopped = true
	rt.mu.Unlock()
	rt.stopAll()
	return nil
}

// stopAll joins every goroutine started under runCtx (which is done) and closes clients, of
// the serving and the draining workers.
func (rt *Router) stopAll() {
	all := func() []*member {
		f := rt.fleet.Load()
		return append(slices.Clone(f.members), f.draining...)
	}
	for _, m := range all() {
		m.stop()
	}
	rt.wg.Wait()
	for _, m := range all() {
		m.close()
	}
	rt.transport.CloseIdleConnections()
}

// startLocked starts m's goroutines under runCtx.
func (rt *Router) startLocked(m *member) {
	ctx, cancel := context.WithCancel(rt.runCtx)
	m.start(ctx, cancel, &rt.wg)
}

// errShutdown is the cancellation cause of the requests AbortInFlight ends.
var errShutdown = errors.New("router: gateway shutting down")

// AbortInFlight ends every completion request still running, for a shutdown whose drain
// deadline has passed: a stream that has started gets one OpenAI error event (code
// gateway_shutting_down) and ends; a request not answered yet gets a 503 with that code; new
// requests fail the same way. Call it before closing the server's connections, so clients
// learn why their stream ended instead of seeing a bare disconnect. Safe for concurrent use;
// later calls do nothing.
func (rt *Router) AbortInFlight() { rt.abort(errShutdown) }

// shuttingDown reports whether ctx ended because of AbortInFlight.
func shuttingDown(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errShutdown) }
