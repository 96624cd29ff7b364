package anthropic

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A tool_use block's input reaches the chat template as the tool call's arguments string, so
// its spelling is part of the prompt. vLLM's Anthropic serving writes it with Python's
// json.dumps(block.input) (serving.py, _convert_tool_use_block) after the body was decoded
// into Python values: separators ", " and ": ", every non-ASCII character as a \uXXXX escape
// (ensure_ascii, the default), numbers as Python prints the int or float they decoded to, and
// a member repeated in an object kept at its first position with its last value (a dict).
// appendPyJSON writes that spelling of a valid JSON value, working on the client's bytes so
// that nothing (a lone surrogate escape, a 40-digit integer) is lost on the way through Go
// values.

// pyNode is a decoded JSON value: raw is a scalar's bytes; an object's members are keys and
// vals (keys the raw string literals, in first-seen order).
type pyNode struct {
	raw        []byte
	array      bool
	object     bool
	keys, vals []pyNode
}

// appendPyJSON appends json.dumps(json.loads(v)) for a valid JSON value v; ok is false when v
// is not valid JSON.
func appendPyJSON(dst, v []byte) ([]byte, bool) {
	if !json.Valid(v) {
		return dst, false
	}
	p := pyParser{b: v}
	n := p.value()
	return n.appendTo(dst), true
}

// pyParser reads a value already known to be valid JSON.
type pyParser struct {
	b []byte
	i int
}

func (p *pyParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *pyParser) value() pyNode {
	p.space()
	switch p.b[p.i] {
	case '{':
		p.i++
		n := pyNode{object: true}
		var index map[string]int // decoded name → position, for repeated members
		for {
			p.space()
			if p.b[p.i] == '}' {
				p.i++
				return n
			}
			if p.b[p.i] == ',' {
				p.i++
				p.space()
			}
			key := p.str()
			p.space()
			p.i++ // ':'
			val := p.value()
			p.space()
			name := keyName(key.raw)
			if index == nil {
				index = map[string]int{}
			}
			if at, dup := index[name]; dup {
				n.vals[at] = val
			} else {
				index[name] = len(n.keys)
				n.keys, n.vals = append(n.keys, key), append(n.vals, val)
			}
		}
	case '[':
		p.i++
		n := pyNode{array: true}
		for {
			p.space()
			if p.b[p.i] == ']' {
				p.i++
				return n
			}
			if p.b[p.i] == ',' {
				p.i++
			}
			n.vals = append(n.vals, p.value())
		}
	case '"':
		return p.str()
	}
	start := p.i
	for p.i < len(p.b) && !strings.ContainsRune(" \t\n\r,]}", rune(p.b[p.i])) {
		p.i++
	}
	return pyNode{raw: p.b[start:p.i]}
}

// keyName is the decoded text of a member's name literal, which two spellings of the same
// name share.
func keyName(lit []byte) string {
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1])
	}
	var name string
	_ = json.Unmarshal(lit, &name)
	return name
}

// str reads a string literal.
func (p *pyParser) str() pyNode {
	start := p.i
	p.i++
	for p.b[p.i] != '"' {
		if p.b[p.i] == '\\' {
			p.i++
		}
		p.i++
	}
	p.i++
	return pyNode{raw: p.b[start:p.i]}
}

func (n *pyNode) appendTo(dst []byte) []byte {
	switch {
	case n.object:
		dst = append(dst, '{')
		for i := range n.keys {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendPyString(dst, n.keys[i].raw)
			dst = append(dst, ": "...)
			dst = n.vals[i].appendTo(dst)
		}
		return append(dst, '}')
	case n.array:
		dst = append(dst, '[')
		for i := range n.vals {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = n.vals[i].appendTo(dst)
		}
		return append(dst, ']')
	case n.raw[0] == '"':
		return appendPyString(dst, n.raw)
	case n.raw[0] == '-' || n.raw[0] >= '0' && n.raw[0] <= '9':
		return appendPyNumber(dst, n.raw)
	}
	return append(dst, n.raw...) // true, false, null
}

