package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Items of the Responses API (POST /v1/responses input, stored input and output items,
// conversation items): the kinds the gateway serves, parsed from a validated body or from the
// store, and written back in one canonical form (AppendItem), which is what retrieve and list
// calls return.

// Item types served.
const (
	ItemMessage            = "message"
	ItemFunctionCall       = "function_call"
	ItemFunctionCallOutput = "function_call_output"
	ItemReasoning          = "reasoning"
	// ItemReference names an item stored earlier by its id ({"type":"item_reference","id"}):
	// the store resolves it before the request is converted.
	ItemReference = "item_reference"
)

// Content part types of message items.
const (
	PartInputText  = "input_text"
	PartOutputText = "output_text"
	PartRefusal    = "refusal"
	PartInputImage = "input_image"
)

// Item statuses.
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusIncomplete = "incomplete"
)

// Item is one item of a Responses conversation. Which fields are set depends on Type:
// message (Role, Parts), function_call (CallID, Name, Arguments), function_call_output
// (CallID, Output), reasoning (Summary, Content), item_reference (ID only). ID and Status
// are "" when the client sent none.
type Item struct {
	Type   string
	ID     string
	Status string

	Role  string
	Parts []ItemPart

	CallID    string
	Name      string
	Arguments string
	// Output is a function_call_output's output as sent: a JSON string, or a list of
	// input_text and input_image parts (then also parsed into OutputParts).
	Output      json.RawMessage
	OutputParts []ItemPart

	// Summary holds a reasoning item's summary_text texts, Content its reasoning_text texts.
	Summary []string
	Content []string
}

// ItemPart is one content part of a message item: input_text, output_text (Text;
// Annotations and Logprobs as sent, nil when absent), refusal (Text holds the refusal) or
// input_image (ImageURL, Detail).
type ItemPart struct {
	Type        string
	Text        string
	ImageURL    string
	Detail      string
	Annotations json.RawMessage
	Logprobs    json.RawMessage
}

// Text returns the text of a message item's first part ("" without parts), which is what
// vLLM's conversion reads of an assistant message (responses/utils.py).
func (it *Item) Text() string {
	if len(it.Parts) == 0 {
		return ""
	}
	return it.Parts[0].Text
}

// ReasoningText returns what a reasoning item contributes to the conversation, by vLLM's
// rule: its first reasoning_text, else its first summary_text, else "".
func (it *Item) ReasoningText() string {
	switch {
	case len(it.Content) > 0:
		return it.Content[0]
	case len(it.Summary) > 0:
		return it.Summary[0]
	}
	return ""
}

// unservedItems are item types of the Responses API that belong to built-in tools the gateway
// does not serve.
var unservedItems = map[string]bool{
	"file_search_call": true, "web_search_call": true, "computer_call": true, "computer_call_output": true,
	"code_interpreter_call": true, "image_generation_call": true, "local_shell_call": true, "local_shell_call_output": true,
	"shell_call": true, "shell_call_output": true, "apply_patch_call": true, "apply_patch_call_output": true,
	"mcp_list_tools": true, "mcp_approval_request": true, "mcp_approval_response": true, "mcp_call": true,
	"custom_tool_call": true, "custom_tool_call_output": true, "tool_search_call": true, "tool_search_output": true,
	"compaction": true,
}

// ParseItems parses a JSON array of items (a request's input, a conversation's items, a stored
// list). param names the array in errors ("input"); at most maxItems are accepted (413
// beyond), and nesting is bounded as for chat bodies.
func ParseItems(v []byte, param string, maxItems int) ([]Item, *Error) {
	if firstByte(v) != '[' {
		return nil, BadRequest(param, param+" must be a string or a list of items")
	}
	if maxItems <= 0 {
		maxItems = DefaultMaxMessages
	}
	n := countElems(v)
	if n > maxItems {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("%s may hold at most %d items, got %d", param, maxItems, n),
			Type: TypeInvalidRequest, Param: param, Code: "request_too_large"}
	}
	items := make([]Item, 0, n)
	var perr *Error
	_ = eachElem(v, func(iv []byte) bool {
		it, err := ParseItem(iv, param+"["+strconv.Itoa(len(items))+"]")
		if err != nil {
			perr = err
			return false
		}
		items = append(items, it)
		return true
	})
	if perr != nil {
		return nil, perr
	}
	return items, nil
}

// itemParser is the state of parsing one item (param names it in errors).
type itemParser struct {
	param   string
	it      Item
	content []byte // message content or reasoning content, raw
	summary []byte
	output  []byte
	has     map[string]bool
}

// ParseItem validates one item object (param names it in errors).
func ParseItem(v []byte, param string) (Item, *Error) {
	p := itemParser{param: param, has: map[string]bool{}}
	if firstByte(v) != '{' {
		return Item{}, BadRequest(param, param+" must be an object")
	}
	var perr *Error
	eachMember(v, func(k string, val []byte) {
		if perr == nil {
			perr = p.member(k, val)
		}
	})
	if perr != nil {
		return Item{}, perr
	}
	if p.it.Type == "" {
		if !p.has["role"] {
			return Item{}, BadRequest(param+".type", param+".type is required")
		}
		p.it.Type = ItemMessage
	}
	return p.finish()
}

// member reads one member of an item; unknown members are ignored.
func (p *itemParser) member(k string, val []byte) *Error {
	if isNull(val) {
		return nil
	}
	p.has[k] = true
	switch k {
	case "type", "id", "status", "role", "call_id", "name", "arguments":
		s, ok := jsonString(val)
		if !ok {
			return BadRequest(p.param+"."+k, p.param+"."+k+" must be a string")
		}
		p.setString(k, s)
	case "content":
		p.content = val
	case "summary":
		p.summary = val
	case "output":
		p.output = val
	case "encrypted_content":
		return BadRequest(p.param+".encrypted_content", "encrypted reasoning content is not supported: the gateway keeps reasoning as text (send the item without encrypted_content)")
	}
	return nil
}

func (p *itemParser) setString(k, s string) {
	switch k {
	case "type":
		p.it.Type = s
	case "id":
		p.it.ID = s
	case "status":
		p.it.Status = s
	case "role":
		p.it.Role = s
	case "call_id":
		p.it.CallID = s
	case "name":
		p.it.Name = s
	case "arguments":
		p.it.Arguments = s
	}
}

// finish checks the item's type-specific fields.
func (p *itemParser) finish() (Item, *Error) {
	it := &p.it
	switch it.Status {
	case "", StatusInProgress, StatusCompleted, StatusIncomplete:
	default:
		return Item{}, BadRequest(p.param+".status", p.param+`.status must be "in_progress", "completed" or "incomplete"`)
	}
	var err *Error
	switch it.Type {
	case ItemMessage:
		err = p.message()
	case ItemFunctionCall:
		err = p.require("call_id", "name", "arguments")
	case ItemFunctionCallOutput:
		if err = p.require("call_id", "output"); err == nil {
			err = p.toolOutput()
		}
	case ItemReasoning:
		err = p.reasoning()
	case ItemReference:
		err = p.require("id")
	default:
		if unservedItems[it.Type] {
			return Item{}, BadRequest(p.param+".type", fmt.Sprintf("%s items are not supported: the gateway serves function tools only, not built-in tools", it.Type))
		}
		return Item{}, BadRequest(p.param+".type", fmt.Sprintf("unknown item type %q", it.Type))
	}
	if err != nil {
		return Item{}, err
	}
	return *it, nil
}

// require reports the first of the named members that is absent (or null).
func (p *itemParser) require(names ...string) *Error {
	for _, n := range names {
		if !p.has[n] {
			return BadRequest(p.param+"."+n, fmt.Sprintf("%s.%s is required for a %s item", p.param, n, p.it.Type))
		}
	}
	return nil
}

