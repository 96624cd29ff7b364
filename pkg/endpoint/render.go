package endpoint

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/pkg/anthropic"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// POST /v1/chat/completions/render, /v1/completions/render and /v1/messages/render, answered
// by the gateway from the model's renderer and tokenizer as vLLM's render server answers them
// (ServingRender), no worker called: the token ids are the ones the gateway routes on (the
// ids `gateway render` prints and /tokenize answers). The answer is vLLM's GenerateRequest,
// the token-in request its /inference/v1/generate takes: request_id, token_ids,
// sampling_params (sampling.go) and the request's model, stream, stream_options, cache_salt
// and priority; one object for chat and Messages (converted to chat as /v1/messages
// converts it), a list with one per prompt for completions. What the gateway cannot compute
// as the engine would is refused with a 501 rather than answered wrongly: media parts (vLLM
// answers their multimodal hashes and placeholders), structured outputs and
// truncate_prompt_tokens. assistant_tokens_mask and token_offsets are null, as vLLM answers
// when it cannot compute them. Errors are OpenAI-shaped, as vLLM's render routes answer.

// ChatRender serves POST /v1/chat/completions/render.
func (a *API) ChatRender(w http.ResponseWriter, r *http.Request) {
	a.serveRender(w, r, func(body []byte) ([]byte, *openai.Error) { return a.renderChat(body, body, nil) })
}

// MessagesRender serves POST /v1/messages/render: the Messages body is converted into its chat
// request (anthropic.Parse), placed for its model as /v1/messages places it (placeMessages:
// inline system messages, disabled thinking's effort) and rendered as ChatRender renders it.
func (a *API) MessagesRender(w http.ResponseWriter, r *http.Request) {
	a.serveRender(w, r, func(body []byte) ([]byte, *openai.Error) {
		ar, aerr := anthropic.Parse(body, false)
		if aerr != nil {
			return nil, aerr
		}
		return a.renderChat(ar.ChatBody(), ar.ChatBody(), func(c *pipeline.Call) *openai.Error {
			return placeMessages(c, ar, openai.Limits{MaxN: a.pl.Config().MaxN}, a.pl.Config().Logger)
		})
	})
}

// CompletionsRender serves POST /v1/completions/render.
func (a *API) CompletionsRender(w http.ResponseWriter, r *http.Request) {
	a.serveRender(w, r, a.renderCompletion)
}

// serveRender reads the body, answers it with render and writes the JSON or the error.
func (a *API) serveRender(w http.ResponseWriter, r *http.Request, render func([]byte) ([]byte, *openai.Error)) {
	body, release, aerr := openai.ReadBody(w, r, a.pl.Config().MaxBodyBytes)
	defer release()
	if aerr == nil {
		var out []byte
		if out, aerr = render(body); aerr == nil {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
			return
		}
	}
	openai.WriteError(w, aerr)
}

// renderChat answers a chat render body (for Messages, the converted chat body; place, when
// set, gives the call the request its model gets, as /v1/messages places it, once resolved).
func (a *API) renderChat(body, fields []byte, place func(*pipeline.Call) *openai.Error) ([]byte, *openai.Error) {
	var f renderFields
	if aerr := f.decode(fields); aerr != nil {
		return nil, aerr
	}
	c := &pipeline.Call{Arrival: time.Now()}
	name, aerr := Chat.Parse(body, openai.Limits{MaxN: a.pl.Config().MaxN}, &c.Req)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := f.unsupported(); aerr != nil {
		return nil, aerr
	}
	if !a.pl.Resolve(c, name) {
		return nil, pipeline.RouteError(c.Target.Model, false, false)
	}
	if c.Served.Chat == nil {
		return nil, noTokenizer("the model's chat template", c.Target.Model)
	}
	if place != nil {
		if aerr := place(c); aerr != nil {
			return nil, aerr
		}
	}
	ids, _, aerr := a.pl.RenderChat(c, c.Req.Chat)
	if aerr != nil {
		return nil, aerr
	}
	if c.Req.Media > 0 {
		return nil, notComputed("messages", "a request with media parts (the engine's multimodal hashes and placeholders)")
	}
	if len(ids) == 0 {
		return nil, openai.BadRequest("messages", "No token_ids rendered")
	}
	sp, aerr := f.sampling(chatKind, len(ids), a.pl.Config().MaxPromptTokens, generationOf(c.Served))
	if aerr != nil {
		return nil, aerr
	}
	b := appendGenerateRequest(nil, "chatcmpl-", ids, sp, &f)
	return append(b, '\n'), nil
}

