package main

// An order-preserving generic JSON value with Python json.loads semantics:
// objects keep document key order (a repeated key keeps its first position and takes
// the last value), numbers keep their source text (int when it has no '.', 'e', 'E').

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

type kind int

const (
	jNull kind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
)

type J struct {
	K    kind
	B    bool
	S    string // string value, or number source text
	Arr  []*J
	Keys []string
	Vals map[string]*J
}

func jstr(s string) *J { return &J{K: jStr, S: s} }
func jbool(b bool) *J  { return &J{K: jBool, B: b} }
func jnull() *J        { return &J{K: jNull} }
func jarr(xs ...*J) *J { return &J{K: jArr, Arr: append([]*J{}, xs...)} }
func jobj() *J         { return &J{K: jObj, Vals: map[string]*J{}} }
func (o *J) set(k string, v *J) *J {
	if _, ok := o.Vals[k]; !ok {
		o.Keys = append(o.Keys, k)
	}
	o.Vals[k] = v
	return o
}
func (o *J) del(k string) {
	if _, ok := o.Vals[k]; !ok {
		return
	}
	delete(o.Vals, k)
	for i, x := range o.Keys {
		if x == k {
			o.Keys = append(o.Keys[:i:i], o.Keys[i+1:]...)
			break
		}
	}
}

// get is Python's dict.get: nil when the key is missing (or o is not an object).
func (o *J) get(k string) *J {
	if o == nil || o.K != jObj {
		return nil
	}
	return o.Vals[k]
}

// isNone: missing or JSON null.
func isNone(v *J) bool { return v == nil || v.K == jNull }

// truthy is Python truthiness.
func truthy(v *J) bool {
	if v == nil {
		return false
	}
	switch v.K {
	case jNull:
		return false
	case jBool:
		return v.B
	case jNum:
		f, _ := strconv.ParseFloat(v.S, 64)
		return f != 0
	case jStr:
		return v.S != ""
	case jArr:
		return len(v.Arr) > 0
	case jObj:
		return len(v.Keys) > 0
	}
	return false
}

func (v *J) isInt() bool {
	return v.K == jNum && !strings.ContainsAny(v.S, ".eE") && !isSpecialFloat(v.S)
}
func isSpecialFloat(s string) bool {
	return s == "NaN" || s == "Infinity" || s == "-Infinity"
}
func (v *J) float() float64 {
	switch v.S {
	case "NaN":
		return math.NaN()
	case "Infinity":
		return math.Inf(1)
	case "-Infinity":
		return math.Inf(-1)
	}
	f, _ := strconv.ParseFloat(v.S, 64)
	return f
}

func (v *J) clone() *J {
	if v == nil {
		return nil
	}
	c := *v
	if v.Arr != nil {
		c.Arr = make([]*J, len(v.Arr))
		for i, x := range v.Arr {
			c.Arr[i] = x.clone()
		}
	}
	if v.K == jObj {
		c.Keys = append([]string{}, v.Keys...)
		c.Vals = make(map[string]*J, len(v.Vals))
		for k, x := range v.Vals {
			c.Vals[k] = x.clone()
		}
	}
	return &c
}

// ---- decoding ----

var errBad = errors.New("invalid JSON")

type dec struct {
	b     []byte
	i     int
	loose bool // NaN, Infinity, -Infinity (json.loads accepts them)
}

func parseJSON(b []byte, loose bool) (*J, error) {
	d := dec{b: b, loose: loose}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.ws()
	if d.i != len(d.b) {
		return nil, errBad
	}
	return v, nil
}

func (d *dec) ws() {
	for d.i < len(d.b) && strings.IndexByte(" \t\n\r", d.b[d.i]) >= 0 {
		d.i++
	}
}

func (d *dec) value() (*J, error) {
	d.ws()
	if d.i >= len(d.b) {
		return nil, errBad
	}
	c := d.b[d.i]
	switch {
	case c == '{':
		d.i++
		o := jobj()
		d.ws()
		if d.i < len(d.b) && d.b[d.i] == '}' {
			d.i++
			return o, nil
		}
		for {
			d.ws()
			if d.i >= len(d.b) || d.b[d.i] != '"' {
				return nil, errBad
			}
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			d.ws()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return nil, errBad
			}
			d.i++
			v, err := d.value()
			if err != nil {
				return nil, err
			}
			o.set(k, v)
			d.ws()
			if d.i >= len(d.b) {
				return nil, errBad
			}
			if d.b[d.i] == '}' {
				d.i++
				return o, nil
			}
			if d.b[d.i] != ',' {
				return nil, errBad
			}
			d.i++
		}
	case c == '[':
		d.i++
		a := jarr()
		d.ws()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return a, nil
		}
		for {
			v, err := d.value()
			if err != nil {
				return nil, err
			}
			a.Arr = append(a.Arr, v)
			d.ws()
			if d.i >= len(d.b) {
				return nil, errBad
			}
			if d.b[d.i] == ']' {
				d.i++
				return a, nil
			}
			if d.b[d.i] != ',' {
				return nil, errBad
			}
			d.i++
		}
	case c == '"':
		s, err := d.str()
		return jstr(s), err
	case bytes.HasPrefix(d.b[d.i:], []byte("true")):
		d.i += 4
		return jbool(true), nil
	case bytes.HasPrefix(d.b[d.i:], []byte("false")):
		d.i += 5
		return jbool(false), nil
	case bytes.HasPrefix(d.b[d.i:], []byte("null")):
		d.i += 4
		return jnull(), nil
	}
	if d.loose {
		for _, lit := range []string{"NaN", "Infinity", "-Infinity"} {
			if bytes.HasPrefix(d.b[d.i:], []byte(lit)) {
				d.i += len(lit)
				return &J{K: jNum, S: lit}, nil
			}
		}
	}
	if c == '-' || c >= '0' && c <= '9' {
		start := d.i
		for d.i < len(d.b) && strings.IndexByte("+-0123456789.eE", d.b[d.i]) >= 0 {
			d.i++
		}
		s := string(d.b[start:d.i])
		var probe json.Number
		if json.Unmarshal([]byte(s), &probe) != nil {
			return nil, errBad
		}
		return &J{K: jNum, S: s}, nil
	}
	return nil, errBad
}

func (d *dec) str() (string, error) {
	start := d.i
	for d.i++; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			var s string
			if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
				return "", errBad
			}
			return s, nil
		case c == '\\':
			d.i++
		case c < 0x20:
			return "", errBad
		}
	}
	return "", errBad
}

// ---- encoding (for the variable dump) ----

func (v *J) encode(b *strings.Builder) {
	switch v.K {
	case jNull:
		b.WriteString("null")
	case jBool:
		b.WriteString(strconv.FormatBool(v.B))
	case jNum:
		b.WriteString(v.S)
	case jStr:
		x, _ := json.Marshal(v.S)
		b.Write(x)
	case jArr:
		b.WriteByte('[')
		for i, x := range v.Arr {
			if i > 0 {
				b.WriteByte(',')
			}
			x.encode(b)
		}
		b.WriteByte(']')
	case jObj:
		b.WriteByte('{')
		for i, k := range v.Keys {
			if i > 0 {
				b.WriteByte(',')
			}
			x, _ := json.Marshal(k)
			b.Write(x)
			b.WriteByte(':')
			v.Vals[k].encode(b)
		}
		b.WriteByte('}')
	}
}
