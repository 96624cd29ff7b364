package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
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

// ToolChoice is the tool_choice of a chat request: Mode is one of the ToolChoice* constants,
// Name the function of a named choice.
type ToolChoice struct {
	Mode string
	Name string
}

// ChatMessage is one request message as sent. Absent and null fields are their zero values,
// with Has* telling them apart where the renderer must.
type ChatMessage struct {
	// Role is any string: system, developer, user, assistant, tool or a custom role.
	Role    string
	Content Content
	Name    string
	HasName bool
	// ToolCalls are an assistant's calls; HasToolCalls is false when tool_calls is absent or
	// null (an empty list has HasToolCalls true and no calls).
	ToolCalls     []ToolCall
	HasToolCalls  bool
	ToolCallID    string
	HasToolCallID bool
	// Reasoning is reasoning, else reasoning_content (vLLM renames the latter before
	// validation); HasReasoning is false when both are absent or null.
	Reasoning    string
	HasReasoning bool
	// Tools is a developer message's tools as raw JSON (nil when absent).
	Tools json.RawMessage
}

// ContentKind says which form a message's content took.
type ContentKind uint8

// Content kinds.
const (
	ContentNull   ContentKind = iota // null or absent
	ContentString                    // Content.Text
	ContentParts                     // Content.Parts
)

// Content is a message's content: null, a string or a list of parts.
type Content struct {
	Kind  ContentKind
	Text  string
	Parts []ContentPart
}

// ContentPart is one element of a content list. A bare string element has Type "" and
// IsString set. For the text-carrying types (text, input_text, output_text, refusal,
// thinking) Text holds the value of the type's key and TextNull says it was null or absent.
// Other types (media) keep their raw object in Raw for the renderer to reject or handle.
type ContentPart struct {
	Type     string
	Text     string
	TextNull bool
	IsString bool
	Raw      json.RawMessage
}

// ToolCall is one assistant tool call. Arguments is the raw JSON value of
// function.arguments (normally a JSON string holding JSON text), nil when absent.
type ToolCall struct {
	ID        string
	HasID     bool
	Type      string // default "function"
	Name      string
	HasName   bool
	Arguments json.RawMessage
}

// ChatTool is one entry of tools: a function with its optional description and parameters
// (raw JSON objects keep the client's key order) and any extra members of the function
// object in request order (for example strict).
type ChatTool struct {
	Type           string // always "function"
	Name           string
	Description    string
	HasDescription bool
	Parameters     json.RawMessage // nil when absent or null
	Extra          []RawMember
}

