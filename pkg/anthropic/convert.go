package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The conversion of messages and tools into the chat request, by vLLM's rules
// (entrypoints/anthropic: _convert_anthropic_to_openai_request):
//   - content as a string stays a string; blocks become parts: text (empty text is dropped),
//     image (base64 source → a data: URL, url source → the URL) as image_url;
//   - thinking blocks join into the message's reasoning; redacted_thinking is dropped (its
//     data is opaque to an engine);
//   - tool_use blocks (assistant) become tool_calls {id, function {name, arguments}}, the
//     arguments the input object as Python's json.dumps writes it (pyjson.go; key order
//     kept), a missing or null input "{}";
//   - tool_result blocks (user) become tool messages, in place, before the message's own
//     content: tool_call_id the tool_use_id, content the result's string or the texts of its
//     text blocks joined with "\n", its images in a user message right after the tool
//     message (appendToolResult); is_error is accepted and, as in vLLM, not rendered;
//   - a message left with one text part has it as its string content; a user message left
//     with no content is dropped, an assistant one left with nothing is {"role":"assistant"};
//   - system messages inside messages are placed as inline.go says, a system message kept
//     in place having its text as its content;
//   - Claude Code's per-request billing header is dropped from system text (billingHeader).
// What vLLM would not render and Anthropic rejects is a 400 here: an unknown block type, a
// tool_use outside an assistant message, a tool_result outside a user message or answering no
// earlier tool_use.

// msgParts collects one message's converted blocks.
type msgParts struct {
	parts     [][]byte // each a chat content part object
	texts     []string // the text of each part when it is a text part
	reasoning strings.Builder
	calls     []byte // tool_calls objects, comma-separated
	nCalls    int
}

// appendMessage appends message i (and the tool messages it holds). first reports whether
// nothing was appended to the messages array yet.
func (c *converter) appendMessage(dst []byte, m *wireMessage, i int, first bool) ([]byte, bool, *openai.Error) {
	param := fmt.Sprintf("messages[%d]", i)
	switch m.Role {
	case "user", "assistant":
	case "system":
		t, aerr := inlineSystemText(m, i)
		if aerr != nil || t == "" {
			return dst, first, aerr
		}
		if !first {
			dst = append(dst, ',')
		}
		return appendTextMessage(dst, "system", t), false, nil
	default:
		return nil, first, badRole(i, m.Role)
	}
	sep := func() {
		if !first {
			dst = append(dst, ',')
		}
		first = false
	}
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return nil, first, openai.BadRequest(param+".content", param+".content: Field required")
	}
	if m.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(m.Content, &s); err != nil {
			return nil, first, openai.BadRequest(param+".content", param+".content: invalid string")
		}
		sep()
		dst = appendTextMessage(dst, m.Role, s)
		return dst, first, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, first, openai.BadRequest(param+".content", param+".content: expected a string or an array of content blocks")
	}
	var p msgParts
	for j := range blocks {
		bp := fmt.Sprintf("%s.content[%d]", param, j)
		b := &blocks[j]
		if b.Type == "tool_result" {
			if m.Role != "user" {
				return nil, first, openai.BadRequest(bp, bp+": tool_result blocks are only allowed in user messages")
			}
			sep()
			var aerr *openai.Error
			if dst, aerr = c.appendToolResult(dst, b, bp); aerr != nil {
				return nil, first, aerr
			}
			continue
		}
		if aerr := c.addBlock(&p, b, m.Role, bp); aerr != nil {
			return nil, first, aerr
		}
	}
	if len(p.parts) == 0 && p.nCalls == 0 && p.reasoning.Len() == 0 && m.Role == "user" {
		// vLLM drops a user message left with nothing (its tool results, if any, are out
		// already) but keeps an assistant one as {"role":"assistant"} (_convert_messages).
		return dst, first, nil
	}
	sep()
	return p.appendTo(dst, m.Role), first, nil
}

// appendTextMessage appends {"role","content"} with a string content.
func appendTextMessage(dst []byte, role, s string) []byte {
	dst = append(dst, `{"role":`...)
	dst = openai.AppendString(dst, role)
	dst = append(dst, `,"content":`...)
	dst = openai.AppendString(dst, s)
	return append(dst, '}')
}

