package endpoint

import (
	"encoding/json"
	"net/http"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// POST /tokenize and /detokenize, answered by the gateway from the model's tokenizer and
// renderer as vLLM answers them (serving_tokenization), no worker called: the token ids are
// the ones the gateway routes on. /tokenize takes vLLM's two forms: a prompt (with
// add_special_tokens, default true), or chat messages with the chat options (add_generation_prompt,
// continue_final_message, chat_template, chat_template_kwargs, tools, add_special_tokens
// default false), rendered exactly as the chat endpoint renders them. The answer is
// {"count","max_model_len","tokens","token_strs"}: token_strs (the vocabulary's strings) when
// return_token_strs is true, else null; max_model_len is --max-prompt-tokens, null when unset
// (the gateway does not know the engines' context length). /detokenize takes {"tokens"} and
// answers {"prompt"}, special tokens kept, as vLLM decodes.

// tokenStrings is what /tokenize needs of a tokenizer for return_token_strs.
type tokenStrings interface {
	Token(id uint32) (string, bool)
}

// tokenizeRequest is what /tokenize reads of its body besides the chat members.
type tokenizeRequest struct {
	Model            string          `json:"model"`
	Prompt           *string         `json:"prompt"`
	Messages         json.RawMessage `json:"messages"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
	ReturnTokenStrs  bool            `json:"return_token_strs"`
}

// Tokenize serves POST /tokenize.
func (a *API) Tokenize(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := openai.ReadBody(w, r, a.pl.Config().MaxBodyBytes)
	defer release()
	if aerr == nil {
		var out []byte
		if out, aerr = a.tokenize(body); aerr == nil {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
			return
		}
	}
	openai.WriteError(w, aerr)
}

// tokenize answers a /tokenize body.
func (a *API) tokenize(body []byte) ([]byte, *openai.Error) {
	var req tokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, openai.BadRequest("", "invalid JSON body: "+err.Error())
	}
	c := &pipeline.Call{}
	if !a.pl.Resolve(c, req.Model) {
		return nil, pipeline.RouteError(c.Target.Model, false, false)
	}
	var ids []uint32
	switch {
	case req.Messages != nil && req.Prompt != nil:
		return nil, openai.BadRequest("", "give either prompt or messages, not both")
	case req.Messages != nil:
		cr, aerr := openai.ParseChat(body, openai.Limits{MaxN: a.pl.Config().MaxN})
		if aerr != nil {
			return nil, aerr
		}
		if c.Served.Chat == nil {
			return nil, noTokenizer("the model's chat template", c.Target.Model)
		}
		if ids, _, aerr = a.pl.RenderChat(c, cr); aerr != nil {
			return nil, aerr
		}
	case req.Prompt != nil:
		if c.Served.Tok == nil {
			return nil, noTokenizer("the model's tokenizer", c.Target.Model)
		}
		var err error
		if ids, err = c.Served.Tok.Encode(nil, *req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens); err != nil {
			return nil, openai.BadRequest("prompt", "prompt could not be tokenized: "+err.Error())
		}
	default:
		return nil, openai.BadRequest("prompt", "prompt or messages is required")
	}
	resp := map[string]any{"count": len(ids), "max_model_len": nil, "tokens": ids, "token_strs": nil}
	if ids == nil {
		resp["tokens"] = []uint32{}
	}
	if a.pl.Config().MaxPromptTokens > 0 {
		resp["max_model_len"] = a.pl.Config().MaxPromptTokens
	}
	if req.ReturnTokenStrs {
		ts, ok := c.Served.Tok.(tokenStrings)
		if !ok {
			return nil, noTokenizer("the vocabulary of the model's tokenizer", c.Target.Model)
		}
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i], _ = ts.Token(id)
		}
		resp["token_strs"] = strs
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return nil, &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Message: "encode response"}
	}
	return append(b, '\n'), nil
}

// noTokenizer is the 501 for a request the gateway cannot answer without what.
func noTokenizer(what, model string) *openai.Error {
	return &openai.Error{Status: http.StatusNotImplemented, Type: openai.TypeServer, Code: "no_tokenizer",
		Message: "this needs " + what + "; the gateway has none for " + model + " (--model-path or --tokenizer)"}
}

// Detokenize serves POST /detokenize.
func (a *API) Detokenize(w http.ResponseWriter, r *http.Request) {
	body, release, aerr := openai.ReadBody(w, r, a.pl.Config().MaxBodyBytes)
	defer release()
	if aerr == nil {
		var out []byte
		if out, aerr = a.detokenize(body); aerr == nil {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
			return
		}
	}
	openai.WriteError(w, aerr)
}

// detokenize answers a /detokenize body.
func (a *API) detokenize(body []byte) ([]byte, *openai.Error) {
	var req struct {
		Model  string   `json:"model"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, openai.BadRequest("tokens", "tokens must be an array of token ids: "+err.Error())
	}
	c := &pipeline.Call{}
	if !a.pl.Resolve(c, req.Model) {
		return nil, pipeline.RouteError(c.Target.Model, false, false)
	}
	tok := c.Served.Tok
	if tok == nil {
		return nil, noTokenizer("the model's tokenizer", c.Target.Model)
	}
	d := tok.NewDecoder(false)
	text := make([]byte, 0, 4*len(req.Tokens))
	for _, id := range req.Tokens {
		if int(id) >= tok.VocabSize() {
			return nil, openai.BadRequest("tokens", "token id out of the vocabulary")
		}
		text = append(text, d.Add(id)...)
	}
	text = append(text, d.Flush()...)
	b, _ := json.Marshal(map[string]string{"prompt": string(text)})
	return append(b, '\n'), nil
}
