package pipeline

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/pkg/openai"
)

// RenderChat returns the token ids (and prompt text) of a chat request, rendered with c's
// model's renderer, or nil ids without one. A request with media is routed on other ids
// (c.media, mediaRouteTokens).
func (pl *Pipeline) RenderChat(c *Call, req *openai.ChatRequest) ([]uint32, string, *openai.Error) {
	m := c.Served
	if m.Chat == nil {
		return nil, "", nil
	}
	t0 := time.Now()
	res, aerr := m.Chat.Render(req)
	pl.met.tokenize.Observe(time.Since(t0).Seconds())
	if aerr != nil {
		return nil, "", aerr
	}
	n := len(res.TokenIDs)
	c.Req.Media = len(res.Media)
	if len(res.Media) > 0 {
		n = pl.routeMedia(c, m.Chat, &res)
	}
	if aerr := pl.checkPromptLen(n, "messages"); aerr != nil {
		return nil, "", aerr
	}
	return res.TokenIDs, res.Prompt, nil
}

// PromptTokens returns the token ids of every prompt: at most MaxPrompts of them, token-id
// prompts checked against the vocabulary, text prompts tokenized (when model m has a
// tokenizer), all checked against MaxPromptTokens.
func (pl *Pipeline) PromptTokens(m *Served, req *openai.CompletionRequest) ([][]uint32, *openai.Error) {
	if len(req.Prompts) > pl.cfg.MaxPrompts {
		return nil, openai.BadRequest("prompt", fmt.Sprintf("at most %d prompts per request, got %d", pl.cfg.MaxPrompts, len(req.Prompts)))
	}
	out := make([][]uint32, len(req.Prompts))
	tk := m.Tok
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
		if aerr := pl.checkPromptLen(len(out[i]), "prompt"); aerr != nil {
			return nil, aerr
		}
	}
	if tokTime > 0 {
		pl.met.tokenize.Observe(tokTime.Seconds())
	}
	return out, nil
}

// checkPromptLen enforces MaxPromptTokens (413) and counts the tokens routed.
func (pl *Pipeline) checkPromptLen(n int, param string) *openai.Error {
	if pl.cfg.MaxPromptTokens > 0 && n > pl.cfg.MaxPromptTokens {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Param: param, Code: "context_length_exceeded",
			Message: fmt.Sprintf("prompt has %d tokens, more than the limit of %d", n, pl.cfg.MaxPromptTokens)}
	}
	pl.met.tokensSeen.Add(float64(n))
	return nil
}
