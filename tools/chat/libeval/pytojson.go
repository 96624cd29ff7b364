package main

// Supplementary variant only (not part of "as shipped"): gonja with its tojson replaced by
// transformers' json.dumps(ensure_ascii=False, indent, sort_keys) — to measure how much of
// gonja's mismatch is tojson formatting vs the key order its Go maps cannot keep.

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expS, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expS)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out = fmt.Sprintf("%se%s%02d", m, sign, exp)
	} else if exp < 0 {
		out = "0." + strings.Repeat("0", -exp-1) + digits
	} else if len(digits) <= exp+1 {
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	} else {
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		out = "-" + out
	}
	return out
}

func pyJSONString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func pyDumps(b *bytes.Buffer, v any, indent int, sortKeys bool, level int) {
	nl := func(l int) {
		if indent >= 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*l))
		}
	}
	itemSep := ", "
	if indent >= 0 {
		itemSep = ","
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(pyFloat(x))
	case string:
		pyJSONString(b, x)
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(level + 1)
			pyDumps(b, e, indent, sortKeys, level+1)
		}
		nl(level)
		b.WriteByte(']')
	case map[string]any:
		if len(x) == 0 {
			b.WriteString("{}")
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// a Go map has no order: sorted (what gonja's own iteration also does, case-insensitively)
		sort.Slice(keys, func(i, j int) bool {
			if !sortKeys && strings.ToLower(keys[i]) != strings.ToLower(keys[j]) {
				return strings.ToLower(keys[i]) < strings.ToLower(keys[j])
			}
			return keys[i] < keys[j]
		})
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(level + 1)
			pyJSONString(b, k)
			b.WriteString(": ")
			pyDumps(b, x[k], indent, sortKeys, level+1)
		}
		nl(level)
		b.WriteByte('}')
	default:
		fmt.Fprintf(b, "%q", fmt.Sprint(x))
	}
}

func pyToJSONFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	indent := -1
	if v, ok := params.KwArgs["indent"]; ok && !v.IsNil() {
		indent = v.Integer()
	}
	sortKeys := false
	if v, ok := params.KwArgs["sort_keys"]; ok {
		sortKeys = v.IsTrue()
	}
	var b bytes.Buffer
	pyDumps(&b, in.ToGoSimpleType(false), indent, sortKeys, 0)
	return exec.AsSafeValue(b.String())
}

var gonjaPyEnv = func() *exec.Environment {
	fs := exec.NewFilterSet(map[string]exec.FilterFunction{})
	fs.Update(builtins.Filters)
	if err := fs.Replace("tojson", pyToJSONFilter); err != nil {
		panic(err)
	}
	env := *gonjaEnv
	env.Filters = fs
	return &env
}()

func compileGonjaPy(src string) (renderer, error) { return compileGonjaEnv(src, gonjaPyEnv) }
