package router

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
)

// call is one request in flight through the pipeline.
type call struct {
	// req is what the engines get (the parsed request, its tokens, the client's headers).
	req     engine.Request
	arrival time.Time
	// target is the model's pool the request was resolved to, model the router's state of
	// that model: its tokenizer and chat renderer make the tokens route uses, its policy
	// picks.
	target fleet.Target
	model  *model
	// route, when set, are the ids routed on instead of the prompt's (a request with media,
	// mediaRouteTokens); media describes that request's routing for /debug/route.
	route []uint32
	media *mediaRoute
	// tctx is the request's context carrying its server span when the request is traced
	// (tracing.go), nil otherwise; up is the upstream call's span while one is in flight.
	tctx context.Context
	up   trace.Span
	// leg names the pair leg this call is (legNameDecode), "" for a whole request.
	leg string
}

// routeTokens returns the tokens the request is routed on: its first prompt's, or route.
func (c *call) routeTokens() []uint32 {
	if c.route != nil {
		return c.route
	}
	return c.req.Tokens[0]
}
