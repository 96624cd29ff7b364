package router

import (
	"context"
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

// Defaults of QueueConfig fields left zero.
const (
	DefaultQueueTimeout = 30 * time.Second
)

// QueueConfig configures the admission queue of every model's pool (admission.go runs it).
type QueueConfig struct {
	// Max is the most requests waiting per pool; past it a request gets 429
	// rate_limit_exceeded. 0: no queue, a request finding every worker full gets the 429 at
	// once. The queue needs Config.MaxInFlightPerWorker, the bound it waits for.
	Max int
	// Timeout is the longest a request waits (default 30 s); past it 503 queue_timeout with
	// Retry-After.
	Timeout time.Duration
	// MaxWait is the age bound: a request waiting this long goes before every later one,
	// whatever its band (0: none, a low band may wait for its whole Timeout).
	MaxWait time.Duration
	// LookAhead is how many waiting requests of the best band a freed worker is matched
	// against for the longest cached prefix (default admission.DefaultLookAhead).
	LookAhead int
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
	// rand draws bootstrap rooms and pair request ids (goroutine-safe).
	rand func() uint64
	// loadMaxAge is how old an engine-load sample may be before only in-flight counts.
	loadMaxAge time.Duration
	// tracer is Config.Tracing's tracer, nil when tracing is off.
	tracer trace.Tracer

	// aborted is cancelled (cause errShutdown) by AbortInFlight; every request's context
	// follows it.
	aborted context.Context
	abort   context.CancelCauseFunc
}

// Fleet returns the router's fleet: its workers (SyncWorkers, AddWorker, RemoveWorker),
// readiness and snapshot.
func (rt *Router) Fleet() *fleet.Fleet { return rt.fleet }

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

// defaultModel returns the router's state of the default model.
func (rt *Router) defaultModel() *model { return modelOf(rt.fleet.Snapshot().DefaultPool()) }
