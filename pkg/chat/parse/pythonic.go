package parse

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvgate/kvgate/pkg/chat/internal/pyfloat"
)

// pythonic / llama4_pythonic: calls written as a Python list of calls,
// vllm/tool_parsers/pythonic_tool_parser.py and llama4_pythonic_tool_parser.py.
//
//	[get_weather(city="Paris", days=3), f()]                      (pythonic)
//	<|python_start|>[get_weather(city="Paris")]<|python_end|>      (llama4_pythonic; the tags optional)
//
// The output is calls only when it starts with "[" (llama4_pythonic: or "<|python_start|>"),
// vLLM's streaming rule; then the whole output is held (at most MaxCallBytes, a longer one is
// content) and read at its end, as vLLM's non-streaming path does with ast.parse: a list of
// calls NAME(KEY=VALUE, ...) whose values are Python literals (strings, numbers, True, False,
// None, lists, dicts). The arguments are json.dumps of the keywords, ensure_ascii=False. Output
// that is not such a list (surrounding whitespace and the llama4 tags aside) is content, whole.

const (
	pyStart = "<|python_start|>"
	pyEnd   = "<|python_end|>"
)

const (
	pyFirst    uint8 = iota
	pyHold           // the output may be calls: held until its end
	pyContents       // all content
)

func (t *toolStage) stepPythonic(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case pyFirst:
		if b[0] == '[' {
			t.st = pyHold
			return 0
		}
		if t.llama4 {
			switch markerAt(b, pyStart) {
			case fullMatch:
				t.st = pyHold
				return 0
			case partMatch:
				if !eof {
					return 0
				}
			}
		}
		t.st = pyContents
		return 0
	case pyHold:
		if n := t.capRegion(len(b)); n < len(b) {
			return t.headerToContent(e, pyContents)
		}
		t.region = append(t.region, b...)
		return len(b)
	}
	e.addContent(b)
	return len(b)
}

// finishPythonic reads the held output at the end: its calls, or all of it as content.
func (t *toolStage) finishPythonic(e *emitter) {
	if t.st != pyHold {
		return
	}
	s := strings.TrimSpace(string(t.region))
	if t.llama4 {
		s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(s, pyStart), pyEnd))
	}
	p := pyParser{s: s}
	calls, ok := p.callList()
	if !ok {
		t.headerToContent(e, pyContents)
		return
	}
	for _, c := range calls {
		e.addArgs(e.startCall(c.name), c.args)
	}
	t.region = t.region[:0]
}

// pyParser reads the Python subset vLLM's pythonic parser accepts.
type pyParser struct {
	s     string
	i     int
	depth int
}

type pyCall struct {
	name string
	args []byte
}

func (p *pyParser) ws() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *pyParser) eat(c byte) bool {
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// callList reads "[call, ...]" covering the whole text.
func (p *pyParser) callList() ([]pyCall, bool) {
	if !p.eat('[') {
		return nil, false
	}
	var calls []pyCall
	for {
		if p.eat(']') && len(calls) > 0 {
			p.ws()
			return calls, p.i == len(p.s)
		}
		c, ok := p.call()
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
		if !p.eat(',') {
			if !p.eat(']') {
				return nil, false
			}
			p.ws()
			return calls, p.i == len(p.s)
		}
	}
}

func (p *pyParser) ident() (string, bool) {
	p.ws()
	j := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (p.i > j && c >= '0' && c <= '9') {
			p.i++
			continue
		}
		break
	}
	return p.s[j:p.i], p.i > j
}

