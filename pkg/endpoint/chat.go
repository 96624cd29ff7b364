package endpoint

import (
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// Chat is POST /v1/chat/completions on the pipeline: the body is parsed
// (openai.ParseChat), rendered and tokenized exactly as the engine will (Model.Chat) and routed
// on those ids like a completion. http:// workers get the client's body (model renamed) and
// render it themselves; grpc:// workers get the ids, and their output becomes the chat
// response in pkg/engine, parsed by the model's parsers (Model.ChatParsers). Without a renderer
// the request is routed without prefix information, and only http:// workers can serve it.
var Chat = &pipeline.Endpoint{
	Parse: func(body []byte, lim openai.Limits, req *engine.Request) (string, *openai.Error) {
		cr, aerr := openai.ParseChat(body, lim)
		if aerr != nil {
			return "", aerr
		}
		req.Chat = cr
		return cr.Model, nil
	},
	Prompt: func(pl *pipeline.Pipeline, c *pipeline.Call) (string, *openai.Error) {
		ids, prompt, aerr := pl.RenderChat(c, c.Req.Chat)
		if aerr != nil {
			return "", aerr
		}
		c.Req.Tokens = [][]uint32{ids}
		c.Req.ChatOutput = engine.ChatOutput{Parsers: c.Served.Parsers, Info: parse.InfoFor(c.Req.Chat, prompt), ReasoningField: c.Served.ReasoningField}
		return prompt, nil
	},
	Write: (*pipeline.Pipeline).Relay,
}