// message checks a message item's role and parses its content.
func (p *itemParser) message() *Error {
	it := &p.it
	switch it.Role {
	case "user", "assistant", "system", "developer":
	case "":
		return BadRequest(p.param+".role", p.param+".role is required")
	default:
		return BadRequest(p.param+".role", p.param+`.role must be "user", "assistant", "system" or "developer"`)
	}
	if p.content == nil {
		return BadRequest(p.param+".content", p.param+".content is required")
	}
	if s, ok := jsonString(p.content); ok {
		typ := PartInputText
		if it.Role == "assistant" {
			typ = PartOutputText
		}
		it.Parts = []ItemPart{{Type: typ, Text: s}}
		return nil
	}
	if firstByte(p.content) != '[' {
		return BadRequest(p.param+".content", p.param+".content must be a string or a list of content parts")
	}
	it.Parts = make([]ItemPart, 0, countElems(p.content))
	var perr *Error
	_ = eachElem(p.content, func(pv []byte) bool {
		part, err := parsePart(pv, fmt.Sprintf("%s.content[%d]", p.param, len(it.Parts)), it.Role == "assistant")
		if err != nil {
			perr = err
			return false
		}
		it.Parts = append(it.Parts, part)
		return true
	})
	return perr
}

// parsePart parses one content part of a message (assistant: output_text and refusal, as the
// model wrote them; others: input_text and input_image; text parts are accepted on any role).
func parsePart(v []byte, param string, assistant bool) (ItemPart, *Error) {
	if firstByte(v) != '{' {
		return ItemPart{}, BadRequest(param, param+" must be an object")
	}
	var part ItemPart
	var perr *Error
	str := func(k string, val []byte) string {
		s, ok := jsonString(val)
		if !ok && perr == nil {
			perr = BadRequest(param+"."+k, param+"."+k+" must be a string")
		}
		return s
	}
	has := map[string]bool{}
	eachMember(v, func(k string, val []byte) {
		if isNull(val) {
			return
		}
		has[k] = true
		switch k {
		case "type":
			part.Type = str(k, val)
		case "text", "refusal":
			part.Text = str(k, val)
		case "image_url":
			part.ImageURL = str(k, val)
		case "detail":
			part.Detail = str(k, val)
		case "annotations":
			part.Annotations = val
		case "logprobs":
			part.Logprobs = val
		}
	})
	if perr != nil {
		return ItemPart{}, perr
	}
	need := ""
	switch part.Type {
	case PartInputText, PartOutputText:
		need = "text"
	case PartRefusal:
		need = "refusal"
	case PartInputImage:
		if assistant {
			return ItemPart{}, BadRequest(param+".type", "input_image parts belong to user, system or developer messages")
		}
		if has["file_id"] {
			return ItemPart{}, BadRequest(param+".file_id", "file_id images are not supported: the gateway has no Files API (send image_url)")
		}
		need = "image_url"
	case "":
		return ItemPart{}, BadRequest(param+".type", param+".type is required")
	case "input_file", "input_audio":
		return ItemPart{}, BadRequest(param+".type", fmt.Sprintf("%s parts are not supported", part.Type))
	default:
		return ItemPart{}, BadRequest(param+".type", fmt.Sprintf("unknown content part type %q", part.Type))
	}
	if !has[need] {
		return ItemPart{}, BadRequest(param+"."+need, param+"."+need+" is required")
	}
	return part, nil
}

// toolOutput checks a function_call_output's output: a string or a list of text and image
// parts (kept as sent: the chat request's tool message takes it as its content).
func (p *itemParser) toolOutput() *Error {
	if _, ok := jsonString(p.output); ok {
		p.it.Output = p.output
		return nil
	}
	if firstByte(p.output) != '[' {
		return BadRequest(p.param+".output", p.param+".output must be a string or a list of content parts")
	}
	var perr *Error
	p.it.OutputParts = make([]ItemPart, 0, countElems(p.output))
	_ = eachElem(p.output, func(pv []byte) bool {
		var part ItemPart
		part, perr = parsePart(pv, fmt.Sprintf("%s.output[%d]", p.param, len(p.it.OutputParts)), false)
		p.it.OutputParts = append(p.it.OutputParts, part)
		return perr == nil
	})
	if perr != nil {
		return perr
	}
	p.it.Output = p.output
	return nil
}

// reasoning parses a reasoning item's summary and content texts.
func (p *itemParser) reasoning() *Error {
	var err *Error
	if p.it.Summary, err = textList(p.summary, p.param+".summary", "summary_text"); err != nil {
		return err
	}
	p.it.Content, err = textList(p.content, p.param+".content", "reasoning_text")
	return err
}

