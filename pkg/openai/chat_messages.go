package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
)

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
	p := messageParser{param: fmt.Sprintf("messages[%d]", i)}
	if firstByte(v) != '{' {
		return p.m, BadRequest(p.param, p.param+" must be an object")
	}
	var perr *Error
	eachMember(v, func(k string, val []byte) {
		if perr == nil {
			perr = p.member(k, val)
		}
	})
	if perr != nil {
		return p.m, perr
	}
	if !p.hasRole {
		return p.m, BadRequest(p.param+".role", p.param+".role is required")
	}
	// vLLM's _normalize_messages_before: reasoning_content becomes reasoning when reasoning
	// is absent or null.
	if !p.m.HasReasoning && p.reasoningContent != nil {
		p.m.Reasoning, _ = jsonString(p.reasoningContent)
		p.m.HasReasoning = true
	}
	return p.m, nil
}

// messageParser is the state of parsing one message (param names it in errors, as
// "messages[i]").
type messageParser struct {
	param            string
	m                ChatMessage
	hasRole          bool
	reasoningContent []byte // raw, a string when set
}

// member parses the message member k; other members are ignored.
func (p *messageParser) member(k string, val []byte) *Error {
	m := &p.m
	var err *Error
	switch k {
	case "role":
		m.Role, err = p.str("role", val)
		p.hasRole = err == nil
	case "content":
		m.Content, err = parseContent(val, p.param)
	case "name":
		if !isNull(val) {
			m.Name, err = p.str("name", val)
			m.HasName = err == nil
		}
	case "tool_calls":
		if isNull(val) {
			m.ToolCalls, m.HasToolCalls = nil, false
			return nil
		}
		m.ToolCalls, err = parseToolCalls(val, p.param)
		m.HasToolCalls = err == nil
	case "tool_call_id":
		if !isNull(val) {
			m.ToolCallID, err = p.str("tool_call_id", val)
			m.HasToolCallID = err == nil
		}
	case "reasoning":
		if isNull(val) {
			m.Reasoning, m.HasReasoning = "", false
			return nil
		}
		m.Reasoning, err = p.str("reasoning", val)
		m.HasReasoning = err == nil
	case "reasoning_content":
		if !isNull(val) {
			if _, err = p.str("reasoning_content", val); err == nil {
				p.reasoningContent = val
			}
		}
	case "tools":
		if !isNull(val) {
			m.Tools = val
		}
	}
	return err
}

// str reads the string value of the message's member field.
func (p *messageParser) str(field string, val []byte) (string, *Error) {
	s, ok := jsonString(val)
	if !ok {
		return "", BadRequest(p.param+"."+field, p.param+"."+field+" must be a string")
	}
	return s, nil
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
