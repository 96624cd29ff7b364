package parse

import (
	"encoding/json"
	"strings"
)

// minimax_m2: MiniMax-M2 calls, vllm/tool_parsers/minimax_m2_tool_parser.py.
//
//	content<minimax:tool_call>\n<invoke name="NAME">\n<parameter name="P">VALUE</parameter>\n</invoke>\n...</minimax:tool_call>
//
// As vLLM's streaming path does, each <invoke> is sent whole once its "</invoke>" arrives (it is
// held until then, at most MaxCallBytes; a longer or unterminated one is content). The name is
// the text to the first ">" (whitespace and one pair of quotes removed; empty: content); each
// <parameter name=P>VALUE</parameter> gives P (likewise unquoted) and VALUE stripped,
// converted by minimaxValue; the arguments are json.dumps of the parameters, a later duplicate
// replacing the value in place as a dict does. Whitespace after the block's markers and calls
// is dropped; other text in the block and after it is content (the rest of the block then
// reads as text). Ids are "call_" + 24 hex digits.

const (
	mmBlockOpen  = "<minimax:tool_call>"
	mmBlockClose = "</minimax:tool_call>"
	mmInvoke     = "<invoke name="
	mmInvokeEnd  = "</invoke>"
	mmParam      = "<parameter name="
	mmParamEnd   = "</parameter>"
)

var (
	mmContentEnd = newMarkerSet(mmBlockOpen)
	mmBlockMarks = newMarkerSet(mmInvoke, mmBlockClose)
	mmInvokeEnds = newMarkerSet(mmInvokeEnd, mmBlockClose)
)

const (
	mmText uint8 = iota
	mmBlock
	mmCall
)

func (t *toolStage) stepMiniMax(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case mmText:
		n, m := mmContentEnd.next(b, eof)
		if m == 0 {
			t.st = mmBlock
			return len(mmBlockOpen)
		}
		e.addContent(b[:n])
		return n
	case mmBlock:
		if n := skipSpace(b); n > 0 {
			return n
		}
		n, m := mmBlockMarks.next(b, eof)
		switch m {
		case 0:
			t.region = append(t.region[:0], mmInvoke...)
			t.st = mmCall
			return len(mmInvoke)
		case 1:
			t.st = mmText
			return len(mmBlockClose)
		}
		if n > 0 {
			t.st = mmText // other text in the block is content, up to the next block
		}
		return 0
	case mmCall:
		n, m := mmInvokeEnds.next(b, eof)
		switch {
		case m == 0:
			t.region = append(t.region, mmInvokeEnd...)
			t.miniMaxCall(e)
			t.st = mmBlock
			return len(mmInvokeEnd)
		case m == 1:
			return t.headerToContent(e, mmBlock)
		case n == 0:
			return 0
		}
		return t.holdHeader(e, b[:n], mmInvokeEnds, &t.typ, mmBlock)
	}
	return 0
}

// miniMaxCall parses a whole held <invoke ...>...</invoke> and sends its call, or makes it
// content when it has no name.
func (t *toolStage) miniMaxCall(e *emitter) {
	body := string(t.region[len(mmInvoke) : len(t.region)-len(mmInvokeEnd)])
	i := strings.IndexByte(body, '>')
	if i <= 0 {
		t.headerToContent(e, mmBlock)
		return
	}
	name := unquote(body[:i])
	t.xml.begin(t.tools, name)
	var keys []string
	vals := map[string][]byte{}
	rest := body[i+1:]
	for {
		j := strings.Index(rest, mmParam)
		if j < 0 {
			break
		}
		rest = rest[j+len(mmParam):]
		k := strings.Index(rest, mmParamEnd)
		if k < 0 {
			break
		}
		p := rest[:k]
		rest = rest[k+len(mmParamEnd):]
		gt := strings.IndexByte(p, '>')
		if gt <= 0 {
			continue
		}
		pn := unquote(p[:gt])
		if _, ok := vals[pn]; !ok {
			keys = append(keys, pn)
		}
		vals[pn] = minimaxValue(nil, strings.TrimSpace(p[gt+1:]), t.xml.props[pn])
	}
	args := []byte{'{'}
	for n, k := range keys {
		if n > 0 {
			args = append(args, ", "...)
		}
		args = append(appendPyString(args, []byte(k)), ": "...)
		args = append(args, vals[k]...)
	}
	idx := e.startCall(name)
	e.addArgs(idx, append(args, '}'))
	t.region, t.typ = t.region[:0], t.typ[:0]
}

