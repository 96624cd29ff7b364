package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"unicode/utf8"
)

// ResponsesRequest is a validated POST /v1/responses body (the OpenAI Responses API). The
// gateway runs it as a chat request (pkg/conversation builds that from it and the stored
// chain), so what is kept here is what that conversion and the response object need: the
// input items, the fields with a chat counterpart parsed, and the fields only echoed kept raw.
// It refers into the body it was parsed from.
type ResponsesRequest struct {
	Model        string
	Instructions string
	// Input is the new input: a string input is one user message of one input_text part
	// (InputString tells it apart).
	Input       []Item
	InputString bool
	// PreviousResponseID and Conversation name the stored state the input continues (at most
	// one of them).
	PreviousResponseID string
	Conversation       string

	// Tools are the function tools (other tool types are refused).
	Tools []ResponsesTool
	// ToolChoice is "auto", "none", "required" or "function" (a named function, ToolChoiceName);
	// "" when absent (auto with tools). ToolChoiceRaw is the value as sent (nil: absent).
	ToolChoice        string
	ToolChoiceName    string
	ToolChoiceRaw     json.RawMessage
	ParallelToolCalls *bool
	// Text is the text configuration as sent (nil: absent); TextFormat its format.
	Text       json.RawMessage
	TextFormat TextFormat
	// Reasoning is the reasoning configuration as sent; ReasoningEffort its effort.
	Reasoning       json.RawMessage
	ReasoningEffort string

	MaxOutputTokens int // 0: not given
	Temperature     *float64
	TopP            *float64
	TopLogprobs     int
	// Truncation is "disabled" (the default) or "auto".
	Truncation     string
	Metadata       json.RawMessage // a JSON object, nil when absent
	User           string
	PromptCacheKey string
	// Store is whether the response is kept (default true).
	Store   bool
	Include []string
	Stream  bool

	// Echo holds the fields only echoed in the response object, as sent (service_tier,
	// safety_identifier, max_tool_calls, prompt_cache_retention), in body order.
	Echo []RawMember
	// Extra holds vLLM's sampling extensions of the Responses API (seed, stop, top_k,
	// repetition_penalty, ignore_eos), passed on to the chat request as sent.
	Extra []RawMember
}

// ResponsesTool is one function tool: its name, the tool object as sent (echoed in the
// response) and Function, the chat tool's function object: the tool's members but type, in
// request order (vLLM's convert_tool_responses_to_completions_format).
type ResponsesTool struct {
	Name     string
	Raw      json.RawMessage
	Function json.RawMessage
}

// TextFormat is text.format: Type "text" (the default), "json_object" or "json_schema"
// (Name, Schema, Description, Strict as sent).
type TextFormat struct {
	Type        string
	Name        string
	Schema      json.RawMessage
	Description json.RawMessage
	Strict      json.RawMessage
}

// IncludeLogprobs reports whether include asks for message.output_text.logprobs.
func (r *ResponsesRequest) IncludeLogprobs() bool {
	return slices.Contains(r.Include, "message.output_text.logprobs")
}

// Include values accepted. Only message.output_text.logprobs changes the answer; the others
// name outputs of built-in tools the gateway does not serve, or encrypted reasoning, which it
// does not produce, and are accepted so that clients that always send them work.
var includeValues = map[string]bool{
	"message.output_text.logprobs": true, "reasoning.encrypted_content": true, "message.input_image.image_url": true,
	"file_search_call.results": true, "web_search_call.results": true, "web_search_call.action.sources": true,
	"code_interpreter_call.outputs": true, "computer_call_output.output.image_url": true,
}

// builtinTools are the tool types of the Responses API the gateway does not serve: they run on
// OpenAI's side, and an engine behind the gateway has none of them.
var builtinTools = map[string]bool{
	"web_search": true, "web_search_preview": true, "web_search_2025_08_26": true, "web_search_preview_2025_03_11": true,
	"file_search": true, "code_interpreter": true, "computer_use": true, "computer_use_preview": true, "computer": true,
	"mcp": true, "image_generation": true, "local_shell": true, "shell": true, "apply_patch": true, "custom": true,
	"tool_search": true, "namespace": true,
}

