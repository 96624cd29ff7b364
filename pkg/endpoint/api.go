package endpoint

import (
	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// API is the public API's endpoints that need more than an endpoint value: Anthropic's
// Messages (with count_tokens), the Responses and Conversations APIs over their stored state,
// and /tokenize and /detokenize, all on one pipeline.
type API struct {
	pl        *pipeline.Pipeline
	responses *conversation.Service
}

// NewAPI returns the endpoints of pl, the Responses API's state kept by responses.
func NewAPI(pl *pipeline.Pipeline, responses *conversation.Service) *API {
	return &API{pl: pl, responses: responses}
}
