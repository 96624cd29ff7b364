package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Bounds of a Messages body beyond those openai.ParseChat applies to the converted request.
const (
	// MaxStopSequences is the largest number of stop_sequences (vLLM bounds stop the same way
	// only by the body's size; thousands of stop strings make every generated token slow).
	MaxStopSequences = 1024
)

// Request is a validated Messages (or count_tokens) body and the chat request it converts to.
type Request struct {
	Model string
	// MaxTokens is max_tokens (always ≥ 1 for Messages; 0 for count_tokens).
	MaxTokens int
	Stream    bool
	// StopSequences are the client's stop_sequences: a chat stop that matched one is the
	// message's stop_sequence.
	StopSequences []string
	chat, folded  []byte
	// counting is set for a count_tokens body; disabledThinking when thinking is disabled (the
	// bodies then end in its reasoning_effort, SetDisabledThinkingEffort).
	counting, disabledThinking bool
}

// DisabledThinking reports whether the request disables thinking: its reasoning_effort is the
// one the model's template takes for no thinking, which depends on the template (vLLM probes
// it, serving.py _probe_disabled_thinking_effort); the bodies have "none" until
// SetDisabledThinkingEffort says otherwise.
func (r *Request) DisabledThinking() bool { return r.disabledThinking }

// disabledTail ends the bodies of a request that disables thinking.
const disabledTail = `,"reasoning_effort":"none"}`

// SetDisabledThinkingEffort sets the reasoning_effort a request that disables thinking sends
// (one of vLLM's AnthropicDisabledThinkingEffort values: none, low, medium, high, xhigh, max).
// It does nothing for other requests, or once it has been set.
func (r *Request) SetDisabledThinkingEffort(effort string) {
	if !r.disabledThinking || effort == "none" || !anthropicEfforts[effort] {
		return
	}
	set := func(b []byte) []byte {
		if !bytes.HasSuffix(b, []byte(disabledTail)) {
			return b
		}
		out := append([]byte(nil), b[:len(b)-len(`"none"}`)]...)
		out = openai.AppendString(out, effort)
		return append(out, '}')
	}
	r.chat = set(r.chat)
	if r.folded != nil {
		r.folded = set(r.folded)
	}
}

// ChatBody returns the OpenAI chat completion body the request converts to (model as the
// client named it), with system messages inside messages kept in place (inline.go: vLLM's
// "preserve", for templates that render them as turns of their own). It is valid JSON;
// openai.ParseChat validates the rest of it as the engine would.
func (r *Request) ChatBody() []byte { return r.chat }

// FoldedChatBody returns the chat body with the system messages inside messages folded into
// their neighbours (vLLM's "fold", for templates that reject or drop them, or render them as
// user turns), or nil when the request has none left to fold: ChatBody is then the body for
// every template.
func (r *Request) FoldedChatBody() []byte { return r.folded }

