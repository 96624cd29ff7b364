package router

import (
	"net/http"
	"time"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/openai"
)

// ChatRenderer renders a chat request into the prompt and token ids the engine computes for it
// (pkg/chat, wire/vllm-chat.md); *chat.Renderer implements it.
type ChatRenderer interface {
	Render(req *openai.ChatRequest) (chat.Result, *openai.Error)
}

// handleChat serves POST /v1/chat/completions: the body is parsed (openai.ParseChat), rendered
// and tokenized exactly as the engine will (Config.Chat) and routed on those ids like a
// completion. http:// workers get the client's body (model renamed) and render it themselves;
// grpc:// workers get the ids, and their output becomes the chat response in pkg/engine, parsed
// by the model's parsers (Config.ChatParsers, Model.ChatParsers). Without a renderer the request
// is routed without prefix information, and only http:// workers can serve it.
func (rt *Router) handleChat(w http.ResponseWriter, r *http.Request) {
	c := &call{arrival: time.Now(), req: engine.Request{Header: r.Header}}
	body, release, aerr := openai.ReadBody(w, r, rt.cfg.MaxBodyBytes)
	defer release() // the parsed request refers into body until the handler returns
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	req, aerr := openai.ParseChat(body, openai.Limits{MaxN: rt.cfg.MaxN})
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	c.req.Chat = req
	if !rt.admitModel(w, c, req.Model) {
		return
	}
	ids, prompt, aerr := rt.renderChat(c.pool, req)
	if aerr != nil {
		openai.WriteError(w, aerr)
		return
	}
	c.req.Tokens = [][]uint32{ids}
	c.req.ChatOutput = engine.ChatOutput{Parsers: c.pool.parsers, Info: parse.InfoFor(req, prompt), ReasoningField: c.pool.reasoningField}
	rt.serve(w, r, c)
}

// renderChat returns the token ids (and prompt text) a chat request is routed on, rendered
// with pool p's renderer, or nil ids without one.
func (rt *Router) renderChat(p *pool, req *openai.ChatRequest) ([]uint32, string, *openai.Error) {
	if p.chat == nil {
		return nil, "", nil
	}
	t0 := time.Now()
	res, aerr := p.chat.Render(req)
	rt.met.tokenize.Observe(time.Since(t0).Seconds())
	if aerr != nil {
		return nil, "", aerr
	}
	if aerr := rt.checkPromptLen(len(res.TokenIDs), "messages"); aerr != nil {
		return nil, "", aerr
	}
	return res.TokenIDs, res.Prompt, nil
}
