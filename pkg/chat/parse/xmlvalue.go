package parse

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvgate/kvgate/pkg/chat/internal/pyfloat"
	"github.com/kvgate/kvgate/pkg/openai"
)

// xmlCall builds the JSON arguments of one XML-format call (qwen3_coder) from its parameters,
// converting each value by the type its tool schema gives it, as vLLM's _convert_param_value
// does (qwen3coder_tool_parser.py):
//   - a parameter the schema does not list, or one whose schema has no "type" (nor "anyOf":
//     the first non-null type of it), is a string;
//   - a schema that admits null ("type": "null" or a null in anyOf) makes "null"/"none" (any
//     case) null; so does any non-string type;
//   - string, str, text, varchar, char, enum: the text as a JSON string;
//   - int*, uint*, long*, short*, unsigned*: Python's int() of the text, else the string;
//   - num*, float*: Python's float(), written as an int when it has no fraction, else the string;
//   - boolean, bool, binary: true when the text is "true" in any case, else false;
//   - object, array, arr, dict*, list*: the text as JSON (json.loads, re-written as json.dumps
//     does), else the string;
//   - any other type: the text as a JSON value other than a bare true/false/null (vLLM:
//     ast.literal_eval, which reads Python literals), else the string.
//
// A string value is streamed as it arrives (one trailing "\n" held back); other values are held
// until they end, at most MaxCallBytes, and one longer than that is sent as a string.
//
// glm45 / glm47 (glm bool) read values as vLLM's Glm4MoeModelToolParser does instead: a
// parameter whose schema "type" is exactly "string" is the text as it is, streamed; any other
// is json.loads of the stripped text (vLLM then tries ast.literal_eval), else that stripped
// text as a string.
//
// seed_oss (seed bool) uses qwen3_coder's rules as its older copy in
// vllm/tool_parsers/seed_oss_tool_parser.py has them: "null" (any case, not "none") is null
// for every parameter, listed or not; "anyOf" is not read; only object and dict* are read as
// JSON containers, arrays fall to the literal reading.
type xmlCall struct {
	glm     bool
	seed    bool
	props   map[string]json.RawMessage // the function's schema properties (nil: none)
	pname   []byte
	nameCut bool
	class   valueClass
	null    bool // the schema admits null
	atStart bool
	stream  bool   // the value is being sent as a JSON string
	value   []byte // held value text (typed) or undecided tail (streaming)
	nparams int
}

type valueClass uint8

const (
	vString valueClass = iota
	vInt
	vFloat
	vBool
	vContainer
	vOther
	vAny // glm: any JSON value, else the string
)

func (x *xmlCall) held() int { return len(x.pname) + len(x.value) }

// begin starts the call of function name, whose schema is looked up in tools.
func (x *xmlCall) begin(tools []openai.ChatTool, name string) {
	x.props, x.nparams = nil, 0
	for _, tl := range tools {
		if tl.Name == name && len(tl.Parameters) > 0 {
			var s struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			if json.Unmarshal(tl.Parameters, &s) == nil {
				x.props = s.Properties
			}
			break
		}
	}
}

func (x *xmlCall) addName(b []byte, limit int) {
	if n := min(len(b), limit-len(x.pname)); n > 0 {
		x.pname = append(x.pname, b[:n]...)
	}
}

// startValue resolves the type of parameter pname.
func (x *xmlCall) startValue() {
	x.class, x.null = vString, false
	raw, ok := x.props[string(x.pname)]
	switch {
	case x.glm:
		x.class = vAny
		var s struct {
			Type json.RawMessage `json:"type"`
		}
		if ok && json.Unmarshal(raw, &s) == nil && string(s.Type) == `"string"` {
			x.class = vString
		}
	case ok && x.seed:
		var s map[string]json.RawMessage
		if json.Unmarshal(raw, &s) == nil && s["type"] != nil {
			x.class = classOfName(pyStr(s["type"]))
			if x.class == vContainer && !strings.HasPrefix(pyStr(s["type"]), "dict") && pyStr(s["type"]) != "object" {
				x.class = vOther
			}
		}
	case ok:
		x.class, x.null = classOf(raw)
	}
	x.atStart, x.stream, x.value = true, false, x.value[:0]
}

