package pipeline

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
)

// Call is one request in flight through the pipeline.
type Call struct {
	// Req is what the engines get (the parsed request, its tokens, the client's headers).
	Req     engine.Request
	Arrival time.Time
	// Target is the model's pool the request was resolved to, Served the pipeline's state of
	// that model: its tokenizer and chat renderer make the tokens route uses, its policy
	// picks.
	Target fleet.Target
	Served *Served
	// route, when set, are the ids routed on instead of the prompt's (a request with media,
	// mediaRouteTokens); media describes that request's routing for /debug/route.
	route []uint32
	media *mediaRoute
	// mediaKeys is the engine's view of a request with media for the lookup (media.go), nil
	// when none is known.
	mediaKeys *indexer.MediaKeys
	// tctx is the request's context carrying its server span when the request is traced
	// (tracing.go), nil otherwise; up is the upstream call's span while one is in flight.
	tctx context.Context
	up   trace.Span
	// leg names the pair leg this call is (legNameDecode), "" for a whole request.
	leg string
	// rec is the request's access-log record (access.go), nil when the log is off.
	rec *Record
	// lowBand is set by admission for a request of a band below the default (> 0) when the
	// queue keeps slots for the others (QueueConfig.Reserve): it may take a worker only
	// under the lower bound.
	lowBand bool
}

// RouteTokens returns the tokens the request is routed on: its first prompt's, or route.
func (c *Call) RouteTokens() []uint32 {
	if c.route != nil {
		return c.route
	}
	return c.Req.Tokens[0]
}

// bodyPriority returns the priority field of c's completion or chat body (nil: none).
func (c *Call) bodyPriority() *int64 {
	switch {
	case c.Req.Completion != nil:
		return c.Req.Completion.Priority
	case c.Req.Chat != nil:
		return c.Req.Chat.Priority
	}
	return nil
}

// bodyHas reports whether c's completion or chat body has the top-level field key.
func (c *Call) bodyHas(key string) bool {
	switch {
	case c.Req.Completion != nil:
		return c.Req.Completion.Has(key)
	case c.Req.Chat != nil:
		return c.Req.Chat.Has(key)
	}
	return false
}

// HasMedia reports whether c's chat request carried media (RenderChat routes it on ids of its
// own, and /debug/route explains them without prompt tokens).
func (c *Call) HasMedia() bool { return c.media != nil }