// RawMember is one member of a JSON object kept raw.
type RawMember struct {
	Key   string
	Value json.RawMessage
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
func (r *ChatRequest) AppendUpstream(dst []byte, model string) []byte {
	return appendFields(dst, r.raw, model, func(dst []byte, _ string) ([]byte, bool) { return dst, false })
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

// checkTools applies vLLM's check_tool_usage: no empty tools list, the tool_choice default,
// and a tool_choice that names a given tool.
func (r *ChatRequest) checkTools(raw map[string]json.RawMessage) *Error {
	if tv, ok := raw["tools"]; ok && !isNull(tv) && len(r.Tools) == 0 {
		return BadRequest("tools", "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.")
	}
	cv, given := raw["tool_choice"]
	if !given {
		r.ToolChoice.Mode = ToolChoiceNone
		if len(r.Tools) > 0 {
			r.ToolChoice.Mode = ToolChoiceAuto
		}
		return nil
	}
	if isNull(cv) {
		r.ToolChoice.Mode = ToolChoiceNone
		return nil
	}
	if s, ok := jsonString(cv); ok {
		if s == ToolChoiceNone {
			r.ToolChoice.Mode = s
			return nil
		}
		if r.Tools == nil {
			return BadRequest("tool_choice", "When using `tool_choice`, `tools` must be set.")
		}
		if s != ToolChoiceAuto && s != ToolChoiceRequired {
			return BadRequest("tool_choice", fmt.Sprintf(`Invalid value for `+"`tool_choice`"+`: %s! Only named tools, "none", "auto" or "required" are supported.`, s))
		}
		r.ToolChoice.Mode = s
		return nil
	}
	if r.Tools == nil {
		return BadRequest("tool_choice", "When using `tool_choice`, `tools` must be set.")
	}
	const usage = "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`"
	if firstByte(cv) != '{' {
		return BadRequest("tool_choice", fmt.Sprintf(`Invalid value for `+"`tool_choice`"+`: %s! Only named tools, "none", "auto" or "required" are supported.`, bytes.TrimSpace(cv)))
	}
	var fn json.RawMessage
	eachMember(cv, func(k string, v []byte) {
		if k == "function" {
			fn = v
		}
	})
	if firstByte(fn) != '{' {
		return BadRequest("tool_choice.function", fmt.Sprintf("Invalid value for `function`: `%s` in `tool_choice`! %s", bytes.TrimSpace(fn), usage))
	}
	var name json.RawMessage
	eachMember(fn, func(k string, v []byte) {
		if k == "name" {
			name = v
		}
	})
	if name == nil {
		return BadRequest("tool_choice.function.name", "Expected field `name` in `function` in `tool_choice`! "+usage)
	}
	n, ok := jsonString(name)
	if !ok || n == "" {
		return BadRequest("tool_choice.function.name", fmt.Sprintf("Invalid `name` in `function`: `%s` in `tool_choice`! %s", bytes.TrimSpace(name), usage))
	}
	for _, t := range r.Tools {
		if t.Name == n {
			r.ToolChoice = ToolChoice{Mode: ToolChoiceFunction, Name: n}
			return nil
		}
	}
	return BadRequest("tool_choice", "The tool specified in `tool_choice` does not match any of the specified `tools`")
}

func parseTools(v []byte) ([]ChatTool, *Error) {
	var tools []ChatTool
	var perr *Error
	err := eachElem(v, func(tv []byte) bool {
		i := len(tools)
		param := fmt.Sprintf("tools[%d]", i)
		if firstByte(tv) != '{' {
			perr = BadRequest(param, param+" must be an object")
			return false
		}
		t := ChatTool{Type: "function"}
		var fn []byte
		eachMember(tv, func(k string, val []byte) {
			switch k {
			case "type":
				if s, ok := jsonString(val); !ok || s != "function" {
					perr = BadRequest(param+".type", param+`.type must be "function"`)
				}
			case "function":
				fn = val
			}
		})
		if perr != nil {
			return false
		}
		if firstByte(fn) != '{' {
			perr = BadRequest(param+".function", param+".function must be an object")
			return false
		}
		hasName := false
		eachMember(fn, func(k string, val []byte) {
			if perr != nil {
				return
			}
			switch k {
			case "name":
				s, ok := jsonString(val)
				if !ok {
					perr = BadRequest(param+".function.name", param+".function.name must be a string")
					return
				}
				t.Name, hasName = s, true
			case "description":
				if isNull(val) {
					t.Description, t.HasDescription = "", false
					return
				}
				s, ok := jsonString(val)
				if !ok {
					perr = BadRequest(param+".function.description", param+".function.description must be a string")
					return
				}
				t.Description, t.HasDescription = s, true
			case "parameters":
				if isNull(val) {
					t.Parameters = nil
					return
				}
				if firstByte(val) != '{' {
					perr = BadRequest(param+".function.parameters", param+".function.parameters must be an object")
					return
				}
				t.Parameters = val
			default:
				t.Extra = setMember(t.Extra, k, val)
			}
		})
		if perr != nil {
			return false
		}
		if !hasName {
			perr = BadRequest(param+".function.name", param+".function.name is required")
			return false
		}
		tools = append(tools, t)
		return true
	})
	if perr != nil {
		return nil, perr
	}
	if err != nil {
		return nil, BadRequest("tools", "tools must be a list of tools")
	}
	if tools == nil {
		tools = []ChatTool{}
	}
	return tools, nil
}

// setMember sets key in an ordered member list as a Python dict does: a repeated key keeps
// its first position and takes the last value.
func setMember(ms []RawMember, k string, v json.RawMessage) []RawMember {
	for i := range ms {
		if ms[i].Key == k {
			ms[i].Value = v
			return ms
		}
	}
	return append(ms, RawMember{k, v})
}

func parseMessages(v []byte, lim Limits) ([]ChatMessage, *Error) {
	if firstByte(v) != '[' {
		return nil, BadRequest("messages", "messages must be a list of messages")
	}
	maxMsgs := lim.MaxMessages
	if maxMsgs <= 0 {
		maxMsgs = DefaultMaxMessages
	}
	msgs := make([]ChatMessage, 0, countElems(v))
	if cap(msgs) > maxMsgs {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("a chat request may carry at most %d messages, got %d", maxMsgs, cap(msgs)), Type: TypeInvalidRequest, Param: "messages", Code: "request_too_large"}
	}
	var perr *Error
	_ = eachElem(v, func(mv []byte) bool {
		m, err := parseMessage(mv, len(msgs))
		if err != nil {
			perr = err
			return false
		}
		msgs = append(msgs, m)
		return true
	})
	if perr != nil {
		return nil, perr
	}
	return msgs, nil
}

func parseMessage(v []byte, i int) (ChatMessage, *Error) {
	param := fmt.Sprintf("messages[%d]", i)
	var m ChatMessage
	if firstByte(v) != '{' {
		return m, BadRequest(param, param+" must be an object")
	}
	var perr *Error
	hasRole := false
	var reasoningContent []byte
	fail := func(field, what string) {
		if perr == nil {
			perr = BadRequest(param+"."+field, param+"."+field+" must be "+what)
		}
	}
	eachMember(v, func(k string, val []byte) {
		if perr != nil {
			return
		}
		switch k {
		case "role":
			s, ok := jsonString(val)
			if !ok {
				fail("role", "a string")
				return
			}
			m.Role, hasRole = s, true
		case "content":
			c, err := parseContent(val, param)
			if err != nil {
				perr = err
				return
			}
			m.Content = c
		case "name":
			if isNull(val) {
				return
			}
			s, ok := jsonString(val)
			if !ok {
				fail("name", "a string")
				return
			}
			m.Name, m.HasName = s, true
		case "tool_calls":
			if isNull(val) {
				m.ToolCalls, m.HasToolCalls = nil, false
				return
			}
			calls, err := parseToolCalls(val, param)
			if err != nil {
				perr = err
				return
			}
			m.ToolCalls, m.HasToolCalls = calls, true
		case "tool_call_id":
			if isNull(val) {
				return
			}
			s, ok := jsonString(val)
			if !ok {
				fail("tool_call_id", "a string")
				return
			}
			m.ToolCallID, m.HasToolCallID = s, true
		case "reasoning":
			if isNull(val) {
				m.Reasoning, m.HasReasoning = "", false
				return
			}
			s, ok := jsonString(val)
			if !ok {
				fail("reasoning", "a string")
				return
			}
			m.Reasoning, m.HasReasoning = s, true
		case "reasoning_content":
			if isNull(val) {
				return
			}
			if _, ok := jsonString(val); !ok {
				fail("reasoning_content", "a string")
				return
			}
			reasoningContent = val
		case "tools":
			if !isNull(val) {
				m.Tools = val
			}
		}
	})
	if perr != nil {
		return m, perr
	}
	if !hasRole {
		return m, BadRequest(param+".role", param+".role is required")
	}
	// vLLM's _normalize_messages_before: reasoning_content becomes reasoning when reasoning
	// is absent or null.
	if !m.HasReasoning && reasoningContent != nil {
		m.Reasoning, _ = jsonString(reasoningContent)
		m.HasReasoning = true
	}
	return m, nil
}

// textPartKeys maps the content part types read as text to the key holding their text.
var textPartKeys = map[string]string{"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}

func parseContent(v []byte, param string) (Content, *Error) {
	switch firstByte(v) {
	case 'n':
		if isNull(v) {
			return Content{}, nil
		}
	case '"':
		s, _ := jsonString(v)
		return Content{Kind: ContentString, Text: s}, nil
	case '[':
		c := Content{Kind: ContentParts, Parts: make([]ContentPart, 0, countElems(v))}
		var perr *Error
		_ = eachElem(v, func(pv []byte) bool {
			pp := fmt.Sprintf("%s.content[%d]", param, len(c.Parts))
			if s, ok := jsonString(pv); ok {
				c.Parts = append(c.Parts, ContentPart{Text: s, IsString: true})
				return true
			}
			if firstByte(pv) != '{' {
				perr = BadRequest(pp, pp+" must be a string or an object")
				return false
			}
			p := ContentPart{Raw: pv, TextNull: true}
			var members []RawMember
			eachMember(pv, func(k string, val []byte) { members = setMember(members, k, val) })
			for _, mb := range members {
				if mb.Key == "type" {
					s, ok := jsonString(mb.Value)
					if !ok {
						perr = BadRequest(pp+".type", pp+".type must be a string")
						return false
					}
					p.Type = s
				}
			}
			if key, ok := textPartKeys[p.Type]; ok {
				for _, mb := range members {
					if mb.Key != key || isNull(mb.Value) {
						continue
					}
					s, ok := jsonString(mb.Value)
					if !ok {
						perr = BadRequest(pp+"."+key, pp+"."+key+" must be a string")
						return false
					}
					p.Text, p.TextNull = s, false
				}
			}
			c.Parts = append(c.Parts, p)
			return true
		})
		if perr != nil {
			return Content{}, perr
		}
		return c, nil
	}
	return Content{}, BadRequest(param+".content", param+".content must be a string, a list of content parts or null")
}

func parseToolCalls(v []byte, param string) ([]ToolCall, *Error) {
	if firstByte(v) != '[' {
		return nil, BadRequest(param+".tool_calls", param+".tool_calls must be a list")
	}
	calls := make([]ToolCall, 0, countElems(v))
	var perr *Error
	_ = eachElem(v, func(cv []byte) bool {
		cp := fmt.Sprintf("%s.tool_calls[%d]", param, len(calls))
		if firstByte(cv) != '{' {
			perr = BadRequest(cp, cp+" must be an object")
			return false
		}
		c := ToolCall{Type: "function"}
		var fn []byte
		eachMember(cv, func(k string, val []byte) {
			if perr != nil {
				return
			}
			switch k {
			case "id":
				if isNull(val) {
					return
				}
				s, ok := jsonString(val)
				if !ok {
					perr = BadRequest(cp+".id", cp+".id must be a string")
					return
				}
				c.ID, c.HasID = s, true
			case "type":
				s, ok := jsonString(val)
				if !ok || s != "function" {
					perr = BadRequest(cp+".type", cp+`.type must be "function"`)
					return
				}
			case "function":
				fn = val
			}
		})
		if perr != nil {
			return false
		}
		if firstByte(fn) != '{' {
			perr = BadRequest(cp+".function", cp+".function must be an object")
			return false
		}
		eachMember(fn, func(k string, val []byte) {
			if perr != nil {
				return
			}
			switch k {
			case "name":
				if isNull(val) {
					return
				}
				s, ok := jsonString(val)
				if !ok {
					perr = BadRequest(cp+".function.name", cp+".function.name must be a string")
					return
				}
				c.Name, c.HasName = s, true
			case "arguments":
				c.Arguments = val
			}
		})
		if perr != nil {
			return false
		}
		calls = append(calls, c)
		return true
	})
	if perr != nil {
		return nil, perr
	}
	return calls, nil
}

// jsonString decodes a raw JSON string value (false for anything else). Bodies were
// validated by the scanner, so a string without escapes is its bytes between the quotes.
func jsonString(v []byte) (string, bool) {
	v = bytes.TrimSpace(v)
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// firstByte is the first non-space byte of a raw value (0 for an empty one).
func firstByte(v []byte) byte {
	if i := skipWS(v, 0); i < len(v) {
		return v[i]
	}
	return 0
}

func isTrue(v []byte) bool { return string(bytes.TrimSpace(v)) == "true" }

func isEmptyObject(v []byte) bool {
	v = bytes.TrimSpace(v)
	return len(v) >= 2 && v[0] == '{' && skipWS(v, 1) == len(v)-1
}

var errStop = fmt.Errorf("stop")

// eachElem calls fn with each element of the validated JSON array v until fn returns
// false; it then returns errStop.
func eachElem(v []byte, fn func(elem []byte) bool) error {
	i := skipWS(v, 0)
	if i >= len(v) || v[i] != '[' {
		return errJSON
	}
	i = skipWS(v, i+1)
	if i < len(v) && v[i] == ']' {
		return nil
	}
	for {
		if i >= len(v) {
			return errJSON
		}
		end := skipTrusted(v, i)
		if !fn(v[i:end]) {
			return errStop
		}
		i = skipWS(v, end)
		if i >= len(v) {
			return errJSON
		}
		if v[i] == ']' {
			return nil
		}
		if v[i] != ',' {
			return errJSON
		}
		i = skipWS(v, i+1)
	}
}

// countElems counts the elements of a JSON array, to size slices.
func countElems(v []byte) int {
	n := 0
	_ = eachElem(v, func([]byte) bool { n++; return true })
	return n
}

// jsonDepth is the deepest nesting of arrays and objects in b (strings skipped). It does
// not validate.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = skipString(b, i) - 1
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// The chat parser walks nested values of a body that scanBody has already validated, often
// several levels deep (body → messages → message → content parts), so nested values are
// skipped with the trusted scanners below, which only find where a value ends: strings are
// crossed with bytes.IndexByte instead of byte by byte. They must only see validated JSON.

// skipString returns the end of the string starting at b[i] (after its closing quote), or
// len(b) when it is not terminated.
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipTrusted returns the end of the validated JSON value starting at b[i].
func skipTrusted(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

// eachMember calls fn with each key (unescaped) and raw value of the validated JSON object v.
func eachMember(v []byte, fn func(key string, val []byte)) {
	i := skipWS(v, 0)
	if i >= len(v) || v[i] != '{' {
		return
	}
	i = skipWS(v, i+1)
	for i < len(v) && v[i] == '"' {
		kend := skipString(v, i)
		key, _ := jsonString(v[i:kend])
		i = skipWS(v, kend)
		if i >= len(v) || v[i] != ':' {
			return
		}
		i = skipWS(v, i+1)
		if i >= len(v) {
			return
		}
		vend := skipTrusted(v, i)
		fn(key, v[i:vend])
		i = skipWS(v, vend)
		if i >= len(v) || v[i] != ',' {
			return
		}
		i = skipWS(v, i+1)
	}
}
