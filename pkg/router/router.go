package router

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/fleet"
)

// Defaults of Config fields left zero: an 8 MiB body limit, at most 16 samples and 256 prompts
// per request.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultMaxN         = 16
	DefaultMaxPrompts   = 256
)

// Config configures a Router. Zero limits take the documented defaults.
type Config struct {
	// Models are the models served, each with its own tokenizer, chat template, policy, index
	// and pool of workers (those whose spec names it). Models[0] is the default model: its
	// pool also takes every worker whose spec names no other model, and requests that name
	// no model go to it; its Name may be empty, and is then the first model one of its
	// workers reports. At least one. SetModel and RemoveModel change the others while
	// serving.
	Models []Model
	// Fleet configures the workers' health checks, event streams and drains. Its Logger,
	// Registerer and Now are the router's own (below).
	Fleet fleet.Config
	// Responses keeps the Responses and Conversations APIs' state (pkg/conversation). nil: a
	// service over an in-memory store with its default bounds, registered on Registerer.
	Responses *conversation.Service
	// Clients, when set, guards the public API (Handler) with client keys and per-key limits
	// (clientauth); /health and /readiness must be among its open paths. nil: no client
	// authentication and no limits.
	Clients *clientauth.Guard

	// ForwardTokenIDs sends the gateway's token ids as the prompt to http:// workers, so the
	// engine caches exactly what was indexed.
	ForwardTokenIDs bool
	// AdminToken, when set, is required as "Authorization: Bearer <token>" by AdminHandler.
	AdminToken string
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
	// ineligible; with every candidate full the gateway answers 429, or queues the request
	// (Queue).
	MaxInFlightPerWorker int
	// Queue configures the admission queue of each model's pool (admission.go; DESIGN.md
	// §16): with Queue.Max > 0 and MaxInFlightPerWorker > 0, a request finding every worker
	// of its pool full waits for a slot, by priority band and fairly across client keys.
	Queue QueueConfig
	// UpstreamTimeout bounds a whole request to a worker (0: none; client disconnects still
	// cancel).
	UpstreamTimeout time.Duration

	// Tracing, when set, traces each generating request (tracing.go): a server span continuing
	// the client's W3C trace context, a span per pipeline stage, and the upstream call's context
	// passed on to the worker. nil: no tracing, at no cost on the request path.
	Tracing trace.TracerProvider

	// Logger receives lifecycle logs at info and one debug line per routing decision.
	// nil: no logs.
	Logger *zap.Logger
	// Registerer receives the router's and the fleet's metrics. nil: not registered.
	Registerer prometheus.Registerer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Router is the gateway: the OpenAI HTTP API, its one request pipeline (pipeline.go), the
// routing decision and the relay of responses, over a fleet of workers (pkg/fleet). Build it
// with New, add workers to its Fleet, serve Handler() and AdminHandler() and call Run for the
// background work.
//
// A Router must not be copied.
type Router struct {
	cfg     Config
	log     *zap.Logger
	met     *metrics
	now     func() time.Time
	scratch sync.Pool // the routing decision's per-request buffers
	fleet   *fleet.Fleet
	// responses is the Responses API's state (Config.Responses).
	responses *conversation.Service
	// adminKeys holds the admin token (nil: the admin API is open).
	adminKeys *clientauth.KeySet
	// loadMaxAge is how old an engine-load sample may be before only in-flight counts.
	loadMaxAge time.Duration
	// tracer is Config.Tracing's tracer, nil when tracing is off.
	tracer trace.Tracer

	// aborted is cancelled (cause errShutdown) by AbortInFlight; every request's context
	// follows it.
	aborted context.Context
	abort   context.CancelCauseFunc
}

// New validates cfg and returns a Router with no workers. It starts no goroutines.
func New(cfg Config) (*Router, error) {
	if len(cfg.Models) == 0 {
		return nil, errors.New("router: new: a model is required")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxN == 0 {
		cfg.MaxN = DefaultMaxN
	}
	if cfg.MaxPrompts == 0 {
		cfg.MaxPrompts = DefaultMaxPrompts
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxN < 0 || cfg.MaxPrompts < 0 || cfg.MaxPromptTokens < 0 || cfg.MaxInFlightPerWorker < 0 || cfg.UpstreamTimeout < 0 ||
		cfg.Queue.Max < 0 || cfg.Queue.Timeout < 0 || cfg.Queue.MaxWait < 0 || cfg.Queue.LookAhead < 0 {
		return nil, errors.New("router: new: limits and timeouts must not be negative")
	}
	if cfg.Queue.Max > 0 && cfg.MaxInFlightPerWorker == 0 {
		return nil, errors.New("router: new: an admission queue needs a per-worker in-flight limit to wait for")
	}
	if cfg.Queue.Timeout == 0 {
		cfg.Queue.Timeout = DefaultQueueTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Fleet.Logger, cfg.Fleet.Registerer, cfg.Fleet.Now = cfg.Logger, cfg.Registerer, cfg.Now
	pools := make([]fleet.PoolConfig, len(cfg.Models))
	for i, m := range cfg.Models {
		pc, err := poolConfig(m, cfg)
		if err != nil {
			return nil, err
		}
		pools[i] = pc
	}
	fl, err := fleet.New(cfg.Fleet, pools)
	if err != nil {
		return nil, err
	}
	rt := &Router{cfg: cfg, log: cfg.Logger, now: cfg.Now, fleet: fl, loadMaxAge: 3 * cfg.Fleet.EngineMetricsInterval}
	rt.aborted, rt.abort = context.WithCancelCause(context.Background())
	if cfg.Tracing != nil {
		rt.tracer = cfg.Tracing.Tracer(tracerName)
	}
	if rt.met, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	if rt.responses, err = responsesService(cfg); err != nil {
		return nil, err
	}
	if cfg.AdminToken != "" {
		if rt.adminKeys, err = clientauth.NewKeySet([]clientauth.APIKey{{Name: "admin", Key: cfg.AdminToken}}); err != nil {
			return nil, errors.New("router: new: the admin token must be 1-4096 printable ASCII characters without spaces")
		}
	}
	return rt, nil
}

// Fleet returns the router's fleet: its workers (SyncWorkers, AddWorker, RemoveWorker),
// readiness and snapshot.
func (rt *Router) Fleet() *fleet.Fleet { return rt.fleet }

// Run runs the fleet's background work (health checks, event streams, engine-load scrapes)
// and, with a queue configured, the periodic offer of free slots to the admission queues,
// until ctx is done, and returns when it has stopped. Run must be called at most once.
func (rt *Router) Run(ctx context.Context) error {
	rt.log.Info("router running", zap.Int("workers", len(rt.fleet.Snapshot().Members())), zap.String("policy", policyName(rt.defaultModel().policy)),
		zap.String("kv_index", rt.fleet.KVIndex()), zap.Strings("models", rt.ModelNames()))
	if rt.cfg.Queue.Max == 0 {
		return rt.fleet.Run(ctx)
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rt.kickLoop(ctx)
	}()
	err := rt.fleet.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

// defaultModel returns the router's state of the default model.
func (rt *Router) defaultModel() *model { return modelOf(rt.fleet.Snapshot().DefaultPool()) }

// SetModel adds a model while serving, or replaces the one of that name: the new pool starts
// with an empty index, and the workers of the old one, like those whose spec names the model
// and were served by the default pool, drain and start again in it. It fails, changing nothing,
// for an invalid model, the default model's name, or a worker that cannot be rebuilt.
func (rt *Router) SetModel(m Model) error {
	pc, err := poolConfig(m, rt.cfg)
	if err != nil {
		return err
	}
	return rt.fleet.SetPool(pc)
}

// RemoveModel stops serving a model other than the default: its workers drain, and any whose
// spec still names it (a --worker flag's, say) starts again in the default pool. It fails for
// a model that is not configured.
func (rt *Router) RemoveModel(name string) error { return rt.fleet.RemovePool(name) }

// ModelNames returns the names of the models other than the default, in order.
func (rt *Router) ModelNames() []string { return rt.fleet.PoolNames() }

// AbortInFlight ends every request still running, for a shutdown whose drain deadline has
// passed: a stream that has started gets one OpenAI error event (code gateway_shutting_down)
// and ends; a request not answered yet gets a 503 with that code; new requests fail the same
// way. Call it before closing the server's connections, so clients learn why their stream
// ended instead of seeing a bare disconnect. Safe for concurrent use; later calls do nothing.
func (rt *Router) AbortInFlight() { rt.abort(errShutdown) }