// classOf is the type of a parameter schema, as _convert_param_value reads it.
func classOf(raw json.RawMessage) (valueClass, bool) {
	var s map[string]json.RawMessage
	if json.Unmarshal(raw, &s) != nil {
		return vString, false
	}
	if t, ok := s["type"]; ok {
		name := pyStr(t)
		return classOfName(name), name == "null"
	}
	var any []map[string]json.RawMessage
	if a, ok := s["anyOf"]; !ok || json.Unmarshal(a, &any) != nil {
		return vString, false
	}
	class, picked, null := vString, false, false
	for _, o := range any {
		t, ok := o["type"]
		if !ok {
			continue
		}
		switch name := pyStr(t); {
		case name == "null":
			null = true
		case !picked:
			class, picked = classOfName(name), true
		}
	}
	return class, null
}

// pyStr is str(value).strip().lower() for a schema's type: a JSON string's text, else a
// marker no type name matches (a list's str() starts with "[").
func pyStr(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "["
	}
	return strings.ToLower(strings.TrimSpace(s))
}

func classOfName(t string) valueClass {
	hasPrefix := func(ps ...string) bool {
		for _, p := range ps {
			if strings.HasPrefix(t, p) {
				return true
			}
		}
		return false
	}
	switch {
	case t == "string" || t == "str" || t == "text" || t == "varchar" || t == "char" || t == "enum":
		return vString
	case hasPrefix("int", "uint", "long", "short", "unsigned"):
		return vInt
	case hasPrefix("num", "float"):
		return vFloat
	case t == "boolean" || t == "bool" || t == "binary":
		return vBool
	case t == "object" || t == "array" || t == "arr" || hasPrefix("dict", "list"):
		return vContainer
	}
	return vOther
}

// addValue takes more text of the current value.
func (x *xmlCall) addValue(e *emitter, idx int, b []byte, limit int) {
	x.value = append(x.value, b...)
	if !x.stream && (x.class == vString && !x.null && !x.seed || len(x.value) > limit) {
		x.stream = true
		x.key(e, idx)
		e.addArgs(idx, []byte{'"'})
	}
	if x.stream {
		x.flush(e, idx, false)
	}
}

// key sends the separator and the key of the current parameter.
func (x *xmlCall) key(e *emitter, idx int) {
	buf := make([]byte, 0, len(x.pname)+8)
	if x.nparams == 0 {
		buf = append(buf, '{')
	} else {
		buf = append(buf, ", "...)
	}
	x.nparams++
	buf = appendPyString(buf, x.pname)
	e.addArgs(idx, append(buf, ": "...))
}

// flush sends the decided part of a streamed string value: all but a trailing "\n" and an
// incomplete UTF-8 sequence, or all of it (less a final "\n") at the value's end.
func (x *xmlCall) flush(e *emitter, idx int, end bool) {
	v := x.value
	keep := 0
	switch {
	case end && x.glm:
	case end:
		if len(v) > 0 && v[len(v)-1] == '\n' {
			v = v[:len(v)-1]
		}
	default:
		for i := len(v) - 1; i >= 0 && i >= len(v)-(utf8.UTFMax-1); i-- {
			if utf8.RuneStart(v[i]) {
				if !utf8.FullRune(v[i:]) {
					keep = len(v) - i
				}
				break
			}
		}
		if keep == 0 && len(v) > 0 && v[len(v)-1] == '\n' && !x.glm {
			keep = 1
		}
		v = v[:len(v)-keep]
	}
	if len(v) > 0 {
		e.addArgs(idx, appendPyStringBody(nil, v))
	}
	n := copy(x.value, x.value[len(x.value)-keep:])
	x.value = x.value[:n]
}

// endValue ends the current parameter and sends what is left of it.
func (x *xmlCall) endValue(e *emitter, idx int) {
	if x.stream {
		x.flush(e, idx, true)
		e.addArgs(idx, []byte{'"'})
		return
	}
	v := x.value
	x.key(e, idx)
	if x.glm {
		sv := strings.TrimSpace(string(v))
		out, ok := jsonValue(nil, sv, false)
		if !ok {
			out = appendPyString(nil, []byte(sv))
		}
		e.addArgs(idx, out)
		return
	}
	if len(v) > 0 && v[len(v)-1] == '\n' {
		v = v[:len(v)-1]
	}
	if x.seed && strings.ToLower(string(v)) == "null" {
		e.addArgs(idx, []byte("null"))
		return
	}
	e.addArgs(idx, convertValue(nil, string(v), x.class, x.null))
}

