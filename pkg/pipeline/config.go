package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/fleet"
)

// The pipeline's configuration and its type; new.go builds it.

// Defaults of Config fields left zero: an 8 MiB body limit, at most 16 samples and 256 prompts
// per request.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultMaxN         = 16
	DefaultMaxPrompts   = 256
)

// Config configures a Pipeline. Zero limits take the documented defaults.
type Config struct {
	// Models are the models served, each with its own tokenizer, chat template, policy, index
	// and pool of workers (those whose spec names it). Models[0] is the default model: its
	// pool also takes every worker whose spec names no other model, and requests that name
	// no model go to it; its Name may be empty, and is then the first model one of its
	// workers reports. At least one. SetModel and the fleet's RemovePool change the others
	// while serving.
	Models []Model
	// Fleet configures the workers' health checks, event streams and drains. Its Logger,
	// Registerer and Now are the pipeline's own (below).
	Fleet fleet.Config

	// ForwardTokenIDs sends the gateway's token ids as the prompt to http:// workers, so the
	// engine caches exactly what was indexed.
	ForwardTokenIDs bool
	// ForwardPriority passes a request's own priority field on to http:// workers (held to the
	// client key's grant), for engines that run priority scheduling (vLLM
	// --scheduling-policy priority); false strips it. Either way it is the request's admission
	// band when no x-kvgate-priority header gives one.
	ForwardPriority bool
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
	// Registerer receives the pipeline's and the fleet's metrics. nil: not registered.
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
	// MaxWaitingPerWorker, when > 0, also counts a worker as full while its engine's own
	// queue holds that many requests (vllm:num_requests_waiting in the last engine-load
	// sample, fresher than three Fleet.EngineMetricsInterval) and this gateway has at least
	// one request in flight there (admission.go, engineFull). It needs Max and
	// Fleet.EngineMetricsInterval. 0: only MaxInFlightPerWorker bounds a worker.
	MaxWaitingPerWorker int
	// Reserve keeps that many of each worker's MaxInFlightPerWorker slots for requests of
	// the default band and better (priority ≤ 0): a request of a band > 0 (batch) takes a
	// worker only while it has fewer than MaxInFlightPerWorker − Reserve requests, so an
	// interactive request finds a slot free instead of waiting for a batch request to end
	// (admission.go). Less than MaxInFlightPerWorker; needs Max. 0: every band may fill a
	// worker.
	Reserve int
}

// Pipeline runs requests of every endpoint over a fleet of workers (pkg/fleet): the routing
// decision, admission, prefill/decode pairs, the engine call, retries and the relay of
// responses. Build it with New, add workers to its Fleet, serve endpoints with Handle and call
// Run for the background work.
//
// A Pipeline must not be copied.
type Pipeline struct {
	cfg     Config
	log     *zap.Logger
	met     *metrics
	now     func() time.Time
	scratch sync.Pool // the routing decision's per-request buffers
	fleet   *fleet.Fleet
	// rand draws bootstrap rooms and pair request ids (goroutine-safe).
	rand func() uint64
	// mooncake caches the prefill workers' Mooncake engine ids.
	mooncake mooncakeEngines
	// loadMaxAge is how old an engine-load sample may be before only in-flight counts.
	loadMaxAge time.Duration
	// tracer is Config.Tracing's tracer, nil when tracing is off.
	tracer trace.Tracer
	// poolsMu serializes SetModel and RemoveModel, so that each closes the admission queues
	// of exactly the pools it replaced.
	poolsMu sync.Mutex

	// aborted is cancelled (cause errShutdown) by AbortInFlight; every request's context
	// follows it.
	aborted context.Context
	abort   context.CancelCauseFunc
}

// Config returns the pipeline's configuration, defaults filled in. It must not be changed.
func (pl *Pipeline) Config() *Config { return &pl.cfg }

// Fleet returns the pipeline's fleet: its workers (SyncWorkers, AddWorker, RemoveWorker),
// pools, readiness and snapshot.
func (pl *Pipeline) Fleet() *fleet.Fleet { return pl.fleet }