// appendPyString rewrites a string literal as ensure_ascii writes it: \" \\ \n \r \t \b \f
// stay, \/ becomes /, printable ASCII is itself, everything else a lowercase \uXXXX (a
// surrogate pair above U+FFFF). A \u escape in the input stands for one UTF-16 code unit,
// which is written back as the same escape: that keeps a lone surrogate as Python keeps it.
func appendPyString(dst, lit []byte) []byte {
	dst = append(dst, '"')
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			e := s[i+1]
			switch e {
			case 'u':
				u, _ := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
				dst = appendU(dst, rune(u))
				i += 6
				continue
			case '/':
				dst = append(dst, '/')
			default:
				dst = append(dst, '\\', e)
			}
			i += 2
		case c >= 0x20 && c < 0x7f:
			dst = append(dst, c)
			i++
		case c < 0x80:
			dst = appendU(dst, rune(c))
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r > 0xFFFF {
				r -= 0x10000
				dst = appendU(dst, 0xD800+(r>>10))
				dst = appendU(dst, 0xDC00+(r&0x3FF))
			} else {
				dst = appendU(dst, r)
			}
			i += size
		}
	}
	return append(dst, '"')
}

// appendU appends a \uXXXX escape of one UTF-16 code unit, as Python writes it (lowercase)
// or the short escape Python uses for it.
func appendU(dst []byte, u rune) []byte {
	switch u {
	case '"':
		return append(dst, `\"`...)
	case '\\':
		return append(dst, `\\`...)
	case '\n':
		return append(dst, `\n`...)
	case '\r':
		return append(dst, `\r`...)
	case '\t':
		return append(dst, `\t`...)
	case '\b':
		return append(dst, `\b`...)
	case '\f':
		return append(dst, `\f`...)
	}
	if u >= 0x20 && u < 0x7f {
		return append(dst, byte(u))
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', hex[u>>12&0xF], hex[u>>8&0xF], hex[u>>4&0xF], hex[u&0xF])
}

// appendPyNumber writes a number as Python prints what json.loads made of it: an integer
// literal is an int, printed with the same digits (-0 is 0); any other literal is a float,
// printed as repr prints it.
func appendPyNumber(dst, lit []byte) []byte {
	if !strings.ContainsAny(string(lit), ".eE") {
		if string(lit) == "-0" {
			return append(dst, '0')
		}
		return append(dst, lit...)
	}
	f, _ := strconv.ParseFloat(string(lit), 64) // ±Inf when out of range, as float() gives
	return appendPyFloat(dst, f)
}

// appendPyFloat writes float repr: the shortest digits that round-trip, positional when the
// decimal exponent is in [-4, 16), with ".0" when integral, else d.ddde±XX; json.dumps writes
// the infinities as Infinity and -Infinity.
func appendPyFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	}
	e := strconv.AppendFloat(nil, f, 'e', -1, 64) // [-]d[.ddd]e±XX
	neg := e[0] == '-'
	if neg {
		e = e[1:]
		dst = append(dst, '-')
	}
	mant, exps, _ := strings.Cut(string(e), "e")
	exp, _ := strconv.Atoi(exps)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1 // the point's position in 0.digits × 10^decpt
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			dst = append(dst, "0."...)
			dst = append(dst, strings.Repeat("0", -decpt)...)
			return append(dst, digits...)
		case decpt >= len(digits):
			dst = append(dst, digits...)
			dst = append(dst, strings.Repeat("0", decpt-len(digits))...)
			return append(dst, ".0"...)
		default:
			dst = append(dst, digits[:decpt]...)
			dst = append(dst, '.')
			return append(dst, digits[decpt:]...)
		}
	}
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(dst, '.')
		dst = append(dst, digits[1:]...)
	}
	dst = append(dst, 'e')
	if exp < 0 {
		dst = append(dst, '-')
		exp = -exp
	} else {
		dst = append(dst, '+')
	}
	if exp < 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, int64(exp), 10)
}