// renderCompletion answers a completions render body: one GenerateRequest per prompt.
func (a *API) renderCompletion(body []byte) ([]byte, *openai.Error) {
	var f renderFields
	if aerr := f.decode(body); aerr != nil {
		return nil, aerr
	}
	c := &pipeline.Call{Arrival: time.Now()}
	name, aerr := Completions.Parse(body, openai.Limits{MaxN: a.pl.Config().MaxN}, &c.Req)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := f.unsupported(); aerr != nil {
		return nil, aerr
	}
	if !a.pl.Resolve(c, name) {
		return nil, pipeline.RouteError(c.Target.Model, false, false)
	}
	req := c.Req.Completion
	for i := range req.Prompts {
		if !req.Prompts[i].IsTokens && c.Served.Tok == nil {
			return nil, noTokenizer("the model's tokenizer", c.Target.Model)
		}
	}
	prompts, aerr := a.pl.PromptTokens(c.Served, req)
	if aerr != nil {
		return nil, aerr
	}
	if f.AddSpecialTokens != nil && !*f.AddSpecialTokens {
		// PromptTokens encodes as the engines do by default (special tokens added); vLLM's
		// render honours add_special_tokens false.
		for i := range req.Prompts {
			if !req.Prompts[i].IsTokens {
				ids, err := c.Served.Tok.Encode(nil, req.Prompts[i].Text, false)
				if err != nil {
					return nil, openai.BadRequest("prompt", "prompt could not be tokenized: "+err.Error())
				}
				prompts[i] = ids
			}
		}
	}
	gen := generationOf(c.Served)
	b := []byte{'['}
	for i, ids := range prompts {
		if len(ids) == 0 {
			return nil, openai.BadRequest("prompt", "No token_ids rendered")
		}
		sp, aerr := f.sampling(completionKind, len(ids), a.pl.Config().MaxPromptTokens, gen)
		if aerr != nil {
			return nil, aerr
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendGenerateRequest(b, "cmpl-", ids, sp, &f)
	}
	return append(b, ']', '\n'), nil
}

// appendGenerateRequest appends vLLM's GenerateRequest (its pydantic dump: every field, in
// declaration order) for one prompt.
func appendGenerateRequest(b []byte, idPrefix string, ids []uint32, sp []byte, f *renderFields) []byte {
	b = append(b, `{"request_id":`...)
	b = appendJSON(b, idPrefix+randomUUID())
	b = append(b, `,"token_ids":`...)
	b = appendJSON(b, ids)
	b = append(b, `,"assistant_tokens_mask":null,"token_offsets":null,"features":null,"content_parts":null,"sampling_params":`...)
	b = append(b, sp...)
	b = append(b, `,"model":`...)
	b = appendJSON(b, f.Model)
	b = append(b, `,"stream":`...)
	b = appendJSON(b, f.Stream != nil && *f.Stream)
	b = append(b, `,"stream_options":`...)
	if f.Stream != nil && *f.Stream && f.StreamOptions != nil {
		o := *f.StreamOptions
		if o.IncludeUsage == nil {
			o.IncludeUsage = ptr(true)
		}
		if o.ContinuousUsageStats == nil {
			o.ContinuousUsageStats = ptr(false)
		}
		b = appendJSON(b, o)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"cache_salt":`...)
	b = appendJSON(b, f.CacheSalt)
	b = append(b, `,"priority":`...)
	var prio int64
	if f.Priority != nil {
		prio = *f.Priority
	}
	b = appendJSON(b, prio)
	return append(b, `,"kv_transfer_params":null,"ec_transfer_params":null}`...)
}

// appendJSON appends the JSON encoding of v, which is always encodable here (strings,
// numbers, ids, plain structs), without HTML escaping, as Python's json writes it.
func appendJSON(b []byte, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// randomUUID returns a random UUID4 in Python's uuid4().hex form (vLLM's random_uuid).
func randomUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return hex.EncodeToString(u[:])
}

// notComputed is the 501 for a render the gateway cannot compute as the engine would.
func notComputed(param, what string) *openai.Error {
	return &openai.Error{Status: http.StatusNotImplemented, Type: openai.TypeServer, Param: param, Code: "not_implemented",
		Message: "the gateway's render cannot compute " + what + " as the engine would; ask the engine's own render route"}
}

func ptr[T any](v T) *T { return &v }
