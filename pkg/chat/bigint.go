package chat

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/ardanlabs/jinja"
)

// Python's int has no bound; the library's values hold int64 only. An integer beyond int64 in
// a request's JSON (a tool schema's "maximum": 18446744073709551615, a tool call's argument)
// is kept exactly as a value the library carries without looking inside: a callable whose
// name is bigIntPrefix and the decimal digits. The library passes callables through
// variables, loops, attribute and item access, filters' arguments and default(), and never
// calls one unless a template calls it. Everything that looks at a number is ours already
// (the print filter, |string, ~, + - %, tojson, repr, %-formatting, the number tests) and
// reads the digits back here; the library's own operators (* / // ** < > == in) would treat
// the value as a callable, which is the one place left to the rewrite of rewriteBigOps.
//
// A value of int64 range is always a plain int (newBigInt), so the library's hot paths
// never see this form unless a request holds a big integer.
const bigIntPrefix = "\x00int:"

// maxIntDigits is CPython's default int_max_str_digits (3.11+): printing an int of more
// digits raises ValueError, as json.dumps, str() and repr() of it do in the engine.
const maxIntDigits = 4300

// bigIntsMade counts the big integers made by newBigInt, so a render of the plain variant
// can tell that it made one and must be rendered again with the big variant (render.go).
var bigIntsMade atomic.Uint64

// newBigInt returns x as a template value: a plain int when it fits int64.
func newBigInt(x *big.Int) jinja.Value {
	if x.IsInt64() {
		return jinja.NewInt(x.Int64())
	}
	bigIntsMade.Add(1)
	return jinja.NewCallable(bigIntPrefix+x.String(), callBigInt)
}