// unquote is _extract_name: whitespace removed, then one pair of matching quotes.
func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// minimaxValue appends the JSON of a parameter value as _convert_param_value_with_types makes
// it from the schema's types (minimaxTypes): "null", "none" or "nil" (any case) is null; then
// the first type of integer, number, boolean, object/array, string that reads the text; else
// JSON, else the text.
func minimaxValue(dst []byte, v string, schema json.RawMessage) []byte {
	low := strings.ToLower(v)
	if low == "null" || low == "none" || low == "nil" {
		return append(dst, "null"...)
	}
	types := map[string]bool{}
	minimaxTypes(schema, types)
	if len(types) == 0 {
		types["string"] = true
	}
	for _, ty := range []string{"integer", "int", "number", "float", "boolean", "bool", "object", "array", "string", "str", "text"} {
		if !types[ty] {
			continue
		}
		switch ty {
		case "string", "str", "text":
			return appendPyString(dst, []byte(v))
		case "integer", "int":
			if s, ok := pyInt(v); ok {
				return append(dst, s...)
			}
		case "number", "float":
			if out, ok := pyFloatValue(dst, v); ok {
				return out
			}
		case "boolean", "bool":
			switch strings.TrimSpace(low) {
			case "true", "1", "yes", "on":
				return append(dst, "true"...)
			case "false", "0", "no", "off":
				return append(dst, "false"...)
			}
		case "object", "array":
			if out, ok := jsonValue(dst, v, false); ok {
				return out
			}
		}
	}
	if out, ok := jsonValue(dst, v, false); ok {
		return out
	}
	return appendPyString(dst, []byte(v))
}

// minimaxTypes adds the lower-cased type names a parameter schema allows to types, as
// _extract_types_from_schema finds them (schemaTypes).
func minimaxTypes(schema json.RawMessage, types map[string]bool) {
	schemaTypes(schema, types, true, 0)
}

// schemaTypes adds the type names a parameter schema allows to types (lower-cased if lower), as
// extract_types_from_schema finds them: "type" (a name or a list), the JSON types of "enum"
// values, and the same of every anyOf, oneOf and allOf choice. Nesting is bounded.
func schemaTypes(schema json.RawMessage, types map[string]bool, lower bool, depth int) {
	var s map[string]json.RawMessage
	if depth > 32 || json.Unmarshal(schema, &s) != nil {
		return
	}
	add := func(ty string) {
		if lower {
			ty = strings.ToLower(ty)
		}
		types[ty] = true
	}
	var one string
	var many []json.RawMessage
	if json.Unmarshal(s["type"], &one) == nil {
		add(one)
	} else if json.Unmarshal(s["type"], &many) == nil {
		for _, m := range many {
			if json.Unmarshal(m, &one) == nil {
				add(one)
			}
		}
	}
	var enum []json.RawMessage
	if json.Unmarshal(s["enum"], &enum) == nil {
		for _, v := range enum {
			types[jsonTypeOf(v)] = true
		}
	}
	for _, f := range []string{"anyOf", "oneOf", "allOf"} {
		var choices []json.RawMessage
		if json.Unmarshal(s[f], &choices) == nil {
			for _, c := range choices {
				schemaTypes(c, types, lower, depth+1)
			}
		}
	}
}

// jsonTypeOf names the JSON-schema type of a value as Python's isinstance checks see it.
func jsonTypeOf(v json.RawMessage) string {
	t := strings.TrimSpace(string(v))
	switch {
	case t == "null":
		return "null"
	case t == "true" || t == "false":
		return "boolean"
	case strings.HasPrefix(t, `"`):
		return "string"
	case strings.HasPrefix(t, "["):
		return "array"
	case strings.HasPrefix(t, "{"):
		return "object"
	case strings.ContainsAny(t, ".eE"):
		return "number"
	}
	return "integer"
}

// finishMiniMax: an invoke cut off by the end of output is content.
func (t *toolStage) finishMiniMax(e *emitter) {
	if t.st == mmCall {
		t.headerToContent(e, mmBlock)
	}
}
