package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"slices"
	"strconv"
	"sync"

	"github.com/ardanlabs/jinja"
)

// JSON values that reach templates (tool schemas, tool-call arguments, template kwargs,
// documents) are decoded here, straight from the request's raw bytes into template values,
// with Python's json.loads rules: objects keep their key order (a repeated key keeps its
// first position and takes the last value), a number without '.', 'e' or 'E' is an int and
// every other number a float.
//
// An integer outside int64 is kept exact, as Python keeps it, in bigint.go's form.

var errBadJSON = errors.New("invalid JSON")

// decodeJSON decodes one raw JSON value (which must be valid) into a template value.
func decodeJSON(b []byte) (jinja.Value, error) {
	v, _, err := decodeJSONBig(b)
	return v, err
}

// decodeJSONBig is decodeJSON that also reports whether the value holds an integer beyond
// int64 (a request that renders with a template's big variant, bigeq.go).
func decodeJSONBig(b []byte) (jinja.Value, bool, error) {
	d := decoderPool.Get().(*jsonDecoder)
	defer d.release()
	d.b = b
	v, err := d.value()
	if err != nil {
		return jinja.Undefined(), false, err
	}
	if d.skip(); d.i != len(d.b) {
		return jinja.Undefined(), false, errBadJSON
	}
	return v, d.big, nil
}

// jsonDecoder decodes JSON text; with loose set it also accepts NaN, Infinity and
// -Infinity, as Python's json.loads does (tool-call arguments are json.loads'ed). Members and
// items are gathered on its stacks and each container is made once at its exact size.
type jsonDecoder struct {
	b     []byte
	i     int
	loose bool // accept NaN, Infinity, -Infinity (json.loads does)
	big   bool // an integer beyond int64 was decoded
	keys  []string
	vals  []jinja.Value // object member values, then array items, of the open containers
}

var decoderPool = sync.Pool{New: func() any { return new(jsonDecoder) }}

// release returns d to the pool, unless a huge value left it with large stacks.
func (d *jsonDecoder) release() {
	if cap(d.vals) > 4096 || cap(d.keys) > 4096 {
		return
	}
	clear(d.vals[:cap(d.vals)]) // drop the references
	*d = jsonDecoder{keys: d.keys[:0], vals: d.vals[:0]}
	decoderPool.Put(d)
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
		d.skip()
		if d.i < len(d.b) && d.b[d.i] == '}' {
			d.i++
			return jinja.NewDict(), nil
		}
		kbase, vbase := len(d.keys), len(d.vals)
		for {
			d.skip()
			if d.i >= len(d.b) || d.b[d.i] != '"' {
				return jinja.Undefined(), errBadJSON
			}
			_, k, err := d.strValue()
			if err != nil {
				return jinja.Undefined(), err
			}
			d.skip()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return jinja.Undefined(), errBadJSON
			}
			d.i++
			x, err := d.value()
			if err != nil {
				return jinja.Undefined(), err
			}
			d.keys = append(d.keys, k)
			d.vals = append(d.vals, x)
			d.skip()
			if d.i >= len(d.b) {
				return jinja.Undefined(), errBadJSON
			}
			if d.b[d.i] == '}' {
				d.i++
				return d.popDict(kbase, vbase), nil
			}
			if d.b[d.i] != ',' {
				return jinja.Undefined(), errBadJSON
			}
			d.i++
		}
	case c == '[':
		d.i++
		d.skip()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return jinja.NewList([]jinja.Value{}), nil
		}
		base := len(d.vals)
		for {
			x, err := d.value()
			if err != nil {
				return jinja.Undefined(), err
			}
			d.vals = append(d.vals, x)
			d.skip()
			if d.i >= len(d.b) {
				return jinja.Undefined(), errBadJSON
			}
			if d.b[d.i] == ']' {
				d.i++
				items := slices.Clone(d.vals[base:])
				clear(d.vals[base:])
				d.vals = d.vals[:base]
				return jinja.NewList(items), nil
			}
			if d.b[d.i] != ',' {
				return jinja.Undefined(), errBadJSON
			}
			d.i++
		}
	case c == '"':
		v, s, err := d.strValue()
		if err != nil || v.IsString() {
			return v, err
		}
		return jinja.NewString(s), nil
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

