package router

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/endpoint"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// Model is one served model (pipeline.Model).
type Model = pipeline.Model

// Config configures a Router. The fields from Models to Now configure its request pipeline
// and are documented on pipeline.Config; zero limits take the documented defaults.
type Config struct {
	Models               []Model
	Fleet                fleet.Config
	ForwardTokenIDs      bool
	ForwardPriority      bool
	MaxPrompts           int
	MaxPromptTokens      int
	MaxBodyBytes         int64
	MaxN                 int
	MaxInFlightPerWorker int
	Queue                pipeline.QueueConfig
	UpstreamTimeout      time.Duration
	Tracing              trace.TracerProvider
	Logger               *zap.Logger
	Registerer           prometheus.Registerer
	Now                  func() time.Time

	// Responses keeps the Responses and Conversations APIs' state (pkg/conversation). nil: a
	// service over an in-memory store with its default bounds, registered on Registerer.
	Responses *conversation.Service
	// Clients, when set, guards the public API (Handler) with client keys and per-key limits
	// (clientauth); /health and /readiness must be among its open paths. nil: no client
	// authentication and no limits.
	Clients *clientauth.Guard
	// AdminToken, when set, is required as "Authorization: Bearer <token>" by AdminHandler.
	AdminToken string
	// Profiling serves Go's runtime profiles on the admin API (GET /debug/pprof/...: heap,
	// allocs, goroutine, CPU profile, execution trace), behind AdminToken like the rest of it.
	Profiling bool
	// AccessLog, when set, receives one info line per public API request as it ends
	// (access.go): request id, route, client key, model, worker, routing reason, prompt and
	// cached tokens, status, TTFT and duration. nil: no access log.
	AccessLog *zap.Logger
}

// pipeline returns the pipeline's part of c.
func (c *Config) pipeline() pipeline.Config {
	return pipeline.Config{Models: c.Models, Fleet: c.Fleet, ForwardTokenIDs: c.ForwardTokenIDs, ForwardPriority: c.ForwardPriority, MaxPrompts: c.MaxPrompts,
		MaxPromptTokens: c.MaxPromptTokens, MaxBodyBytes: c.MaxBodyBytes, MaxN: c.MaxN, MaxInFlightPerWorker: c.MaxInFlightPerWorker,
		Queue: c.Queue, UpstreamTimeout: c.UpstreamTimeout, Tracing: c.Tracing, Logger: c.Logger, Registerer: c.Registerer, Now: c.Now}
}

// Router is the gateway's HTTP surface: the public API's routes, each an endpoint
// (pkg/endpoint) of the request pipeline (pkg/pipeline), the admin and debug API and the
// request metrics. Build it with New, add workers to its Fleet, serve Handler() and
// AdminHandler() and call Run for the background work.
//
// A Router must not be copied.
type Router struct {
	cfg   Config
	pl    *pipeline.Pipeline
	api   *endpoint.API
	fleet *fleet.Fleet
	met   *metrics
	// adminKeys holds the admin token (nil: the admin API is open).
	adminKeys *clientauth.KeySet
}

// Fleet returns the router's fleet: its workers (SyncWorkers, AddWorker, RemoveWorker),
// readiness and snapshot.
func (rt *Router) Fleet() *fleet.Fleet { return rt.fleet }

// Run runs the pipeline's background work (pipeline.Pipeline.Run) until ctx is done, and
// returns when it has stopped. Run must be called at most once.
func (rt *Router) Run(ctx context.Context) error { return rt.pl.Run(ctx) }

// SetModel adds a model while serving, or replaces the one of that name
// (pipeline.Pipeline.SetModel).
func (rt *Router) SetModel(m Model) error { return rt.pl.SetModel(m) }

// RemoveModel stops serving a model other than the default (pipeline.Pipeline.RemoveModel):
// its workers drain, and any whose spec still names it (a --worker flag's, say) starts again in
// the default pool. It fails for a model that is not configured.
func (rt *Router) RemoveModel(name string) error { return rt.pl.RemoveModel(name) }

// ModelNames returns the names of the models other than the default, in order.
func (rt *Router) ModelNames() []string { return rt.fleet.PoolNames() }

// AbortInFlight ends every request still running, for a shutdown whose drain deadline has
// passed (pipeline.Pipeline.AbortInFlight). Call it before closing the server's connections,
// so clients learn why their stream ended instead of seeing a bare disconnect.
func (rt *Router) AbortInFlight() { rt.pl.AbortInFlight() }