// wireRequest is what Parse decodes of a body. Unknown members are ignored, as vLLM's
// pydantic models ignore them (clients send fields, such as service_tier, that mean nothing
// to an engine).
type wireRequest struct {
	Model         *string         `json:"model"`
	Messages      []wireMessage   `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     *int64          `json:"max_tokens"`
	Metadata      *wireMetadata   `json:"metadata"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        *bool           `json:"stream"`
	Temperature   json.RawMessage `json:"temperature"`
	TopP          json.RawMessage `json:"top_p"`
	TopK          json.RawMessage `json:"top_k"`
	Tools         []wireTool      `json:"tools"`
	ToolChoice    *wireToolChoice `json:"tool_choice"`
	Thinking      *wireThinking   `json:"thinking"`
	OutputConfig  *wireOutput     `json:"output_config"`
	// ChatTemplateKwargs is vLLM's extension, passed on to the chat request as it is
	// (_build_base_request, for messages and count_tokens alike).
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

// wireOutput is output_config; its format (structured output) is not converted.
type wireOutput struct {
	Effort *string `json:"effort"`
}

type wireMetadata struct {
	UserID *string `json:"user_id"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// wireBlock is a content block of any type; the type says which members it uses.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Source    *wireSource     `json:"source"`
	ID        *string         `json:"id"`
	Name      *string         `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID *string         `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
	Thinking  *string         `json:"thinking"`
	Signature *string         `json:"signature"`
	Data      *string         `json:"data"`
	// CacheControl is accepted and ignored: the engine's prefix cache is automatic.
	CacheControl json.RawMessage `json:"cache_control"`
}

type wireSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

type wireTool struct {
	Type        *string         `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type wireToolChoice struct {
	Type                   string  `json:"type"`
	Name                   *string `json:"name"`
	DisableParallelToolUse *bool   `json:"disable_parallel_tool_use"`
}

type wireThinking struct {
	Type         string `json:"type"`
	BudgetTokens *int64 `json:"budget_tokens"`
}

// Parse decodes and validates a POST /v1/messages body (countTokens false) or a
// /v1/messages/count_tokens body (true: max_tokens is not required, stream is ignored) and
// converts it into its chat request. Failures are 400 *openai.Errors naming the offending
// member; WriteError writes them in Anthropic's shape.
func Parse(body []byte, countTokens bool) (*Request, *openai.Error) {
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		return nil, decodeError(err)
	}
	if wr.Model == nil || *wr.Model == "" {
		return nil, openai.BadRequest("model", "model: Field required")
	}
	req := &Request{Model: *wr.Model, counting: countTokens}
	if !countTokens {
		if wr.MaxTokens == nil {
			return nil, openai.BadRequest("max_tokens", "max_tokens: Field required")
		}
		if *wr.MaxTokens < 1 || *wr.MaxTokens > 1<<31-1 {
			return nil, openai.BadRequest("max_tokens", "max_tokens: must be a positive integer")
		}
		req.MaxTokens = int(*wr.MaxTokens)
		req.Stream = wr.Stream != nil && *wr.Stream
	}
	if len(wr.Messages) == 0 {
		return nil, openai.BadRequest("messages", "messages: at least one message is required")
	}
	if len(wr.StopSequences) > MaxStopSequences {
		return nil, openai.BadRequest("stop_sequences", fmt.Sprintf("stop_sequences: at most %d are allowed", MaxStopSequences))
	}
	req.StopSequences = wr.StopSequences
	sys := ""
	if len(wr.System) > 0 && string(wr.System) != "null" {
		var aerr *openai.Error
		if sys, aerr = systemText(wr.System); aerr != nil {
			return nil, aerr
		}
	}
	p, aerr := placeInline(wr.Messages, sys != "")
	if aerr != nil {
		return nil, aerr
	}
	sys = joinTexts(sys, p.leading)
	c := &converter{known: map[string]bool{}}
	if req.chat, aerr = c.appendBody(make([]byte, 0, len(body)+256), &wr, req, sys, p.preserve); aerr != nil {
		return nil, aerr
	}
	if p.fold != nil {
		c = &converter{known: map[string]bool{}}
		if req.folded, aerr = c.appendBody(make([]byte, 0, len(req.chat)+64), &wr, req, sys, p.fold); aerr != nil {
			return nil, aerr
		}
	}
	if bytes.Equal(req.folded, req.chat) {
		req.folded = nil // e.g. the inline system messages are all empty
	}
	return req, nil
}

// decodeError turns a JSON decoding failure into a 400 naming the member when it can.
func decodeError(err error) *openai.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		f := fieldPath(te.Field)
		return openai.BadRequest(f, fmt.Sprintf("%s: expected %s, got a JSON %s", f, jsonKind(te.Type.Kind().String()), te.Value))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return openai.BadRequest("", "the request body is not valid JSON: "+se.Error())
	}
	return openai.BadRequest("", "the request body must be a JSON object: "+err.Error())
}

// fieldPath writes encoding/json's "messages.0.role" as "messages[0].role".
func fieldPath(f string) string {
	var b strings.Builder
	for i, seg := range strings.Split(f, ".") {
		switch {
		case seg != "" && strings.Trim(seg, "0123456789") == "":
			b.WriteString("[" + seg + "]")
		case i > 0:
			b.WriteString("." + seg)
		default:
			b.WriteString(seg)
		}
	}
	return b.String()
}

// jsonKind names a Go kind as the JSON type a member must have.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "int64", "int":
		return "an integer"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "ptr", "struct", "map":
		return "an object"
	}
	return k
}