// echoFields are the top-level fields only echoed in the response object.
var echoFields = map[string]bool{"service_tier": true, "safety_identifier": true, "max_tool_calls": true, "prompt_cache_retention": true}

// extraFields are vLLM's extensions passed on to the chat request.
var extraFields = map[string]bool{"seed": true, "stop": true, "top_k": true, "repetition_penalty": true, "ignore_eos": true}

// ParseResponses decodes and validates a POST /v1/responses body. Failures are 400 *Errors
// naming the field (built-in tools, background mode and prompt templates among them: the
// gateway does not serve them), or 413 for an input beyond Limits.MaxMessages items.
func ParseResponses(body []byte, lim Limits) (*ResponsesRequest, *Error) {
	maxDepth := lim.MaxJSONDepth
	if maxDepth <= 0 {
		maxDepth = DefaultMaxJSONDepth
	}
	if d := jsonDepth(body); d > maxDepth {
		return nil, BadRequest("", fmt.Sprintf("request body nests %d levels deep, more than the %d allowed", d, maxDepth))
	}
	var order []string
	raw := make(map[string]json.RawMessage, 12)
	if !utf8.Valid(body) {
		return nil, BadRequest("", "request body is not valid UTF-8")
	}
	if err := scanObject(body, func(k string, v []byte) {
		if _, dup := raw[k]; !dup {
			order = append(order, k)
		}
		raw[k] = v
	}); err != nil {
		_, perr := scanBody(body) // its message says what is wrong
		return nil, perr
	}
	req := &ResponsesRequest{Store: true, Truncation: "disabled"}
	var err *Error
	if req.Model, err = parseModel(raw); err != nil {
		return nil, err
	}
	for _, k := range order {
		v := raw[k]
		if isNull(v) {
			continue
		}
		switch {
		case echoFields[k]:
			req.Echo = append(req.Echo, RawMember{k, v})
		case extraFields[k]:
			req.Extra = append(req.Extra, RawMember{k, v})
		}
	}
	for _, f := range responsesFields {
		if v, ok := raw[f.name]; ok && !isNull(v) {
			if err := f.parse(req, v, lim); err != nil {
				return nil, err
			}
		}
	}
	if _, ok := raw["input"]; !ok || isNull(raw["input"]) {
		return nil, BadRequest("input", "input is required")
	}
	if req.PreviousResponseID != "" && req.Conversation != "" {
		return nil, BadRequest("previous_response_id", "previous_response_id and conversation cannot both be set")
	}
	return req, req.checkToolChoice()
}

