package endpoint

import (
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// completions is POST /v1/completions on the pipeline: the body is parsed by
// openai.ParseCompletion, every prompt tokenized with the model's tokenizer (token-id prompts
// checked against its vocabulary), and the request routed on its first prompt. The worker's
// answer is relayed as it comes (engines write the completion objects).
var Completions = &pipeline.Endpoint{
	Parse: func(body []byte, lim openai.Limits, req *engine.Request) (string, *openai.Error) {
		cr, aerr := openai.ParseCompletion(body, lim)
		if aerr != nil {
			return "", aerr
		}
		req.Completion = cr
		return cr.Model, nil
	},
	Prompt: func(pl *pipeline.Pipeline, c *pipeline.Call) (string, *openai.Error) {
		c.Req.ForwardTokenIDs = pl.Config().ForwardTokenIDs
		var aerr *openai.Error
		c.Req.Tokens, aerr = pl.PromptTokens(c.Served, c.Req.Completion)
		return "", aerr
	},
	Write: (*pipeline.Pipeline).Relay,
}