// call reads NAME(KEY=VALUE, ...) into its json.dumps arguments.
func (p *pyParser) call() (pyCall, bool) {
	name, ok := p.ident()
	if !ok || !p.eat('(') {
		return pyCall{}, false
	}
	var keys []string
	vals := map[string][]byte{}
	for !p.eat(')') {
		if len(keys) > 0 && !p.eat(',') {
			return pyCall{}, false
		}
		if p.eat(')') {
			break
		}
		k, ok := p.ident()
		if !ok || !p.eat('=') {
			return pyCall{}, false
		}
		v, ok := p.value(nil)
		if !ok {
			return pyCall{}, false
		}
		if _, dup := vals[k]; !dup {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	args := []byte{'{'}
	for n, k := range keys {
		if n > 0 {
			args = append(args, ", "...)
		}
		args = append(appendPyString(args, []byte(k)), ": "...)
		args = append(args, vals[k]...)
	}
	return pyCall{name: name, args: append(args, '}')}, true
}

// value appends the JSON of one literal.
func (p *pyParser) value(dst []byte) ([]byte, bool) {
	p.ws()
	if p.i >= len(p.s) || p.depth > maxJSONDepth {
		return nil, false
	}
	switch c := p.s[p.i]; {
	case c == '"' || c == '\'':
		s, ok := p.str()
		return appendPyString(dst, []byte(s)), ok
	case c == '[':
		return p.container(dst, '[', ']', false)
	case c == '{':
		return p.container(dst, '{', '}', true)
	case c == '-' || c == '.' || c >= '0' && c <= '9':
		return p.number(dst)
	}
	id, _ := p.ident()
	switch id {
	case "True":
		return append(dst, "true"...), true
	case "False":
		return append(dst, "false"...), true
	case "None":
		return append(dst, "null"...), true
	}
	return nil, false
}

// container reads a list or a dict (keys: strings, numbers, True/False/None, written as
// json.dumps writes such keys).
func (p *pyParser) container(dst []byte, open, close byte, dict bool) ([]byte, bool) {
	p.i++
	p.depth++
	defer func() { p.depth-- }()
	dst = append(dst, open)
	for n := 0; ; n++ {
		if p.eat(close) {
			return append(dst, close), true
		}
		if n > 0 {
			if !p.eat(',') {
				return nil, false
			}
			if p.eat(close) {
				return append(dst, close), true
			}
			dst = append(dst, ", "...)
		}
		if dict {
			k, ok := p.value(nil)
			if !ok || len(k) == 0 || k[0] == '[' || k[0] == '{' || !p.eat(':') {
				return nil, false
			}
			if k[0] != '"' {
				k = appendPyString(nil, k)
			}
			dst = append(append(dst, k...), ": "...)
		}
		var ok bool
		if dst, ok = p.value(dst); !ok {
			return nil, false
		}
	}
}

// number reads an int or a float literal (a leading "-" taken as the literal's sign).
func (p *pyParser) number(dst []byte) ([]byte, bool) {
	j := p.i
	if p.s[p.i] == '-' {
		p.i++
		p.ws()
	}
	k := p.i
	for p.i < len(p.s) && strings.IndexByte("0123456789_.eE+-", p.s[p.i]) >= 0 {
		if (p.s[p.i] == '+' || p.s[p.i] == '-') && p.s[p.i-1] != 'e' && p.s[p.i-1] != 'E' {
			break
		}
		p.i++
	}
	lit := p.s[k:p.i]
	neg := p.s[j] == '-'
	if !strings.ContainsAny(lit, ".eE") {
		if len(lit) > 1 && lit[0] == '0' && strings.Trim(lit, "0_") != "" {
			return nil, false // Python 3 has no leading zeros
		}
		s, ok := pyInt(lit)
		if !ok {
			return nil, false
		}
		if neg && s != "0" {
			s = "-" + s
		}
		return append(dst, s...), true
	}
	digits, ok := pyDigitsFloat(lit)
	if !ok {
		return nil, false
	}
	f, err := strconv.ParseFloat(digits, 64)
	if err != nil && !isRangeErr(err) {
		return nil, false
	}
	if neg {
		f = -f
	}
	return pyfloat.Append(dst, f), true
}

// pyDigitsFloat removes the "_" separators of a float literal (one between digits).
func pyDigitsFloat(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' {
			if i == 0 || i+1 == len(s) || !isDigit(s[i-1]) || !isDigit(s[i+1]) {
				return "", false
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

// str reads a quoted string literal with Python's escapes (no prefixes, no triple quotes).
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), true
		case c == '\n':
			return "", false
		case c != '\\':
			b.WriteByte(c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if p.i+n > len(p.s) {
				return "", false
			}
			r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
			if err != nil || r > utf8.MaxRune {
				return "", false
			}
			b.WriteRune(rune(r))
			p.i += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", false
}