func callBigInt([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return jinja.Undefined(), errors.New("TypeError: 'int' object is not callable")
}

// bigIntText returns the decimal digits (with a leading '-' when negative) of a big integer
// value, and false for any other value.
func bigIntText(v jinja.Value) (string, bool) {
	if !v.IsCallable() {
		return "", false
	}
	return strings.CutPrefix(v.AsCallable().Name, bigIntPrefix)
}

func isBigInt(v jinja.Value) bool {
	_, ok := bigIntText(v)
	return ok
}

// isPyInt reports whether v is a Python int: an int, a bool or a big integer.
func isPyInt(v jinja.Value) bool { return isIntLike(v) || isBigInt(v) }

// isPyNumber reports whether v is a Python int or float (bool included).
func isPyNumber(v jinja.Value) bool { return isNumeric(v) || isBigInt(v) }

// bigOf returns an int, bool or big integer as a *big.Int (false for any other value).
func bigOf(v jinja.Value) (*big.Int, bool) {
	if isIntLike(v) {
		return big.NewInt(asInt(v)), true
	}
	s, ok := bigIntText(v)
	if !ok {
		return nil, false
	}
	x, ok := new(big.Int).SetString(s, 10)
	return x, ok
}

// bigIntString is str() of a big integer, with CPython's limit on the digits it prints.
func bigIntString(digits string) (string, error) {
	if n := len(strings.TrimPrefix(digits, "-")); n > maxIntDigits {
		return "", fmt.Errorf("ValueError: Exceeds the limit (%d digits) for integer string conversion; use sys.set_int_max_str_digits() to increase the limit", maxIntDigits)
	}
	return digits, nil
}

// bigToFloat is Python's float(int): the nearest float, OverflowError beyond its range.
func bigToFloat(x *big.Int) (float64, error) {
	f, _ := new(big.Float).SetInt(x).Float64()
	if math.IsInf(f, 0) {
		return 0, errors.New("OverflowError: int too large to convert to float")
	}
	return f, nil
}

// pyFloatOf is float(v) of a Python number.
func pyFloatOf(v jinja.Value) (float64, error) {
	if x, ok := bigOf(v); ok && !isIntLike(v) {
		return bigToFloat(x)
	}
	return asFloat(v), nil
}

// bigIntResult returns an arithmetic result, refusing one too large for Python to print
// (bounding the time and memory of ** and * chains as well).
func bigIntResult(x *big.Int) (jinja.Value, error) {
	if x.BitLen() > maxIntDigits*10/3 { // more than about maxIntDigits digits
		return jinja.Undefined(), fmt.Errorf("ValueError: an integer result of more than %d digits", maxIntDigits)
	}
	return newBigInt(x), nil
}

// bigArith is Python's a op b for + - * // % where one operand is a big integer and both are
// Python numbers; ok is false when it does not apply.
func bigArith(op string, a, b jinja.Value) (v jinja.Value, ok bool, err error) {
	if !isBigInt(a) && !isBigInt(b) || !isPyNumber(a) || !isPyNumber(b) {
		return jinja.Undefined(), false, nil
	}
	if a.IsFloat() || b.IsFloat() {
		x, err := pyFloatOf(a)
		if err != nil {
			return jinja.Undefined(), true, err
		}
		y, err := pyFloatOf(b)
		if err != nil {
			return jinja.Undefined(), true, err
		}
		switch op {
		case "+":
			return jinja.NewFloat(x + y), true, nil
		case "-":
			return jinja.NewFloat(x - y), true, nil
		}
		return jinja.Undefined(), false, nil
	}
	x, _ := bigOf(a)
	y, _ := bigOf(b)
	switch op {
	case "+":
		v, err = bigIntResult(x.Add(x, y))
	case "-":
		v, err = bigIntResult(x.Sub(x, y))
	case "%":
		if y.Sign() == 0 {
			return jinja.Undefined(), true, errors.New("ZeroDivisionError: integer modulo by zero")
		}
		// Python's % takes the divisor's sign: floor division's remainder.
		m := new(big.Int)
		new(big.Int).DivMod(x, y, m) // Euclidean: m >= 0
		if m.Sign() != 0 && y.Sign() < 0 {
			m.Add(m, y)
		}
		v, err = bigIntResult(m)
	default:
		return jinja.Undefined(), false, nil
	}
	return v, true, err
}

// bigPercentDigits is a %d/%i/%u/%o/%x/%X conversion of a big integer: its sign and the
// digits of its magnitude in the conversion's base.
func bigPercentDigits(x *big.Int, conv byte) (neg bool, digits string) {
	base := 10
	switch conv {
	case 'o':
		base = 8
	case 'x', 'X':
		base = 16
	}
	return x.Sign() < 0, new(big.Int).Abs(x).Text(base)
}

// bigLiteralName is the render variable rewriteIntLiterals calls for an integer literal
// beyond int64 in a template's source, which the library refuses to compile.
const bigLiteralName = "__kvgate_bigint"

// intLiteral is Jinja2's integer_re: binary, octal, hex (any case) and decimal literals,
// with '_' between digits; a decimal has no leading zero but for zero itself.
var intLiteral = regexp.MustCompile(`(?i)^(0b(_?[01])+|0o(_?[0-7])+|0x(_?[0-9a-f])+|[1-9](_?[0-9])*|0(_?0)*)$`)

// rewriteIntLiterals gives the library the integer literals Jinja2 reads and it does not:
// one beyond int64 becomes __kvgate_bigint('digits'), a call of bigLiteral, and a literal
// with '_' or a base prefix that fits int64 its decimal digits.
func rewriteIntLiterals(src string) string {
	var edits []opEdit
	ok := scanTags(src, func(_ bool, toks []token) {
		for _, t := range toks {
			if t.kind != tkNumber || !intLiteral.MatchString(t.val) {
				continue
			}
			x, ok := pyParseInt(t.val, 0)
			if !ok {
				continue
			}
			text := x.String()
			if !x.IsInt64() {
				text = bigLiteralName + "('" + text + "')"
			}
			if text != t.val {
				edits = append(edits, opEdit{pos: t.pos, n: len(t.val), text: text})
			}
		}
	})
	if !ok || len(edits) == 0 {
		return src
	}
	var b strings.Builder
	last := 0
	for _, e := range edits {
		b.WriteString(src[last:e.pos])
		b.WriteString(e.text)
		last = e.pos + e.n
	}
	b.WriteString(src[last:])
	return b.String()
}

// bigLiteral is the value of a big integer literal: its digits, made a big integer.
func bigLiteral(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 1 && args[0].IsString() {
		if x, ok := new(big.Int).SetString(args[0].AsString(), 10); ok {
			return newBigInt(x), nil
		}
	}
	return jinja.Undefined(), errors.New("integer literal: malformed")
}