// responsesFields are the parsed top-level fields, in this order when present and not null.
var responsesFields = []struct {
	name  string
	parse func(r *ResponsesRequest, v []byte, lim Limits) *Error
}{
	{"background", func(r *ResponsesRequest, v []byte, _ Limits) *Error {
		if isTrue(v) {
			return BadRequest("background", "background mode is not supported: the gateway answers each response on its own connection")
		}
		return boolMember("background", v, new(bool))
	}},
	{"prompt", func(*ResponsesRequest, []byte, Limits) *Error {
		return BadRequest("prompt", "prompt templates are not supported: send instructions and input")
	}},
	{"instructions", stringMember("instructions", func(r *ResponsesRequest, s string) { r.Instructions = s })},
	{"input", (*ResponsesRequest).parseInput},
	{"previous_response_id", stringMember("previous_response_id", func(r *ResponsesRequest, s string) { r.PreviousResponseID = s })},
	{"conversation", (*ResponsesRequest).parseConversation},
	{"tools", (*ResponsesRequest).parseTools},
	{"tool_choice", func(r *ResponsesRequest, v []byte, _ Limits) *Error { r.ToolChoiceRaw = v; return nil }},
	{"parallel_tool_calls", func(r *ResponsesRequest, v []byte, _ Limits) *Error {
		var b bool
		r.ParallelToolCalls = &b
		return boolMember("parallel_tool_calls", v, &b)
	}},
	{"text", (*ResponsesRequest).parseText},
	{"reasoning", (*ResponsesRequest).parseReasoning},
	{"max_output_tokens", func(r *ResponsesRequest, v []byte, _ Limits) *Error {
		n, err := parseInt(v)
		if err != nil || n < 1 || n > MaxTokensLimit {
			return BadRequest("max_output_tokens", fmt.Sprintf("max_output_tokens must be an integer from 1 to %d", MaxTokensLimit))
		}
		r.MaxOutputTokens = int(n)
		return nil
	}},
	{"temperature", func(r *ResponsesRequest, v []byte, lim Limits) *Error {
		var s Sampling
		err := s.parseTemperature(v, lim)
		r.Temperature = s.Temperature
		return err
	}},
	{"top_p", func(r *ResponsesRequest, v []byte, lim Limits) *Error {
		var s Sampling
		err := s.parseTopP(v, lim)
		r.TopP = s.TopP
		return err
	}},
	{"top_logprobs", func(r *ResponsesRequest, v []byte, _ Limits) *Error {
		n, err := parseInt(v)
		if err != nil || n < 0 || n > 20 {
			return BadRequest("top_logprobs", "top_logprobs must be an integer from 0 to 20")
		}
		r.TopLogprobs = int(n)
		return nil
	}},
	{"truncation", func(r *ResponsesRequest, v []byte, _ Limits) *Error {
		s, ok := jsonString(v)
		if !ok || (s != "auto" && s != "disabled") {
			return BadRequest("truncation", `truncation must be "auto" or "disabled"`)
		}
		r.Truncation = s
		return nil
	}},
	{"metadata", func(r *ResponsesRequest, v []byte, _ Limits) *Error {
		if err := CheckMetadata(v); err != nil {
			return err
		}
		r.Metadata = v
		return nil
	}},
	{"user", stringMember("user", func(r *ResponsesRequest, s string) { r.User = s })},
	{"prompt_cache_key", stringMember("prompt_cache_key", func(r *ResponsesRequest, s string) { r.PromptCacheKey = s })},
	{"store", func(r *ResponsesRequest, v []byte, _ Limits) *Error { return boolMember("store", v, &r.Store) }},
	{"include", (*ResponsesRequest).parseInclude},
	{"stream", func(r *ResponsesRequest, v []byte, _ Limits) *Error { return boolMember("stream", v, &r.Stream) }},
}

func stringMember(name string, set func(*ResponsesRequest, string)) func(*ResponsesRequest, []byte, Limits) *Error {
	return func(r *ResponsesRequest, v []byte, _ Limits) *Error {
		s, ok := jsonString(v)
		if !ok {
			return BadRequest(name, name+" must be a string")
		}
		set(r, s)
		return nil
	}
}

func boolMember(name string, v []byte, dst *bool) *Error {
	switch string(trimSpace(v)) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return BadRequest(name, name+" must be a boolean")
	}
	return nil
}

func trimSpace(v []byte) []byte {
	i, j := skipWS(v, 0), len(v)
	for j > i && (v[j-1] == ' ' || v[j-1] == '\t' || v[j-1] == '\n' || v[j-1] == '\r') {
		j--
	}
	return v[i:j]
}

func (r *ResponsesRequest) parseInput(v []byte, lim Limits) *Error {
	if s, ok := jsonString(v); ok {
		r.Input, r.InputString = []Item{{Type: ItemMessage, Role: "user", Parts: []ItemPart{{Type: PartInputText, Text: s}}}}, true
		return nil
	}
	items, err := ParseItems(v, "input", lim.MaxMessages)
	r.Input = items
	return err
}