// popDict makes the dict of the members on the stacks from kbase and vbase on and takes them
// off. A repeated key keeps its first position and takes the last value, as in Python.
func (d *jsonDecoder) popDict(kbase, vbase int) jinja.Value {
	v := jinja.NewDict()
	dict := v.AsDict()
	dict.Keys = make([]string, 0, len(d.keys)-kbase)
	for i, k := range d.keys[kbase:] {
		dict.Set(k, d.vals[vbase+i])
	}
	clear(d.vals[vbase:])
	d.keys, d.vals = d.keys[:kbase], d.vals[:vbase]
	return v
}

// commonValues are strings that recur in tool schemas and conversations, as template values
// made once: decoding one of them allocates nothing. String values are immutable, so they
// are shared by every render.
var commonValues = func() map[string]jinja.Value {
	m := map[string]jinja.Value{}
	for _, s := range []string{
		"type", "function", "name", "description", "parameters", "properties", "required",
		"object", "string", "integer", "number", "boolean", "array", "null", "items", "enum",
		"default", "minimum", "maximum", "format", "title", "additionalProperties", "anyOf",
		"oneOf", "allOf", "const", "pattern", "minLength", "maxLength", "minItems", "maxItems",
		"examples", "strict", "arguments", "id", "content", "role", "text", "user", "assistant",
		"system", "tool", "developer", "query", "path", "url", "value", "key", "data", "input",
		"location", "city", "unit", "celsius", "fahrenheit", "date", "time", "limit", "filters",
		"tags", "options", "mode", "command", "file", "code", "language",
	} {
		m[s] = jinja.NewString(s)
	}
	return m
}()

func (d *jsonDecoder) lit(s string, v jinja.Value) (jinja.Value, error) {
	if !bytes.HasPrefix(d.b[d.i:], []byte(s)) {
		return jinja.Undefined(), errBadJSON
	}
	d.i += len(s)
	return v, nil
}

// strValue decodes the string at d.i: a common one as its shared value (and its text),
// any other as text only (v undefined).
func (d *jsonDecoder) strValue() (v jinja.Value, s string, err error) {
	start := d.i
	for d.i++; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			raw := d.b[start+1 : d.i]
			d.i++
			if v, ok := commonValues[string(raw)]; ok {
				return v, v.AsString(), nil
			}
			return jinja.Undefined(), string(raw), nil
		case c == '\\' || c < 0x20:
			d.i = start
			s, err := d.str()
			return jinja.Undefined(), s, err
		}
	}
	return jinja.Undefined(), "", errBadJSON
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
		if x, ok := new(big.Int).SetString(s, 10); ok {
			d.big = true
			return newBigInt(x), nil // beyond int64: exact, as Python keeps it
		}
		return jinja.Undefined(), errBadJSON
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
	v, _ := loadsArgumentsBig(raw)
	return v
}

// loadsArgumentsBig is loadsArguments that also reports an integer beyond int64.
func loadsArgumentsBig(raw []byte) (jinja.Value, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return jinja.NewDict(), false
	}
	switch raw[0] {
	case '{', '[':
		if v, big, err := decodeJSONBig(raw); err == nil {
			return v, big
		}
		return jinja.NewDict(), false
	case '"':
		text := raw[1 : len(raw)-1]
		if bytes.IndexByte(raw, '\\') >= 0 {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return jinja.NewDict(), false
			}
			text = []byte(s)
		}
		d := decoderPool.Get().(*jsonDecoder)
		defer d.release()
		d.b, d.loose = text, true
		v, err := d.value()
		if err != nil {
			return jinja.NewDict(), false
		}
		if d.skip(); d.i != len(d.b) {
			return jinja.NewDict(), false
		}
		return v, d.big
	}
	return jinja.NewDict(), false
}
