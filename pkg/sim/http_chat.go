package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
)

// ChatRenderer renders a chat request into the prompt text and token ids the engine computes
// for it (wire/vllm-chat.md) and expands its media placeholders as the engine's processor
// does (chat.Expanded); *chat.Renderer implements it.
type ChatRenderer interface {
	Render(req *openai.ChatRequest) (chat.Result, *openai.Error)
	Expand(res *chat.Result, identify func(*chat.MediaItem) string) chat.Expanded
}

// noTemplateMessage answers chat requests on a server without a renderer, in the words vLLM
// uses for a model without a chat template.
const noTemplateMessage = "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one. (simworker: start it with --tokenizer DIR, a model directory whose tokenizer_config.json or chat_template.jinja holds the template, or add --chat-template FILE.)"

// handleChat serves POST /v1/chat/completions as vLLM does: the body is validated
// (openai.ParseChat), rendered and tokenized with the model's chat template (ServerConfig.Chat),
// and the prompt's ids run through the same engine as completions, so the KV cache, its events
// and usage.prompt_tokens_details.cached_tokens see the chat prompt. The output is the
// chat.completion body or chat.completion.chunk events, split into content, reasoning and
// tool calls by ServerConfig.ChatParsers when set.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.traces.note(r)
	p, out, aerr := s.parseChat(r)
	if aerr == nil {
		p.job, aerr = s.pdStart(r.Context(), p)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	g, aerr := s.submit(p, "chatcmpl-", "messages")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var err error
	if p.stream {
		err = s.streamChat(r.Context(), w, g, p, out)
	} else {
		err = s.waitChat(r.Context(), w, g, p, out)
	}
	s.pdEnd(p.job, g, err)
	s.end(g, err)
}

// maxN bounds n for completions and chat alike.
const maxN = 128

// fromOpenAI converts a request error of pkg/openai or pkg/chat to the simulator's vLLM-shaped
// error.
func fromOpenAI(e *openai.Error) *apiError {
	return &apiError{status: e.Status, msg: e.Message, param: e.Param}
}

// parseChat reads, validates and renders a chat request into what the engine runs and how its
// output is shaped. The request is rendered only when it is valid and names the served model.
func (s *Server) parseChat(r *http.Request) (*parsedRequest, *chatOut, *apiError) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		return nil, nil, aerr
	}
	req, oerr := openai.ParseChat(body, openai.Limits{MaxN: maxN})
	if oerr != nil {
		return nil, nil, fromOpenAI(oerr)
	}
	if aerr := s.checkModel(req.Model); aerr != nil {
		return nil, nil, aerr
	}
	if s.cfg.Chat == nil {
		return nil, nil, badRequest("%s", noTemplateMessage)
	}
	res, oerr := s.cfg.Chat.Render(req)
	if oerr != nil {
		return nil, nil, fromOpenAI(oerr)
	}
	out := newChatOut(req, res.Prompt, s.cfg.ChatParsers)
	ids, media := res.TokenIDs, []indexer.ExtraSpan(nil)
	if len(res.Media) > 0 {
		ids, media = s.expandMedia(&res)
	}
	p, aerr := s.chatRequest(req, ids, out)
	if aerr != nil {
		return nil, nil, aerr
	}
	p.media = media
	if s.pd != nil {
		if p.pd, aerr = parsePDFields(body); aerr != nil {
			return nil, nil, aerr
		}
	}
	return p, out, nil
}

// expandMedia is what the engine runs for a prompt with media: its placeholders expanded by
// the family rules the gateway uses (chat.Renderer.Expand), and each item's range keyed by its
// mm hash (mediaIdentity). An item whose count the rules do not give keeps one placeholder
// token, its range that token.
func (s *Server) expandMedia(res *chat.Result) ([]uint32, []indexer.ExtraSpan) {
	e := s.cfg.Chat.Expand(res, mediaIdentity)
	spans := make([]indexer.ExtraSpan, len(e.Spans))
	for i, sp := range e.Spans {
		spans[i] = indexer.ExtraSpan{Start: sp.Offset, End: sp.Offset + sp.Length, Key: sp.Identifier}
	}
	return e.IDs, spans
}

// mediaIdentity is the simulator's mm hash of an item: its uuid when the request gives one
// (vLLM then uses it as the hash), else a SHA-256 of its bytes, or of its URL when it has none
// (vLLM hashes the item's data; the simulator does not fetch URLs).
func mediaIdentity(it *chat.MediaItem) string {
	switch {
	case it.HasUUID && it.UUID != "":
		return it.UUID
	case it.Data != nil:
		d := sha256.Sum256(it.Data)
		return hex.EncodeToString(d[:])
	}
	d := sha256.Sum256([]byte("url:" + it.URL))
	return hex.EncodeToString(d[:])
}