// appendTo appends the message p describes.
func (p *msgParts) appendTo(dst []byte, role string) []byte {
	dst = append(dst, `{"role":`...)
	dst = openai.AppendString(dst, role)
	if p.reasoning.Len() > 0 {
		dst = append(dst, `,"reasoning":`...)
		dst = openai.AppendString(dst, p.reasoning.String())
	}
	if p.nCalls > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		dst = append(dst, p.calls...)
		dst = append(dst, ']')
	}
	switch {
	case len(p.parts) == 1 && p.texts[0] != "":
		dst = append(dst, `,"content":`...)
		dst = openai.AppendString(dst, p.texts[0])
	case len(p.parts) > 0:
		dst = append(dst, `,"content":[`...)
		for i, part := range p.parts {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, part...)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// addBlock converts one block other than tool_result into p.
func (c *converter) addBlock(p *msgParts, b *wireBlock, role, bp string) *openai.Error {
	switch b.Type {
	case "text":
		if b.Text == nil {
			return openai.BadRequest(bp+".text", bp+".text: Field required")
		}
		if *b.Text != "" {
			p.parts = append(p.parts, textPart(*b.Text))
			p.texts = append(p.texts, *b.Text)
		}
	case "image":
		part, aerr := imagePart(b.Source, bp)
		if aerr != nil {
			return aerr
		}
		p.parts = append(p.parts, part)
		p.texts = append(p.texts, "")
	case "thinking":
		if b.Thinking == nil {
			return openai.BadRequest(bp+".thinking", bp+".thinking: Field required")
		}
		p.reasoning.WriteString(*b.Thinking)
	case "redacted_thinking":
	case "tool_use":
		if role != "assistant" {
			return openai.BadRequest(bp, bp+": tool_use blocks are only allowed in assistant messages")
		}
		call, aerr := c.toolCall(b, bp)
		if aerr != nil {
			return aerr
		}
		if p.nCalls > 0 {
			p.calls = append(p.calls, ',')
		}
		p.calls = append(p.calls, call...)
		p.nCalls++
	case "":
		return openai.BadRequest(bp+".type", bp+".type: Field required")
	default:
		return openai.BadRequest(bp+".type", fmt.Sprintf("%s.type: content blocks of type %q are not supported", bp, b.Type))
	}
	return nil
}

// textPart is a chat text part.
func textPart(s string) []byte {
	b := append([]byte(`{"type":"text","text":`), openai.AppendString(nil, s)...)
	return append(b, '}')
}

// imagePart is a chat image_url part of an image block's source.
func imagePart(src *wireSource, bp string) ([]byte, *openai.Error) {
	if src == nil {
		return nil, openai.BadRequest(bp+".source", bp+".source: Field required")
	}
	var url string
	switch src.Type {
	case "base64":
		if src.MediaType == "" || src.Data == "" {
			return nil, openai.BadRequest(bp+".source", bp+".source: a base64 source needs media_type and data")
		}
		url = "data:" + src.MediaType + ";base64," + src.Data
	case "url":
		if src.URL == "" {
			return nil, openai.BadRequest(bp+".source.url", bp+".source.url: Field required")
		}
		url = src.URL
	default:
		return nil, openai.BadRequest(bp+".source.type", fmt.Sprintf("%s.source.type: image sources of type %q are not supported", bp, src.Type))
	}
	b := append([]byte(`{"type":"image_url","image_url":{"url":`), openai.AppendString(nil, url)...)
	return append(b, "}}"...), nil
}

// toolCall is the chat tool call of a tool_use block; its id becomes known to later
// tool_results.
func (c *converter) toolCall(b *wireBlock, bp string) ([]byte, *openai.Error) {
	if b.ID == nil || *b.ID == "" {
		return nil, openai.BadRequest(bp+".id", bp+".id: Field required")
	}
	if b.Name == nil || *b.Name == "" {
		return nil, openai.BadRequest(bp+".name", bp+".name: Field required")
	}
	args := []byte("{}") // vLLM writes a missing or null input as {}
	if len(b.Input) > 0 && string(b.Input) != "null" {
		var ok bool
		if b.Input[0] != '{' {
			return nil, openai.BadRequest(bp+".input", bp+".input: expected an object")
		}
		if args, ok = appendPyJSON(nil, b.Input); !ok {
			return nil, openai.BadRequest(bp+".input", bp+".input: expected an object")
		}
	}
	c.known[*b.ID] = true
	dst := append([]byte(`{"id":`), openai.AppendString(nil, *b.ID)...)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = openai.AppendString(dst, *b.Name)
	dst = append(dst, `,"arguments":`...)
	dst = openai.AppendString(dst, string(args))
	return append(dst, "}}"...), nil
}

// appendToolResult appends the tool message of a tool_result block and, when its content has
// images, the user message that carries them, as vLLM converts a user's tool_result
// (serving.py, _convert_user_tool_result): the tool message's content is a string, the
// result's string or the texts of its text blocks joined with "\n"; its images follow it in
// a user message of their own, as image_url parts in their order.
func (c *converter) appendToolResult(dst []byte, b *wireBlock, bp string) ([]byte, *openai.Error) {
	if b.ToolUseID == nil || *b.ToolUseID == "" {
		return nil, openai.BadRequest(bp+".tool_use_id", bp+".tool_use_id: Field required")
	}
	if !c.known[*b.ToolUseID] {
		return nil, openai.BadRequest(bp+".tool_use_id", fmt.Sprintf("%s.tool_use_id: %q answers no tool_use block of an earlier assistant message", bp, *b.ToolUseID))
	}
	text := ""
	var images [][]byte
	switch {
	case len(b.Content) == 0 || string(b.Content) == "null":
	case b.Content[0] == '"':
		if err := json.Unmarshal(b.Content, &text); err != nil {
			return nil, openai.BadRequest(bp+".content", bp+".content: invalid string")
		}
	default:
		var blocks []wireBlock
		if err := json.Unmarshal(b.Content, &blocks); err != nil {
			return nil, openai.BadRequest(bp+".content", bp+".content: expected a string or an array of text and image blocks")
		}
		texts := make([]string, 0, len(blocks))
		for k := range blocks {
			kp := fmt.Sprintf("%s.content[%d]", bp, k)
			switch blocks[k].Type {
			case "text":
				if blocks[k].Text == nil {
					return nil, openai.BadRequest(kp+".text", kp+".text: Field required")
				}
				texts = append(texts, *blocks[k].Text)
			case "image":
				part, aerr := imagePart(blocks[k].Source, kp)
				if aerr != nil {
					return nil, aerr
				}
				images = append(images, part)
			default:
				return nil, openai.BadRequest(kp+".type", fmt.Sprintf("%s.type: blocks of type %q are not supported in a tool_result", kp, blocks[k].Type))
			}
		}
		text = strings.Join(texts, "\n")
	}
	dst = append(dst, `{"role":"tool","tool_call_id":`...)
	dst = openai.AppendString(dst, *b.ToolUseID)
	dst = append(dst, `,"content":`...)
	dst = openai.AppendString(dst, text)
	dst = append(dst, '}')
	if len(images) > 0 {
		dst = append(dst, `,{"role":"user","content":[`...)
		for k, part := range images {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, part...)
		}
		dst = append(dst, "]}"...)
	}
	return dst, nil
}