// textList reads a list of {"type": typ, "text": ...} parts (nil raw: none).
func textList(v []byte, param, typ string) ([]string, *Error) {
	if v == nil {
		return nil, nil
	}
	if firstByte(v) != '[' {
		return nil, BadRequest(param, param+" must be a list")
	}
	var out []string
	var perr *Error
	_ = eachElem(v, func(e []byte) bool {
		ep := fmt.Sprintf("%s[%d]", param, len(out))
		var t, text string
		var hasText bool
		eachMember(e, func(k string, val []byte) {
			switch k {
			case "type":
				t, _ = jsonString(val)
			case "text":
				text, hasText = jsonString(val)
			}
		})
		if firstByte(e) != '{' || t != typ || !hasText {
			perr = BadRequest(ep, fmt.Sprintf(`%s must be {"type": %q, "text": string}`, ep, typ))
			return false
		}
		out = append(out, text)
		return true
	})
	return out, perr
}

// AppendItem appends it in its canonical form, the shape retrieve and list calls return:
// {"id","type",...} with the type's fields, message content always a list of parts.
func AppendItem(dst []byte, it *Item) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendString(dst, it.ID)
	dst = append(dst, `,"type":`...)
	dst = AppendString(dst, it.Type)
	if it.Status != "" {
		dst = append(dst, `,"status":`...)
		dst = AppendString(dst, it.Status)
	}
	switch it.Type {
	case ItemMessage:
		dst = append(dst, `,"role":`...)
		dst = AppendString(dst, it.Role)
		dst = append(dst, `,"content":[`...)
		for i := range it.Parts {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendItemPart(dst, &it.Parts[i])
		}
		dst = append(dst, ']')
	case ItemFunctionCall:
		dst = appendField(dst, "call_id", it.CallID)
		dst = appendField(dst, "name", it.Name)
		dst = appendField(dst, "arguments", it.Arguments)
	case ItemFunctionCallOutput:
		dst = appendField(dst, "call_id", it.CallID)
		dst = append(dst, `,"output":`...)
		dst = append(dst, it.Output...)
	case ItemReasoning:
		dst = append(dst, `,"summary":`...)
		dst = appendTextList(dst, "summary_text", it.Summary)
		dst = append(dst, `,"content":`...)
		dst = appendTextList(dst, "reasoning_text", it.Content)
	}
	return append(dst, '}')
}

func appendField(dst []byte, k, v string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, k...)
	dst = append(dst, '"', ':')
	return AppendString(dst, v)
}

// AppendItemPart appends one content part in canonical form (an unknown type as
// {"type","text"}: reasoning_text, summary_text).
func AppendItemPart(dst []byte, p *ItemPart) []byte {
	dst = append(dst, `{"type":`...)
	dst = AppendString(dst, p.Type)
	switch p.Type {
	case PartRefusal:
		dst = appendField(dst, "refusal", p.Text)
	case PartInputImage:
		dst = appendField(dst, "image_url", p.ImageURL)
		if p.Detail != "" {
			dst = appendField(dst, "detail", p.Detail)
		}
	case PartOutputText:
		dst = appendField(dst, "text", p.Text)
		dst = append(dst, `,"annotations":`...)
		dst = appendRawOr(dst, p.Annotations, "[]")
		if p.Logprobs != nil {
			dst = append(dst, `,"logprobs":`...)
			dst = append(dst, p.Logprobs...)
		}
	default:
		dst = appendField(dst, "text", p.Text)
	}
	return append(dst, '}')
}

func appendRawOr(dst, raw []byte, def string) []byte {
	if raw == nil {
		return append(dst, def...)
	}
	return append(dst, raw...)
}

// appendTextList appends texts as a list of {"type": typ, "text": t} parts.
func appendTextList(dst []byte, typ string, texts []string) []byte {
	dst = append(dst, '[')
	for i, t := range texts {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":`...)
		dst = AppendString(dst, typ)
		dst = appendField(dst, "text", t)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// AppendItems appends items as a JSON array in canonical form.
func AppendItems(dst []byte, items []Item) []byte {
	dst = append(dst, '[')
	for i := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendItem(dst, &items[i])
	}
	return append(dst, ']')
}
