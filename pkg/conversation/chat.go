package conversation

import (
	"strconv"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The conversion of a Responses turn into the chat completion request it runs as, by vLLM's
// rules (vllm/entrypoints/openai/responses/utils.py, construct_input_messages and
// construct_chat_messages_with_tool_call; protocol.py for the sampling fields):
//
//   - instructions, when not empty, are a first system message; earlier turns' instructions
//     are not carried over (the OpenAI reference says so, and vLLM drops them);
//   - user, system and developer messages keep their content (input_text parts as text,
//     input_image as an image_url part);
//   - an assistant message contributes its first part's text; a reasoning item its first
//     reasoning_text (else its first summary_text) as the message's reasoning; a function_call
//     a tool call {id: call_id, function: {name, arguments}}. Each of the three merges into the
//     assistant message before it when that message does not have it yet, so reasoning, text
//     and calls of one model turn are one assistant message, as the model produced them;
//   - a function_call_output is a tool message {tool_call_id: call_id, content: output};
//   - the chain a follow-up continues is its stored turns' input and output items, oldest
//     first. vLLM keeps only the output messages of the previous turn there (its reasoning and
//     function calls are dropped, so a function_call_output follow-up renders a tool result
//     without its call); kvgate keeps every item, so a stored chain renders exactly as the
//     same conversation sent whole;
//   - tools of type function become chat tools whose function object is the tool's members
//     but type; tool_choice, parallel_tool_calls, text.format (json_schema and json_object as
//     response_format), reasoning.effort (reasoning_effort), max_output_tokens
//     (max_completion_tokens), temperature, top_p, top_logprobs with include
//     message.output_text.logprobs, user and vLLM's extensions (seed, stop, top_k,
//     repetition_penalty, ignore_eos) map to their chat fields;
//   - an input whose last item is a message or reasoning with status in_progress or incomplete
//     is continued (continue_final_message), as vLLM's should_continue_final_message decides.

// chatMessage is one message of the chat request being built.
type chatMessage struct {
	role string
	// item is the user, system, developer or tool item the message is made of.
	item *openai.Item
	// Assistant parts, set as items merge in.
	text                  string
	hasText, hasReasoning bool
	reasoning             string
	calls                 []*openai.Item
	fromInstructions      bool
}

// chatConversation is a turn's conversation as chat messages, before encoding.
type chatConversation struct {
	req  *openai.ResponsesRequest
	msgs []chatMessage
	// lead is the number of leading messages truncation never drops (the instructions).
	lead int
}

// newChatConversation converts the instructions, the stored history and the new input.
func newChatConversation(req *openai.ResponsesRequest, history, input []openai.Item) *chatConversation {
	c := &chatConversation{req: req, msgs: make([]chatMessage, 0, len(history)+len(input)+1)}
	if req.Instructions != "" {
		c.msgs = append(c.msgs, chatMessage{role: "system", fromInstructions: true, text: req.Instructions, hasText: true})
		c.lead = 1
	}
	for i := range history {
		c.add(&history[i])
	}
	for i := range input {
		c.add(&input[i])
	}
	return c
}

// add converts one item, merging assistant pieces into the message before.
func (c *chatConversation) add(it *openai.Item) {
	var prev *chatMessage
	if n := len(c.msgs); n > 0 && c.msgs[n-1].role == "assistant" && !c.msgs[n-1].fromInstructions {
		prev = &c.msgs[n-1]
	}
	switch {
	case it.Type == openai.ItemFunctionCall:
		if prev != nil {
			prev.calls = append(prev.calls, it)
			return
		}
		c.msgs = append(c.msgs, chatMessage{role: "assistant", calls: []*openai.Item{it}})
	case it.Type == openai.ItemReasoning:
		if prev != nil && !prev.hasReasoning {
			prev.reasoning, prev.hasReasoning = it.ReasoningText(), true
			return
		}
		c.msgs = append(c.msgs, chatMessage{role: "assistant", reasoning: it.ReasoningText(), hasReasoning: true})
	case it.Type == openai.ItemMessage && it.Role == "assistant":
		if prev != nil && !prev.hasText {
			prev.text, prev.hasText = it.Text(), true
			return
		}
		c.msgs = append(c.msgs, chatMessage{role: "assistant", text: it.Text(), hasText: true})
	case it.Type == openai.ItemFunctionCallOutput:
		c.msgs = append(c.msgs, chatMessage{role: "tool", item: it})
	case it.Type == openai.ItemMessage:
		c.msgs = append(c.msgs, chatMessage{role: it.Role, item: it})
	}
}

// droppable is how many messages truncation may drop: all but the instructions and the last.
func (c *chatConversation) droppable() int { return max(0, len(c.msgs)-c.lead-1) }

// appendBody appends the chat request, with drop messages after the instructions left out
// (and any tool results that then lead the conversation, whose calls went with them).
func (c *chatConversation) appendBody(dst []byte, drop int) []byte {
	req := c.req
	dst = append(dst, '{')
	if req.Model != "" {
		dst = append(dst, `"model":`...)
		dst = openai.AppendString(dst, req.Model)
		dst = append(dst, ',')
	}
	dst = append(dst, `"messages":[`...)
	msgs := c.msgs
	if drop > 0 {
		rest := msgs[c.lead+min(drop, c.droppable()):]
		for len(rest) > 1 && rest[0].role == "tool" {
			rest = rest[1:]
		}
		msgs = append(append(make([]chatMessage, 0, c.lead+len(rest)), msgs[:c.lead]...), rest...)
	}
	for i := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendMessage(dst, &msgs[i])
	}
	dst = append(dst, ']')
	dst = c.appendTools(dst)
	return append(c.appendSampling(dst), '}')
}