// appendTools appends tools as function tools (input_schema as parameters; a schema without
// "type" gets "type":"object" after its members, as vLLM's validator adds it) and the
// tool_choice: auto, any → required, tool → the named function, none; with tools and no
// tool_choice, auto. disable_parallel_tool_use becomes parallel_tool_calls false.
func appendTools(dst []byte, wr *wireRequest) ([]byte, *openai.Error) {
	if len(wr.Tools) > 0 {
		dst = append(dst, `,"tools":[`...)
		for i := range wr.Tools {
			if i > 0 {
				dst = append(dst, ',')
			}
			var aerr *openai.Error
			if dst, aerr = appendTool(dst, &wr.Tools[i], fmt.Sprintf("tools[%d]", i)); aerr != nil {
				return nil, aerr
			}
		}
		dst = append(dst, ']')
	}
	tc := wr.ToolChoice
	if tc == nil {
		if len(wr.Tools) > 0 {
			dst = append(dst, `,"tool_choice":"auto"`...)
		}
		return dst, nil
	}
	switch tc.Type {
	case "auto":
		dst = append(dst, `,"tool_choice":"auto"`...)
	case "any":
		dst = append(dst, `,"tool_choice":"required"`...)
	case "none":
		dst = append(dst, `,"tool_choice":"none"`...)
	case "tool":
		if tc.Name == nil || *tc.Name == "" {
			return nil, openai.BadRequest("tool_choice.name", "tool_choice.name: Field required for tool_choice of type \"tool\"")
		}
		dst = append(dst, `,"tool_choice":{"type":"function","function":{"name":`...)
		dst = openai.AppendString(dst, *tc.Name)
		dst = append(dst, "}}"...)
	default:
		return nil, openai.BadRequest("tool_choice.type", fmt.Sprintf("tool_choice.type: expected \"auto\", \"any\", \"tool\" or \"none\", got %q", tc.Type))
	}
	if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse {
		dst = append(dst, `,"parallel_tool_calls":false`...)
	}
	return dst, nil
}