// converter builds the chat body; known holds the tool_use ids seen so far, which a
// tool_result must answer.
type converter struct {
	known map[string]bool
}

// appendBody appends the chat completion body of wr: sys the system prompt, msgs the
// conversation with its system messages placed (inline.go).
func (c *converter) appendBody(dst []byte, wr *wireRequest, req *Request, sys string, msgs []inlineMsg) ([]byte, *openai.Error) {
	dst = append(dst, `{"model":`...)
	dst = openai.AppendString(dst, req.Model)
	dst = append(dst, `,"messages":[`...)
	first := true
	if sys != "" {
		dst = appendTextMessage(dst, "system", sys)
		first = false
	}
	for i := range msgs {
		var aerr *openai.Error
		if dst, first, aerr = c.appendMessage(dst, &msgs[i].wireMessage, msgs[i].at, first); aerr != nil {
			return nil, aerr
		}
	}
	dst = append(dst, ']')
	if req.MaxTokens > 0 {
		dst = append(dst, `,"max_tokens":`...)
		dst = strconv.AppendInt(dst, int64(req.MaxTokens), 10)
		dst = append(dst, `,"max_completion_tokens":`...)
		dst = strconv.AppendInt(dst, int64(req.MaxTokens), 10)
	}
	if req.Stream {
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	dst = appendSampling(dst, wr)
	dst, aerr := appendTools(dst, wr)
	if aerr != nil {
		return nil, aerr
	}
	if k := wr.ChatTemplateKwargs; len(k) > 0 && string(k) != "null" {
		if k[0] != '{' {
			return nil, openai.BadRequest("chat_template_kwargs", "chat_template_kwargs: expected an object")
		}
		dst = append(dst, `,"chat_template_kwargs":`...)
		dst = append(dst, k...)
	}
	if dst, aerr = appendThinking(dst, wr, req); aerr != nil {
		return nil, aerr
	}
	return append(dst, '}'), nil
}

// appendSampling appends the sampling members, their values as the client spelled them
// (ParseChat validates them as the engine does), stop_sequences as stop and
// metadata.user_id as user.
func appendSampling(dst []byte, wr *wireRequest) []byte {
	for _, m := range []struct {
		name string
		v    json.RawMessage
	}{{"temperature", wr.Temperature}, {"top_p", wr.TopP}, {"top_k", wr.TopK}} {
		if len(m.v) > 0 && string(m.v) != "null" {
			dst = append(dst, `,"`...)
			dst = append(dst, m.name...)
			dst = append(dst, `":`...)
			dst = append(dst, m.v...)
		}
	}
	if len(wr.StopSequences) > 0 {
		dst = append(dst, `,"stop":[`...)
		for i, s := range wr.StopSequences {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = openai.AppendString(dst, s)
		}
		dst = append(dst, ']')
	}
	if wr.Metadata != nil && wr.Metadata.UserID != nil {
		dst = append(dst, `,"user":`...)
		dst = openai.AppendString(dst, *wr.Metadata.UserID)
	}
	return dst
}

// systemText is the system prompt: a string, or the text of its text blocks joined (as vLLM
// joins them, without a separator).
func systemText(v json.RawMessage) (string, *openai.Error) {
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", openai.BadRequest("system", "system: expected a string or an array of text blocks")
		}
		return s, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(v, &blocks); err != nil {
		return "", openai.BadRequest("system", "system: expected a string or an array of text blocks")
	}
	var b bytes.Buffer
	for i := range blocks {
		if blocks[i].Type != "text" || blocks[i].Text == nil {
			return "", openai.BadRequest(fmt.Sprintf("system[%d]", i), fmt.Sprintf("system[%d]: expected a text block with text", i))
		}
		if !isBillingHeader(*blocks[i].Text) {
			b.WriteString(*blocks[i].Text)
		}
	}
	return b.String(), nil
}

// billingHeader starts the text block Claude Code adds to its system prompt on every request,
// an attribution hash that differs per request. At the head of the prompt it would defeat
// every prefix-cache hit, so it is dropped, as vLLM's Anthropic serving drops it
// (inline_system.py), from the system prompt's blocks and from inline system messages.
const billingHeader = "x-anthropic-billing-header"

func isBillingHeader(s string) bool { return strings.HasPrefix(s, billingHeader) }