func (r *ResponsesRequest) parseConversation(v []byte, _ Limits) *Error {
	if s, ok := jsonString(v); ok && s != "" {
		r.Conversation = s
		return nil
	}
	var id []byte
	if firstByte(v) == '{' {
		eachMember(v, func(k string, val []byte) {
			if k == "id" {
				id = val
			}
		})
	}
	s, ok := jsonString(id)
	if !ok || s == "" {
		return BadRequest("conversation", `conversation must be a conversation id or {"id": ...}`)
	}
	r.Conversation = s
	return nil
}

func (r *ResponsesRequest) parseTools(v []byte, _ Limits) *Error {
	if firstByte(v) != '[' {
		return BadRequest("tools", "tools must be a list of tools")
	}
	var perr *Error
	_ = eachElem(v, func(tv []byte) bool {
		param := fmt.Sprintf("tools[%d]", len(r.Tools))
		t, err := parseResponsesTool(tv, param)
		if err != nil {
			perr = err
			return false
		}
		r.Tools = append(r.Tools, t)
		return true
	})
	return perr
}

// parseResponsesTool validates one tool: a function ({"type":"function","name",...}); built-in
// tools are refused with a message naming them.
func parseResponsesTool(v []byte, param string) (ResponsesTool, *Error) {
	if firstByte(v) != '{' {
		return ResponsesTool{}, BadRequest(param, param+" must be an object")
	}
	var typ, name string
	var hasType, hasName bool
	var perr *Error
	fn := append(make([]byte, 0, len(v)), '{')
	eachMember(v, func(k string, val []byte) {
		if perr != nil {
			return
		}
		if k != "type" {
			if len(fn) > 1 {
				fn = append(fn, ',')
			}
			fn = AppendString(fn, k)
			fn = append(fn, ':')
			fn = append(fn, val...)
		}
		switch k {
		case "type":
			typ, hasType = jsonString(val)
		case "name":
			name, hasName = jsonString(val)
		case "parameters":
			if !isNull(val) && firstByte(val) != '{' {
				perr = BadRequest(param+".parameters", param+".parameters must be an object")
			}
		case "description":
			if _, ok := jsonString(val); !ok && !isNull(val) {
				perr = BadRequest(param+".description", param+".description must be a string")
			}
		case "strict":
			if !isNull(val) {
				perr = boolMember(param+".strict", val, new(bool))
			}
		}
	})
	switch {
	case perr != nil:
		return ResponsesTool{}, perr
	case !hasType:
		return ResponsesTool{}, BadRequest(param+".type", param+".type is required")
	case builtinTools[typ]:
		return ResponsesTool{}, BadRequest(param+".type", fmt.Sprintf("built-in tool %q is not supported: the gateway serves function tools only (the engine behind it has no %s)", typ, typ))
	case typ != "function":
		return ResponsesTool{}, BadRequest(param+".type", fmt.Sprintf("unknown tool type %q: only function tools are served", typ))
	case !hasName || name == "":
		return ResponsesTool{}, BadRequest(param+".name", param+".name is required")
	}
	return ResponsesTool{Name: name, Raw: v, Function: append(fn, '}')}, nil
}

// checkToolChoice parses tool_choice: "none", "auto", "required" or {"type":"function","name"}
// naming one of the tools.
func (r *ResponsesRequest) checkToolChoice() *Error {
	v := r.ToolChoiceRaw
	if v == nil {
		return nil
	}
	if s, ok := jsonString(v); ok {
		switch s {
		case ToolChoiceNone, ToolChoiceAuto, ToolChoiceRequired:
			r.ToolChoice = s
			return nil
		}
		return BadRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}`)
	}
	var typ, name string
	if firstByte(v) == '{' {
		eachMember(v, func(k string, val []byte) {
			switch k {
			case "type":
				typ, _ = jsonString(val)
			case "name":
				name, _ = jsonString(val)
			}
		})
	}
	switch {
	case typ == "function" && name != "":
	case typ == "allowed_tools":
		return BadRequest("tool_choice", "tool_choice allowed_tools is not supported: send the allowed tools as tools")
	case builtinTools[typ] || typ == "mcp" || typ == "custom":
		return BadRequest("tool_choice", fmt.Sprintf("tool_choice %q is not supported: the gateway serves function tools only", typ))
	default:
		return BadRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}`)
	}
	for _, t := range r.Tools {
		if t.Name == name {
			r.ToolChoice, r.ToolChoiceName = ToolChoiceFunction, name
			return nil
		}
	}
	return BadRequest("tool_choice", fmt.Sprintf("tool_choice names function %q, which is not among the tools", name))
}

