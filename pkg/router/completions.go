package router

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// completions is POST /v1/completions on the pipeline: the body is parsed by
// openai.ParseCompletion, every prompt tokenized with the model's tokenizer (token-id prompts
// checked against its vocabulary), and the request routed on its first prompt. The worker's
// answer is relayed as it comes (engines write the completion objects).
var completions = &endpoint{
	parse: func(body []byte, lim openai.Limits, req *engine.Request) (string, *openai.Error) {
		cr, aerr := openai.ParseCompletion(body, lim)
		if aerr != nil {
			return "", aerr
		}
		req.Completion = cr
		return cr.Model, nil
	},
	prompt: func(rt *Router, c *call) (string, *openai.Error) {
		c.req.ForwardTokenIDs = rt.cfg.ForwardTokenIDs
		var aerr *openai.Error
		c.req.Tokens, aerr = rt.promptTokens(c.model, c.req.Completion)
		return "", aerr
	},
	write: (*Router).relay,
}

// promptTokens returns the token ids of every prompt: at most MaxPrompts of them, token-id
// prompts checked against the vocabulary, text prompts tokenized (when model m has a
// tokenizer), all checked against MaxPromptTokens.
func (rt *Router) promptTokens(m *model, req *openai.CompletionRequest) ([][]uint32, *openai.Error) {
	if len(req.Prompts) > rt.cfg.MaxPrompts {
		return nil, openai.BadRequest("prompt", fmt.Sprintf("at most %d prompts per request, got %d", rt.cfg.MaxPrompts, len(req.Prompts)))
	}
	out := make([][]uint32, len(req.Prompts))
	tk := m.tok
	var tokTime time.Duration
	for i := range req.Prompts {
		p := &req.Prompts[i]
		switch {
		case p.IsTokens:
			if tk != nil {
				v := uint32(tk.VocabSize())
				for _, id := range p.Tokens {
					if id >= v {
						return nil, openai.BadRequest("prompt", fmt.Sprintf("token id %d is outside the vocabulary (size %d)", id, v))
					}
				}
			}
			out[i] = p.Tokens
		case tk != nil:
			t0 := time.Now()
			ids, err := tk.Encode(nil, p.Text, true)
			tokTime += time.Since(t0)
			if err != nil {
				return nil, openai.BadRequest("prompt", "prompt could not be tokenized: "+err.Error())
			}
			if len(ids) == 0 {
				return nil, openai.BadRequest("prompt", "prompt must not be empty")
			}
			out[i] = ids
		}
		if aerr := rt.checkPromptLen(len(out[i]), "prompt"); aerr != nil {
			return nil, aerr
		}
	}
	if tokTime > 0 {
		rt.met.tokenize.Observe(tokTime.Seconds())
	}
	return out, nil
}

// checkPromptLen enforces MaxPromptTokens (413) and counts the tokens routed.
func (rt *Router) checkPromptLen(n int, param string) *openai.Error {
	if rt.cfg.MaxPromptTokens > 0 && n > rt.cfg.MaxPromptTokens {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Param: param, Code: "context_length_exceeded",
			Message: fmt.Sprintf("prompt has %d tokens, more than the limit of %d", n, rt.cfg.MaxPromptTokens)}
	}
	rt.met.tokensSeen.Add(float64(n))
	return nil
}