// appendTool appends one function tool.
func appendTool(dst []byte, t *wireTool, param string) ([]byte, *openai.Error) {
	if t.Type != nil && *t.Type != "custom" {
		return nil, openai.BadRequest(param+".type", fmt.Sprintf("%s.type: tools of type %q are not supported (only client tools with an input_schema)", param, *t.Type))
	}
	if t.Name == nil || *t.Name == "" {
		return nil, openai.BadRequest(param+".name", param+".name: Field required")
	}
	schema := bytes.TrimSpace(t.InputSchema)
	if len(schema) == 0 || schema[0] != '{' {
		return nil, openai.BadRequest(param+".input_schema", param+".input_schema: expected an object")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(schema, &members); err != nil {
		return nil, openai.BadRequest(param+".input_schema", param+".input_schema: expected an object")
	}
	dst = append(dst, `{"type":"function","function":{"name":`...)
	dst = openai.AppendString(dst, *t.Name)
	if t.Description != nil {
		dst = append(dst, `,"description":`...)
		dst = openai.AppendString(dst, *t.Description)
	}
	dst = append(dst, `,"parameters":`...)
	if _, ok := members["type"]; ok {
		dst = append(dst, schema...)
	} else {
		body := bytes.TrimSpace(schema[1 : len(schema)-1])
		dst = append(dst, '{')
		dst = append(dst, body...)
		if len(body) > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"type":"object"}`...)
	}
	return append(dst, "}}"...), nil
}

// appendThinking appends what output_config.effort and thinking set in the chat request, as
// vLLM's _handle_output_config and then _handle_thinking set them (serving.py): the effort
// becomes reasoning_effort; thinking disabled sets reasoning_effort (over the effort) to the
// value the model's template takes for "no thinking", "none" here and swapped for the model's
// own by the caller (Request.SetDisabledThinkingEffort); enabled sets thinking_token_budget
// to budget_tokens (a sampling limit, not seen by the template); adaptive sets nothing. The
// template sees reasoning_effort as a variable, and enable_thinking as effort != "none"
// unless chat_template_kwargs sets it, as the chat endpoint renders any request. count_tokens
// bodies have neither member in vLLM's protocol and are rendered without them.
func appendThinking(dst []byte, wr *wireRequest, req *Request) ([]byte, *openai.Error) {
	if req.counting {
		return dst, nil
	}
	effort := ""
	if oc := wr.OutputConfig; oc != nil && oc.Effort != nil {
		if !anthropicEfforts[*oc.Effort] {
			return nil, openai.BadRequest("output_config.effort", fmt.Sprintf("output_config.effort: expected \"low\", \"medium\", \"high\", \"xhigh\" or \"max\", got %q", *oc.Effort))
		}
		effort = *oc.Effort
	}
	if th := wr.Thinking; th != nil {
		switch th.Type {
		case "enabled":
			if th.BudgetTokens == nil || *th.BudgetTokens < minBudgetTokens {
				return nil, openai.BadRequest("thinking.budget_tokens", fmt.Sprintf("thinking.budget_tokens: an integer of at least %d is required when thinking is enabled", minBudgetTokens))
			}
			if *th.BudgetTokens >= int64(req.MaxTokens) {
				return nil, openai.BadRequest("thinking.budget_tokens", "thinking.budget_tokens must be less than max_tokens")
			}
			dst = append(dst, `,"thinking_token_budget":`...)
			dst = strconv.AppendInt(dst, *th.BudgetTokens, 10)
		case "adaptive":
		case "disabled":
			effort = "none"
			req.disabledThinking = true
		default:
			return nil, openai.BadRequest("thinking.type", fmt.Sprintf("thinking.type: expected \"enabled\", \"disabled\" or \"adaptive\", got %q", th.Type))
		}
	}
	if effort != "" {
		dst = append(dst, `,"reasoning_effort":`...)
		dst = openai.AppendString(dst, effort)
	}
	return dst, nil
}

// anthropicEfforts are output_config.effort's values (vLLM's AnthropicEffort).
var anthropicEfforts = map[string]bool{"low": true, "medium": true, "high": true, "xhigh": true, "max": true}

// minBudgetTokens is the least thinking.budget_tokens vLLM (and Anthropic) accept.
const minBudgetTokens = 1024