func (r *ResponsesRequest) parseText(v []byte, _ Limits) *Error {
	if firstByte(v) != '{' {
		return BadRequest("text", "text must be an object")
	}
	r.Text = v
	r.TextFormat.Type = "text"
	var perr *Error
	eachMember(v, func(k string, val []byte) {
		if k != "format" || isNull(val) || perr != nil {
			return
		}
		if firstByte(val) != '{' {
			perr = BadRequest("text.format", "text.format must be an object")
			return
		}
		f := &r.TextFormat
		eachMember(val, func(k string, fv []byte) {
			switch k {
			case "type":
				f.Type, _ = jsonString(fv)
			case "name":
				f.Name, _ = jsonString(fv)
			case "schema":
				f.Schema = fv
			case "description":
				f.Description = fv
			case "strict":
				f.Strict = fv
			}
		})
		switch {
		case f.Type == "text" || f.Type == "json_object":
		case f.Type == "json_schema" && firstByte(f.Schema) == '{' && f.Name != "":
		case f.Type == "json_schema":
			perr = BadRequest("text.format", "a json_schema text.format needs a name and a schema object")
		default:
			perr = BadRequest("text.format.type", `text.format.type must be "text", "json_object" or "json_schema"`)
		}
	})
	return perr
}

func (r *ResponsesRequest) parseReasoning(v []byte, _ Limits) *Error {
	if firstByte(v) != '{' {
		return BadRequest("reasoning", "reasoning must be an object")
	}
	r.Reasoning = v
	var perr *Error
	eachMember(v, func(k string, val []byte) {
		if k != "effort" || isNull(val) {
			return
		}
		s, ok := jsonString(val)
		if !ok || !reasoningEfforts[s] {
			perr = BadRequest("reasoning.effort", "reasoning.effort must be one of none, minimal, low, medium, high, xhigh, max")
			return
		}
		r.ReasoningEffort = s
	})
	return perr
}

func (r *ResponsesRequest) parseInclude(v []byte, _ Limits) *Error {
	bad := BadRequest("include", "include must be a list of strings")
	if firstByte(v) != '[' {
		return bad
	}
	var perr *Error
	_ = eachElem(v, func(e []byte) bool {
		s, ok := jsonString(e)
		if !ok {
			perr = bad
			return false
		}
		if !includeValues[s] {
			perr = BadRequest("include", fmt.Sprintf("unknown include value %q", s))
			return false
		}
		r.Include = append(r.Include, s)
		return true
	})
	return perr
}

// Bounds of metadata, as the OpenAI reference sets them.
const (
	maxMetadataKeys     = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
)

// CheckMetadata validates a metadata object: at most 16 string values of at most 512
// characters under keys of at most 64.
func CheckMetadata(v []byte) *Error {
	if firstByte(v) != '{' {
		return BadRequest("metadata", "metadata must be an object of strings")
	}
	n := 0
	var perr *Error
	eachMember(v, func(k string, val []byte) {
		n++
		s, ok := jsonString(val)
		switch {
		case perr != nil:
		case !ok:
			perr = BadRequest("metadata", "metadata values must be strings")
		case utf8.RuneCountInString(k) > maxMetadataKeyLen || utf8.RuneCountInString(s) > maxMetadataValueLen:
			perr = BadRequest("metadata", fmt.Sprintf("metadata keys may be %d characters long and values %d", maxMetadataKeyLen, maxMetadataValueLen))
		}
	})
	if perr == nil && n > maxMetadataKeys {
		perr = &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "metadata", Message: fmt.Sprintf("metadata may hold at most %d keys", maxMetadataKeys)}
	}
	return perr
}