// closeCall sends the end of the arguments object.
func (x *xmlCall) closeCall(e *emitter, idx int) {
	if x.nparams == 0 {
		e.addArgs(idx, []byte("{}"))
	} else {
		e.addArgs(idx, []byte{'}'})
	}
	x.nparams = 0
	x.value = x.value[:0]
}

// convertValue appends the JSON of a held value of class c (see xmlCall).
func convertValue(dst []byte, v string, c valueClass, null bool) []byte {
	low := strings.ToLower(v)
	if (null || c != vString) && (low == "null" || low == "none") {
		return append(dst, "null"...)
	}
	switch c {
	case vInt:
		if s, ok := pyInt(v); ok {
			return append(dst, s...)
		}
	case vFloat:
		if out, ok := pyFloatValue(dst, v); ok {
			return out
		}
	case vBool:
		if low == "true" {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case vContainer, vOther:
		if out, ok := jsonValue(dst, v, c == vOther); ok {
			return out
		}
	}
	return appendPyString(dst, []byte(v))
}

// pyInt is Python's int() of a string: surrounding whitespace, a sign, digits with single "_"
// between them; written without leading zeros.
func pyInt(v string) (string, bool) {
	s := strings.TrimSpace(v)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	digits, ok := pyDigits(s)
	if !ok || len(digits) > maxPyIntDigits {
		return "", false
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", true
	}
	if neg {
		return "-" + digits, true
	}
	return digits, true
}

// pyDigits removes the "_" separators of a run of ASCII digits, as Python's literals allow
// them: one between two digits.
func pyDigits(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			b.WriteByte(c)
		case c == '_' && i > 0 && i+1 < len(s) && isDigit(s[i-1]) && isDigit(s[i+1]):
		default:
			return "", false
		}
	}
	return b.String(), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// pyFloatValue is vLLM's float conversion: float(text), written as an int when it has no
// fraction, else as Python's repr. Infinities and NaN are left as strings (vLLM's int() of them
// raises).
func pyFloatValue(dst []byte, v string) ([]byte, bool) {
	f, ok := pyFloat(v)
	if !ok {
		return nil, false
	}
	if f == math.Trunc(f) {
		i, _ := new(big.Float).SetFloat64(f).Int(nil)
		return i.Append(dst, 10), true
	}
	return pyfloat.Append(dst, f), true
}

// pyFloat is Python's float() of a string, for finite values only.
func pyFloat(v string) (float64, bool) {
	s := strings.TrimSpace(v)
	if strings.ContainsAny(s, "xXpP") {
		return 0, false // Go reads hex floats, Python's float() does not
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' {
			if i == 0 || i+1 == len(s) || !isDigit(s[i-1]) || !isDigit(s[i+1]) {
				return 0, false
			}
			continue
		}
		b.WriteByte(c)
	}
	f, err := strconv.ParseFloat(b.String(), 64)
	if err != nil && !isRangeErr(err) || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// jsonValue re-writes v as json.dumps(json.loads(v)) would; bare reports whether a top-level
// true, false or null is refused (ast.literal_eval does not read them).
func jsonValue(dst []byte, v string, bare bool) ([]byte, bool) {
	s := strings.Trim(v, " \t\r\n")
	if bare && (s == "true" || s == "false" || s == "null") {
		return nil, false
	}
	m := jsonMachine{limit: len(v) + 1}
	m.reset()
	n, ev := m.feed([]byte(s))
	if ev == jMore && n == len(s) && m.end() {
		ev = jDone
	} else if ev == jDone && n != len(s) {
		return nil, false
	}
	if ev != jDone {
		return nil, false
	}
	return append(dst, m.out...), true
}

// appendPyString appends s as a JSON string, as json.dumps(s, ensure_ascii=False) writes it.
func appendPyString(dst, s []byte) []byte {
	dst = append(dst, '"')
	return append(appendPyStringBody(dst, s), '"')
}

// appendPyStringBody is appendPyString without the quotes; invalid UTF-8 is written as U+FFFD,
// as the detokenizer decodes it.
func appendPyStringBody(dst, s []byte) []byte {
	m := jsonMachine{out: dst}
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		m.emitRune(r)
		s = s[n:]
	}
	return m.out
}
