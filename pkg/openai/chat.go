package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Bounds of chat requests that apply when Limits leaves them zero. They are far above real
// conversations (agents send hundreds of messages, JSON schemas nest a dozen levels) and keep
// the work a body can cause bounded: the renderer walks every message and every schema, and
// templates recurse over nested values, so nesting depth is also a recursion depth.
const (
	// DefaultMaxMessages is the largest number of messages in one chat request.
	DefaultMaxMessages = 8192
	// DefaultMaxJSONDepth is the deepest nesting of arrays and objects in a chat body.
	DefaultMaxJSONDepth = 64
)

// Tool choice modes of ChatRequest.ToolChoice.
const (
	ToolChoiceNone     = "none"
	ToolChoiceAuto     = "auto"
	ToolChoiceRequired = "required"
	ToolChoiceFunction = "function" // a named function: ToolChoice.Name
)

// ChatRequest is a validated POST /v1/chat/completions body. JSON values that reach chat
// templates (tool schemas, tool-call arguments, template kwargs, documents) are kept as raw
// JSON so that their key order and number spelling survive until pkg/chat decodes them with
// Python's rules. The request refers into the body it was parsed from.
type ChatRequest struct {
	Model    string
	Messages []ChatMessage
	// Tools is nil when the body has no tools (or null); never empty (rejected).
	Tools []ChatTool
	// ToolChoice is the effective choice: "auto" when tools are given and tool_choice is not,
	// else "none" when absent or null.
	ToolChoice        ToolChoice
	ParallelToolCalls *bool
	ResponseFormat    json.RawMessage // nil when absent or null
	// MaxCompletionTokens is max_completion_tokens (0: not given); Sampling.MaxTokens is the
	// deprecated max_tokens. vLLM prefers the former when both are set.
	MaxCompletionTokens int
	Logprobs            bool
	TopLogprobs         int
	MinTokens           int
	Sampling

	// vLLM extensions that shape the prompt.
	ChatTemplateKwargs   json.RawMessage // a JSON object, nil when absent or null
	AddGenerationPrompt  bool            // default true
	ContinueFinalMessage bool
	ChatTemplate         string // request chat_template; HasChatTemplate tells "" from absent
	HasChatTemplate      bool
	Documents            json.RawMessage // a JSON array of objects, nil when absent or null
	ReasoningEffort      string          // "" when absent or null
	AddSpecialTokens     bool

	raw     map[string]json.RawMessage
	bodyLen int
}

// BodyLen returns the size of the client's body, to size buffers for the upstream one.
func (r *ChatRequest) BodyLen() int { return r.bodyLen }