// chatRequest is the engine's view of a rendered chat request. Without max_tokens (or
// max_completion_tokens) the output may fill the context, as in vLLM, bounded by what the
// simulated cache can hold.
func (s *Server) chatRequest(req *openai.ChatRequest, ids []uint32, out *chatOut) (*parsedRequest, *apiError) {
	if len(ids) == 0 {
		return nil, &apiError{status: http.StatusBadRequest, msg: "the rendered prompt has no tokens", param: "messages"}
	}
	cfg := s.ranks[0].Config()
	p := &parsedRequest{prompts: [][]uint32{ids}, n: req.N, maxTokens: req.MaxOutputTokens(), minTokens: req.MinTokens,
		ignoreEOS: req.IgnoreEOS, stop: req.Stop, stopIDs: req.StopTokenIDs, seed: req.Seed, stream: req.Stream,
		includeUsage: req.IncludeUsage, keepSpecial: out.keepSpecial}
	if p.maxTokens == 0 {
		p.maxTokens = max(1, min(cfg.MaxModelLen, cfg.NumBlocks*cfg.BlockSize)-len(ids))
	}
	if aerr := checkMinTokens(p); aerr != nil {
		return nil, aerr
	}
	if aerr := s.checkPrompts(p, "messages"); aerr != nil {
		return nil, aerr
	}
	return p, nil
}

// chatOut turns one chat request's decoded output into vLLM's chat shapes (parse.Output, with
// reasoning in the reasoning field, as current vLLM writes it).
type chatOut struct {
	*parse.Output
	role        string
	keepSpecial bool
	begun       bool // streaming: the role chunks went out
}

func newChatOut(req *openai.ChatRequest, prompt string, parsers *parse.Parsers) *chatOut {
	var info parse.RequestInfo
	if parsers != nil {
		info = parse.InfoFor(req, prompt)
	}
	o := &chatOut{Output: parse.NewOutput(parsers, info, parse.ReasoningFields{Reasoning: true}), role: parse.ResponseRole(req)}
	o.keepSpecial = parsers != nil && !parsers.SkipSpecialTokens(info)
	return o
}

// chatUsage is the usage object of a chat response (cached_tokens as the engine reports it).
func chatUsage(p *parsedRequest, choices []*choice) *openai.Usage {
	u := usageOf(p, choices)
	return &openai.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
		PromptTokensDetails: &openai.TokenDetails{CachedTokens: u.PromptTokensDetails.CachedTokens}}
}

func (s *Server) waitChat(ctx context.Context, w http.ResponseWriter, g *generation, p *parsedRequest, out *chatOut) error {
	if err := s.wait(ctx, w, p, g); err != nil {
		return err
	}
	resp := openai.ChatCompletion{ID: g.id, Object: openai.ObjectChatCompletion, Created: time.Now().Unix(), Model: s.cfg.Model,
		Choices: make([]openai.ChatChoice, len(g.choices)), Usage: chatUsage(p, g.choices)}
	for i, c := range g.choices {
		resp.Choices[i] = out.Choice(c.index, out.role, string(c.text), c.finish)
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(struct {
		openai.ChatCompletion
		KV json.RawMessage `json:"kv_transfer_params,omitempty"` // a NIXL prefill's handoff
	}{resp, s.handoff(p.job, g)})
}

// streamChat writes chat.completion.chunk events: once the engine produced its first output,
// a chunk per choice with the role and empty content; then each choice's parsed deltas (text
// that might start a stop string held back); a choice's last chunk with what its parser held
// back and the finish reason; the usage chunk when asked for; [DONE].
func (s *Server) streamChat(ctx context.Context, w http.ResponseWriter, g *generation, p *parsedRequest, out *chatOut) error {
	rc := http.NewResponseController(w)
	openai.SetSSEHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	hold := stopHold(p.stop)
	chunk := func(b []byte, i int, d openai.ChatDelta, finish *string) []byte {
		data, _ := json.Marshal(openai.ChatChunk{ID: g.id, Object: openai.ObjectChatCompletionChunk, Created: created, Model: s.cfg.Model,
			Choices: []openai.ChatChunkChoice{{Index: i, Delta: d, FinishReason: finish}}})
		return openai.AppendEvent(b, data)
	}
	emit := func(b []byte, c *choice, text []byte) []byte {
		if d := out.Delta(c.index, text, false); d != nil {
			b = chunk(b, c.index, *d, nil)
		}
		if c.finish != "" {
			last := out.Delta(c.index, nil, true)
			if last == nil {
				last = &openai.ChatDelta{}
			}
			reason := out.FinishReason(c.index, c.finish)
			b = chunk(b, c.index, *last, &reason)
		}
		return b
	}
	var buf []uint32
	var b []byte
	for {
		var done bool
		buf, done = s.poll(p, g.eng, g.choices, buf)
		b = b[:0]
		if !out.begun && anyOutput(g.choices) {
			out.begun = true
			empty := ""
			for _, c := range g.choices {
				b = chunk(b, c.index, openai.ChatDelta{Role: out.role, Content: &empty}, nil)
			}
		}
		var err error
		if b, err = streamChoices(b, g.choices, hold, emit); err != nil {
			_, _ = sendStep(ctx, w, rc, b, true, nil) // the error event; the stream ends with err whatever the write gives
			return err
		}
		if done && p.includeUsage {
			data, _ := json.Marshal(openai.ChatChunk{ID: g.id, Object: openai.ObjectChatCompletionChunk, Created: created, Model: s.cfg.Model,
				Choices: []openai.ChatChunkChoice{}, Usage: chatUsage(p, g.choices)})
			b = openai.AppendEvent(b, data)
		}
		if done {
			b = openai.AppendDone(b)
		}
		if end, err := sendStep(ctx, w, rc, b, done, g.ready); end {
			return err
		}
	}
}

// anyOutput reports whether some choice produced a token or ended.
func anyOutput(choices []*choice) bool {
	for _, c := range choices {
		if len(c.ids) > 0 || c.finish != "" {
			return true
		}
	}
	return false
}
