package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ToolChoice is the tool_choice of a chat request: Mode is one of the ToolChoice* constants,
// Name the function of a named choice.
type ToolChoice struct {
	Mode string
	Name string
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