// MaxOutputTokens is the output budget the client asked for: max_completion_tokens, else
// max_tokens, else 0 (not given).
func (r *ChatRequest) MaxOutputTokens() int {
	if r.MaxCompletionTokens > 0 {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// AppendUpstream appends the client's body re-encoded for an http:// worker: every field as
// sent, with model set to the worker's name. Keys are written in sorted order; values are
// the client's bytes.
func (r *ChatRequest) AppendUpstream(dst []byte, model string, edits Edits) []byte {
	return appendFields(dst, r.raw, model, edits, func(dst []byte, _ string) ([]byte, bool) { return dst, false })
}

// Has reports whether the client's body has the top-level field key.
func (r *ChatRequest) Has(key string) bool { _, ok := r.raw[key]; return ok }

// HasProcessorKwargs reports whether the body sets vLLM's mm_processor_kwargs to an object with
// at least one member. vLLM then hashes each media item together with them, a client's uuid
// included (BaseMultiModalProcessor._hash_mm_items), so the uuid is no longer the engine's mm
// hash, and the kwargs may change the item's placeholder count.
func (r *ChatRequest) HasProcessorKwargs() bool {
	v, ok := r.raw["mm_processor_kwargs"]
	if !ok {
		return false
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(v, &m) == nil && len(m) > 0
}

// reasoningEfforts are vLLM's accepted reasoning_effort values.
var reasoningEfforts = map[string]bool{"none": true, "minimal": true, "low": true, "medium": true, "high": true, "xhigh": true, "max": true}

// ParseChat decodes and validates a chat completion body. The request refers into body,
// which must stay unchanged while the request is in use. Failures are 400 *Errors (with
// vLLM's wording for the rules vLLM enforces), or 413 for a body beyond the message-count
// bound.
func ParseChat(body []byte, lim Limits) (*ChatRequest, *Error) {
	maxDepth := lim.MaxJSONDepth
	if maxDepth <= 0 {
		maxDepth = DefaultMaxJSONDepth
	}
	if d := jsonDepth(body); d > maxDepth {
		return nil, BadRequest("", fmt.Sprintf("request body nests %d levels deep, more than the %d allowed", d, maxDepth))
	}
	raw, err := scanBody(body)
	if err != nil {
		return nil, err
	}
	req := &ChatRequest{raw: raw, bodyLen: len(body), AddGenerationPrompt: true}
	if req.Model, err = parseModel(raw); err != nil {
		return nil, err
	}
	mv, ok := raw["messages"]
	if !ok || isNull(mv) {
		return nil, BadRequest("messages", "messages is required")
	}
	if req.Messages, err = parseMessages(mv, lim); err != nil {
		return nil, err
	}
	// vLLM: "Stream options can only be defined when `stream=True`", checked on truthiness.
	if so, ok := raw["stream_options"]; ok && !isNull(so) && !isEmptyObject(so) && !isTrue(raw["stream"]) {
		return nil, BadRequest("stream_options", "Stream options can only be defined when `stream=True`.")
	}
	if err := req.Sampling.parseExcept(raw, lim, "stream_options"); err != nil {
		return nil, err
	}
	if v, ok := raw["stream_options"]; ok && !isNull(v) && req.Stream {
		if err := req.Sampling.parseStreamOptions(v, lim); err != nil {
			return nil, err
		}
	}
	for _, f := range chatFields {
		if v, ok := raw[f.name]; ok && !isNull(v) {
			if err := f.parse(req, v); err != nil {
				return nil, err
			}
		}
	}
	if err := req.checkTools(raw); err != nil {
		return nil, err
	}
	if req.ContinueFinalMessage && req.AddGenerationPrompt {
		return nil, BadRequest("", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	if (req.TopLogprobs > 0 || req.TopLogprobs == -1) && !req.Logprobs {
		return nil, BadRequest("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.")
	}
	return req, nil
}

// chatFields are the chat-only top-level fields, parsed in this order when present and
// not null.
var chatFields = []struct {
	name  string
	parse func(r *ChatRequest, v []byte) *Error
}{
	{"max_completion_tokens", func(r *ChatRequest, v []byte) *Error {
		var s Sampling
		if err := s.parseMaxTokens(v, Limits{}); err != nil {
			err.Param = "max_completion_tokens"
			err.Message = "max_completion_tokens" + err.Message[len("max_tokens"):]
			return err
		}
		r.MaxCompletionTokens = s.MaxTokens
		return nil
	}},
	{"logprobs", boolField("logprobs", func(r *ChatRequest, b bool) { r.Logprobs = b })},
	{"top_logprobs", func(r *ChatRequest, v []byte) *Error {
		n, err := parseInt(v)
		if err != nil || n < -1 || n > 1<<20 {
			return BadRequest("top_logprobs", "`top_logprobs` must be an integer.")
		}
		if n < 0 && n != -1 {
			return BadRequest("top_logprobs", "`top_logprobs` must be a positive value or -1.")
		}
		r.TopLogprobs = int(n)
		return nil
	}},
	{"min_tokens", func(r *ChatRequest, v []byte) *Error {
		n, err := parseInt(v)
		if err != nil || n < 0 || n > MaxTokensLimit {
			return BadRequest("min_tokens", "min_tokens must be a non-negative integer")
		}
		r.MinTokens = int(n)
		return nil
	}},
	{"parallel_tool_calls", boolField("parallel_tool_calls", func(r *ChatRequest, b bool) { r.ParallelToolCalls = &b })},
	{"response_format", func(r *ChatRequest, v []byte) *Error {
		if firstByte(v) != '{' {
			return BadRequest("response_format", "response_format must be an object")
		}
		r.ResponseFormat = v
		return nil
	}},
	{"chat_template_kwargs", func(r *ChatRequest, v []byte) *Error {
		if firstByte(v) != '{' {
			return BadRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
		}
		r.ChatTemplateKwargs = v
		return nil
	}},
	{"add_generation_prompt", boolField("add_generation_prompt", func(r *ChatRequest, b bool) { r.AddGenerationPrompt = b })},
	{"continue_final_message", boolField("continue_final_message", func(r *ChatRequest, b bool) { r.ContinueFinalMessage = b })},
	{"add_special_tokens", boolField("add_special_tokens", func(r *ChatRequest, b bool) { r.AddSpecialTokens = b })},
	{"chat_template", func(r *ChatRequest, v []byte) *Error {
		s, ok := jsonString(v)
		if !ok {
			return BadRequest("chat_template", "chat_template must be a string")
		}
		r.ChatTemplate, r.HasChatTemplate = s, true
		return nil
	}},
	{"documents", func(r *ChatRequest, v []byte) *Error {
		bad := BadRequest("documents", "documents must be a list of objects with string values")
		if firstByte(v) != '[' {
			return bad
		}
		if err := eachElem(v, func(d []byte) bool {
			if firstByte(d) != '{' {
				return false
			}
			ok := true
			eachMember(d, func(_ string, val []byte) { ok = ok && firstByte(val) == '"' })
			return ok
		}); err != nil {
			return bad
		}
		r.Documents = v
		return nil
	}},
	{"reasoning_effort", func(r *ChatRequest, v []byte) *Error {
		s, ok := jsonString(v)
		if !ok || !reasoningEfforts[s] {
			return BadRequest("reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high, xhigh, max")
		}
		r.ReasoningEffort = s
		return nil
	}},
	{"tools", func(r *ChatRequest, v []byte) *Error {
		if firstByte(v) != '[' {
			return BadRequest("tools", "tools must be a list of tools")
		}
		tools, err := parseTools(v)
		if err != nil {
			return err
		}
		r.Tools = tools
		return nil
	}},
}

func boolField(name string, set func(*ChatRequest, bool)) func(*ChatRequest, []byte) *Error {
	return func(r *ChatRequest, v []byte) *Error {
		switch string(bytes.TrimSpace(v)) {
		case "true":
			set(r, true)
		case "false":
			set(r, false)
		default:
			return BadRequest(name, name+" must be a boolean")
		}
		return nil
	}
}
