package router

import (
	"time"

	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// chatCompletions is POST /v1/chat/completions on the pipeline: the body is parsed
// (openai.ParseChat), rendered and tokenized exactly as the engine will (Model.Chat) and routed
// on those ids like a completion. http:// workers get the client's body (model renamed) and
// render it themselves; grpc:// workers get the ids, and their output becomes the chat
// response in pkg/engine, parsed by the model's parsers (Model.ChatParsers). Without a renderer
// the request is routed without prefix information, and only http:// workers can serve it.
var chatCompletions = &endpoint{
	parse: func(body []byte, lim openai.Limits, req *engine.Request) (string, *openai.Error) {
		cr, aerr := openai.ParseChat(body, lim)
		if aerr != nil {
			return "", aerr
		}
		req.Chat = cr
		return cr.Model, nil
	},
	prompt: func(rt *Router, c *call) (string, *openai.Error) {
		ids, prompt, aerr := rt.renderChat(c, c.req.Chat)
		if aerr != nil {
			return "", aerr
		}
		c.req.Tokens = [][]uint32{ids}
		c.req.ChatOutput = engine.ChatOutput{Parsers: c.model.parsers, Info: parse.InfoFor(c.req.Chat, prompt), ReasoningField: c.model.reasoningField}
		return prompt, nil
	},
	write: (*Router).relay,
}

// renderChat returns the token ids (and prompt text) of a chat request, rendered with c's
// model's renderer, or nil ids without one. A request with media is routed on other ids
// (c.media, mediaRouteTokens).
func (rt *Router) renderChat(c *call, req *openai.ChatRequest) ([]uint32, string, *openai.Error) {
	m := c.model
	if m.chat == nil {
		return nil, "", nil
	}
	t0 := time.Now()
	res, aerr := m.chat.Render(req)
	rt.met.tokenize.Observe(time.Since(t0).Seconds())
	if aerr != nil {
		return nil, "", aerr
	}
	if aerr := rt.checkPromptLen(len(res.TokenIDs), "messages"); aerr != nil {
		return nil, "", aerr
	}
	c.req.Media = len(res.Media)
	if len(res.Media) > 0 {
		c.media = &mediaRoute{items: len(res.Media), exact: res.Exact, located: res.MediaAt != nil, unrendered: res.Unrendered}
		if res.Unrendered == "" {
			c.route = mediaRouteTokens(&res)
		}
	}
	return res.TokenIDs, res.Prompt, nil
}
