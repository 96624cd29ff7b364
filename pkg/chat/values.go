package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// JSON values that reach templates (tool schemas, tool-call arguments, template kwargs,
// documents) are decoded here, straight from the request's raw bytes into template values,
// with Python's json.loads rules: objects keep their key order (a repeated key keeps its
// first position and takes the last value), a number without '.', 'e' or 'E' is an int and
// every other number a float.
//
// One rule cannot be kept: the library's values have no arbitrary-precision integer, so an
// integer outside int64 becomes the nearest float (Python keeps it exact). Such numbers in
// tool schemas are the one known value divergence (the tools-bigint golden case).

var errBadJSON = errors.New("invalid JSON")

// decodeJSON decodes one raw JSON value (which must be valid) into a template value.
func decodeJSON(b []byte) (jinja.Value, error) {
	d := jsonDecoder{b: b}
	v, err := d.value()
	if err != nil {
		return jinja.Undefined(), err
	}
	if d.skip(); d.i != len(d.b) {
		return jinja.Undefined(), errBadJSON
	}
	return v, nil
}

// jsonDecoder decodes JSON text; with loose set it also accepts NaN, Infinity and
// -Infinity, as Python's json.loads does (tool-call arguments are json.loads'ed).
type jsonDecoder struct {
	b     []byte
	i     int
	loose bool // accept NaN, Infinity, -Infinity (json.loads does)
}

func (d *jsonDecoder) skip() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

func (d *jsonDecoder) value() (jinja.Value, error) {
	d.skip()
	if d.i >= len(d.b) {
		return jinja.Undefined(), errBadJSON
	}
	switch c := d.b[d.i]; {
	case c == '{':
		d.i++
		v := jinja.NewDict()
		dict := v.AsDict()
		d.skip()
		if d.i < len(d.b) && d.b[d.i] == '}' {
			d.i++
			return v, nil
		}
		for {
			d.skip()
			if d.i >= len(d.b) || d.b[d.i] != '"' {
				return v, errBadJSON
			}
			k, err := d.str()
			if err != nil {
				return v, err
			}
			d.skip()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return v, errBadJSON
			}
			d.i++
			x, err := d.value()
			if err != nil {
				return v, err
			}
			dict.Set(k, x)
			d.skip()
			if d.i >= len(d.b) {
				return v, errBadJSON
			}
			if d.b[d.i] == '}' {
				d.i++
				return v, nil
			}
			if d.b[d.i] != ',' {
				return v, errBadJSON
			}
			d.i++
		}
	case c == '[':
		d.i++
		var items []jinja.Value
		d.skip()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return jinja.NewList([]jinja.Value{}), nil
		}
		for {
			x, err := d.value()
			if err != nil {
				return jinja.Undefined(), err
			}
			items = append(items, x)
			d.skip()
			if d.i >= len(d.b) {
				return jinja.Undefined(), errBadJSON
			}
			if d.b[d.i] == ']' {
				d.i++
				return jinja.NewList(items), nil
			}
			if d.b[d.i] != ',' {
				return jinja.Undefined(), errBadJSON
			}
			d.i++
		}
	case c == '"':
		s, err := d.str()
		return jinja.NewString(s), err
	case c == 't':
		return d.lit("true", jinja.NewBool(true))
	case c == 'f':
		return d.lit("false", jinja.NewBool(false))
	case c == 'n':
		return d.lit("null", jinja.None())
	case c == 'N' && d.loose:
		return d.lit("NaN", jinja.NewFloat(math.NaN()))
	case c == 'I' && d.loose:
		return d.lit("Infinity", jinja.NewFloat(math.Inf(1)))
	case c == '-' && d.loose && bytes.HasPrefix(d.b[d.i:], []byte("-Infinity")):
		return d.lit("-Infinity", jinja.NewFloat(math.Inf(-1)))
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return jinja.Undefined(), errBadJSON
}

func (d *jsonDecoder) lit(s string, v jinja.Value) (jinja.Value, error) {
	if !bytes.HasPrefix(d.b[d.i:], []byte(s)) {
		return jinja.Undefined(), errBadJSON
	}
	d.i += len(s)
	return v, nil
}

func (d *jsonDecoder) str() (string, error) {
	start := d.i
	esc := false
	for d.i++; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			if !esc {
				return string(d.b[start+1 : d.i-1]), nil
			}
			var s string
			if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
				return "", errBadJSON
			}
			return s, nil
		case c == '\\':
			esc = true
			d.i++
		case c < 0x20:
			return "", errBadJSON
		}
	}
	return "", errBadJSON
}

func (d *jsonDecoder) number() (jinja.Value, error) {
	start := d.i
	isFloat := false
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c >= '0' && c <= '9':
		case c == '.' || c == 'e' || c == 'E':
			isFloat = true
		case (c == '+' || c == '-') && (d.b[d.i-1] == 'e' || d.b[d.i-1] == 'E'):
		default:
			goto done
		}
		d.i++
	}
done:
	s := string(d.b[start:d.i])
	if d.i == digits || d.b[digits] == '0' && d.i > digits+1 && d.b[digits+1] >= '0' && d.b[digits+1] <= '9' {
		return jinja.Undefined(), errBadJSON
	}
	if !isFloat {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(n), nil
		}
		// Beyond int64: Python keeps the int exactly; the library cannot (see above).
	}
	f, err := strconv.ParseFloat(s, 64)
	var ne *strconv.NumError
	if err != nil && !(errors.As(err, &ne) && ne.Err == strconv.ErrRange) {
		return jinja.Undefined(), errBadJSON
	}
	return jinja.NewFloat(f), nil // out of range: ±Inf, as Python's float() gives
}

// loadsArguments is vLLM's tool-call arguments rule (§3): a JSON string is json.loads'ed
// (any JSON value; invalid text, "" and whitespace become {}), a JSON object or list is
// kept, anything else (null, numbers, bools) becomes {}.
func loadsArguments(raw []byte) jinja.Value {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return jinja.NewDict()
	}
	switch raw[0] {
	case '{', '[':
		if v, err := decodeJSON(raw); err == nil {
			return v
		}
		return jinja.NewDict()
	case '"':
		var text string
		if bytes.IndexByte(raw, '\\') < 0 {
			text = string(raw[1 : len(raw)-1])
		} else if json.Unmarshal(raw, &text) != nil {
			return jinja.NewDict()
		}
		d := jsonDecoder{b: []byte(text), loose: true}
		v, err := d.value()
		if err != nil {
			return jinja.NewDict()
		}
		if d.skip(); d.i != len(d.b) {
			return jinja.NewDict()
		}
		return v
	}
	return jinja.NewDict()
}

// ---- Python string helpers ----

// pyIsSpace is Python's str.isspace for one code point: Unicode White_Space plus the
// separators U+001C–U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyStrip is Python's str.strip() without arguments.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pyRStrip is Python's str.rstrip() without arguments.
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }
