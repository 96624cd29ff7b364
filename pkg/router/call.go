package router

import (
	"time"

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
}

// routeTokens returns the tokens the request is routed on: its first prompt's, or route.
func (c *call) routeTokens() []uint32 {
	if c.route != nil {
		return c.route
	}
	return c.req.Tokens[0]
}