func appendMessage(dst []byte, m *chatMessage) []byte {
	dst = append(dst, `{"role":`...)
	dst = openai.AppendString(dst, m.role)
	switch {
	case m.role == "tool":
		dst = append(dst, `,"content":`...)
		if m.item.OutputParts != nil {
			dst = appendParts(dst, m.item.OutputParts)
		} else {
			dst = append(dst, m.item.Output...)
		}
		dst = append(dst, `,"tool_call_id":`...)
		dst = openai.AppendString(dst, m.item.CallID)
	case m.item != nil:
		dst = append(dst, `,"content":`...)
		dst = appendContent(dst, m.item.Parts)
	default: // assistant, or the instructions
		if m.hasText {
			dst = append(dst, `,"content":`...)
			dst = openai.AppendString(dst, m.text)
		}
		if m.hasReasoning {
			dst = append(dst, `,"reasoning":`...)
			dst = openai.AppendString(dst, m.reasoning)
		}
		if len(m.calls) > 0 {
			dst = append(dst, `,"tool_calls":[`...)
			for i, call := range m.calls {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"id":`...)
				dst = openai.AppendString(dst, call.CallID)
				dst = append(dst, `,"type":"function","function":{"name":`...)
				dst = openai.AppendString(dst, call.Name)
				dst = append(dst, `,"arguments":`...)
				dst = openai.AppendString(dst, call.Arguments)
				dst = append(dst, "}}"...)
			}
			dst = append(dst, ']')
		}
	}
	return append(dst, '}')
}

// appendContent writes a message's parts: one text part as a string (which renders as the
// one-part list does, by the chat rules), otherwise as a list.
func appendContent(dst []byte, parts []openai.ItemPart) []byte {
	if len(parts) == 1 && parts[0].Type != openai.PartInputImage && parts[0].Type != openai.PartRefusal {
		return openai.AppendString(dst, parts[0].Text)
	}
	return appendParts(dst, parts)
}

// appendParts writes parts as chat content parts: text kinds as {"type":"text"}, refusals as
// {"type":"refusal"}, images as image_url.
func appendParts(dst []byte, parts []openai.ItemPart) []byte {
	dst = append(dst, '[')
	for i := range parts {
		p := &parts[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		switch p.Type {
		case openai.PartInputImage:
			dst = append(dst, `{"type":"image_url","image_url":{"url":`...)
			dst = openai.AppendString(dst, p.ImageURL)
			if p.Detail != "" {
				dst = append(dst, `,"detail":`...)
				dst = openai.AppendString(dst, p.Detail)
			}
			dst = append(dst, "}}"...)
		case openai.PartRefusal:
			dst = append(dst, `{"type":"refusal","refusal":`...)
			dst = openai.AppendString(dst, p.Text)
			dst = append(dst, '}')
		default:
			dst = append(dst, `{"type":"text","text":`...)
			dst = openai.AppendString(dst, p.Text)
			dst = append(dst, '}')
		}
	}
	return append(dst, ']')
}

// appendTools writes tools and tool_choice (only with tools: without, chat's default is none,
// and the Responses default auto means nothing).
func (c *chatConversation) appendTools(dst []byte) []byte {
	req := c.req
	if len(req.Tools) == 0 {
		if req.ToolChoice == openai.ToolChoiceRequired || req.ToolChoice == openai.ToolChoiceFunction {
			dst = append(dst, `,"tool_choice":"required"`...) // the chat rules reject it without tools
		}
		return dst
	}
	dst = append(dst, `,"tools":[`...)
	for i, t := range req.Tools {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"function","function":`...)
		dst = append(dst, t.Function...)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	switch req.ToolChoice {
	case "":
	case openai.ToolChoiceFunction:
		dst = append(dst, `,"tool_choice":{"type":"function","function":{"name":`...)
		dst = openai.AppendString(dst, req.ToolChoiceName)
		dst = append(dst, "}}"...)
	default:
		dst = append(dst, `,"tool_choice":`...)
		dst = openai.AppendString(dst, req.ToolChoice)
	}
	if req.ParallelToolCalls != nil {
		dst = append(dst, `,"parallel_tool_calls":`...)
		dst = strconv.AppendBool(dst, *req.ParallelToolCalls)
	}
	return dst
}

// appendSampling writes the generation fields.
func (c *chatConversation) appendSampling(dst []byte) []byte {
	req := c.req
	switch f := req.TextFormat; f.Type {
	case "json_object":
		dst = append(dst, `,"response_format":{"type":"json_object"}`...)
	case "json_schema":
		dst = append(dst, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
		dst = openai.AppendString(dst, f.Name)
		dst = append(dst, `,"schema":`...)
		dst = append(dst, f.Schema...)
		for _, m := range []openai.RawMember{{Key: "description", Value: f.Description}, {Key: "strict", Value: f.Strict}} {
			if m.Value != nil {
				dst = append(dst, ',', '"')
				dst = append(dst, m.Key...)
				dst = append(dst, '"', ':')
				dst = append(dst, m.Value...)
			}
		}
		dst = append(dst, "}}"...)
	}
	if req.MaxOutputTokens > 0 {
		dst = append(dst, `,"max_completion_tokens":`...)
		dst = strconv.AppendInt(dst, int64(req.MaxOutputTokens), 10)
	}
	for _, f := range []struct {
		k string
		v *float64
	}{{"temperature", req.Temperature}, {"top_p", req.TopP}} {
		if f.v != nil {
			dst = append(dst, ',', '"')
			dst = append(dst, f.k...)
			dst = append(dst, '"', ':')
			dst = strconv.AppendFloat(dst, *f.v, 'g', -1, 64)
		}
	}
	if req.IncludeLogprobs() {
		dst = append(dst, `,"logprobs":true,"top_logprobs":`...)
		dst = strconv.AppendInt(dst, int64(req.TopLogprobs), 10)
	}
	if req.ReasoningEffort != "" {
		dst = append(dst, `,"reasoning_effort":`...)
		dst = openai.AppendString(dst, req.ReasoningEffort)
	}
	if req.User != "" {
		dst = append(dst, `,"user":`...)
		dst = openai.AppendString(dst, req.User)
	}
	if continueFinal(req) {
		dst = append(dst, `,"continue_final_message":true,"add_generation_prompt":false`...)
	}
	for _, m := range req.Extra {
		dst = append(dst, ',')
		dst = openai.AppendString(dst, m.Key)
		dst = append(dst, ':')
		dst = append(dst, m.Value...)
	}
	if req.Stream {
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return dst
}

// continueFinal is vLLM's should_continue_final_message: the input's last item is a partial
// message or reasoning.
func continueFinal(req *openai.ResponsesRequest) bool {
	if req.InputString || len(req.Input) == 0 {
		return false
	}
	last := &req.Input[len(req.Input)-1]
	return (last.Type == openai.ItemMessage || last.Type == openai.ItemReasoning) &&
		(last.Status == openai.StatusInProgress || last.Status == openai.StatusIncomplete)
}
