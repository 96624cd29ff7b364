package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Python's printf-style string formatting (str % args), for the % operator of a string and
// Jinja2's |format filter (soft_str(value) % (kwargs or args)). The library formats the %
// operator with Go's fmt.Sprintf (a list prints as "&{[1 2] %!s(bool=false)}", None as
// "%!s(<nil>)") and has no format filter at all.
//
// pyPercent follows CPython's PyUnicode_Format for the conversions s r a d i u o x X e E f F
// g G c and %, the flags # 0 - + and space, width and precision (also *), %(key) lookups in a
// dict, and its errors. args is the tuple of arguments; mapping is the single argument when
// it is not a tuple (a dict or list passes CPython's mapping check, which excuses unused
// arguments).

// pyPercent formats format with args. single is the argument when it was not a tuple (then
// args is [single]).
func pyPercent(format string, args []jinja.Value, single *jinja.Value) (string, error) {
	var b strings.Builder
	b.Grow(len(format) + 16)
	argi := 0
	next := func() (jinja.Value, error) {
		if argi >= len(args) {
			return jinja.Value{}, fmt.Errorf("TypeError: not enough arguments for format string")
		}
		argi++
		return args[argi-1], nil
	}
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			b.WriteByte(format[i])
			continue
		}
		sp, end, err := parsePercentSpec(format, i+1, single, next)
		if err != nil {
			return "", err
		}
		i = end
		if sp.conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !sp.haveArg {
			if sp.arg, err = next(); err != nil {
				return "", err
			}
		}
		sign, body, err := sp.convert()
		if err != nil {
			return "", err
		}
		sp.pad(&b, sign, body)
	}
	// CPython excuses unused arguments of a mapping (a dict, or a list, which passes its
	// mapping check).
	if mapping := single != nil && (single.IsDict() || single.IsList()); argi < len(args) && !mapping {
		return "", fmt.Errorf("TypeError: not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// percentSpec is one conversion of a printf-style format.
type percentSpec struct {
	arg                          jinja.Value
	haveArg                      bool // from a %(key)
	left, zero, alt, plus, space bool
	width, prec                  int
	hasPrec                      bool
	conv                         byte
	at                           int  // offset of conv in the format
	numeric                      bool // set by convert
}

// parsePercentSpec reads the conversion after a '%' at i and returns it with the offset of
// its conversion character; * widths and precisions take their argument from next.
func parsePercentSpec(format string, i int, single *jinja.Value, next func() (jinja.Value, error)) (percentSpec, int, error) {
	var sp percentSpec
	if i >= len(format) {
		return sp, 0, fmt.Errorf("ValueError: incomplete format")
	}
	if format[i] == '(' {
		depth, j := 1, i+1
		for ; j < len(format) && depth > 0; j++ {
			switch format[j] {
			case '(':
				depth++
			case ')':
				depth--
			}
		}
		if depth > 0 {
			return sp, 0, fmt.Errorf("ValueError: incomplete format key")
		}
		key := format[i+1 : j-1]
		switch {
		case single != nil && single.IsList():
			return sp, 0, fmt.Errorf("TypeError: list indices must be integers or slices, not str")
		case single == nil || !single.IsDict():
			return sp, 0, fmt.Errorf("TypeError: format requires a mapping")
		}
		v, ok := single.AsDict().Get(key)
		if !ok {
			return sp, 0, fmt.Errorf("KeyError: %s", reprOf(jinja.NewString(key)))
		}
		sp.arg, sp.haveArg = v, true
		i = j
	}
flags:
	for ; i < len(format); i++ {
		switch format[i] {
		case '-':
			sp.left = true
		case '0':
			sp.zero = true
		case '#':
			sp.alt = true
		case '+':
			sp.plus = true
		case ' ':
			sp.space = true
		default:
			break flags
		}
	}
	number := func() (int, error) {
		if i < len(format) && format[i] == '*' {
			i++
			v, err := next()
			if err != nil {
				return 0, err
			}
			if !isIntLike(v) {
				return 0, fmt.Errorf("TypeError: * wants int")
			}
			return int(asInt(v)), nil
		}
		n := 0
		for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
			if n = n*10 + int(format[i]-'0'); n > 1<<20 {
				return 0, fmt.Errorf("ValueError: width too big")
			}
		}
		return n, nil
	}
	var err error
	if sp.width, err = number(); err != nil {
		return sp, 0, err
	}
	if sp.width < 0 {
		sp.left, sp.width = true, -sp.width
	}
	sp.prec = -1
	if i < len(format) && format[i] == '.' {
		i++
		if sp.prec, err = number(); err != nil {
			return sp, 0, err
		}
		sp.hasPrec, sp.prec = true, max(sp.prec, 0)
	}
	for i < len(format) && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L') {
		i++
	}
	if i >= len(format) {
		return sp, 0, fmt.Errorf("ValueError: incomplete format")
	}
	sp.conv, sp.at = format[i], i
	return sp, i, nil
}

// convert formats the argument of sp without padding: its sign and digits (or text).
func (sp *percentSpec) convert() (sign, body string, err error) {
	arg := sp.arg
	switch sp.conv {
	case 's', 'r', 'a':
		switch sp.conv {
		case 's':
			body = pyStr(arg)
		case 'r':
			body = reprOf(arg)
		default:
			body = asciiOf(reprOf(arg))
		}
		if sp.hasPrec && utf8.RuneCountInString(body) > sp.prec {
			body = string([]rune(body)[:sp.prec])
		}
	case 'd', 'i', 'u', 'o', 'x', 'X':
		if x, ok := bigOf(arg); ok && isBigInt(arg) {
			neg, digits := bigPercentDigits(x, sp.conv)
			if neg {
				sign = "-"
			}
			body = sp.prefixed(digits)
			break
		}
		n, err := formatInt(arg, sp.conv)
		if err != nil {
			return "", "", err
		}
		if n < 0 {
			sign = "-"
		}
		body = sp.intDigits(n)
	case 'e', 'E', 'f', 'F', 'g', 'G':
		if !isPyNumber(arg) {
			return "", "", fmt.Errorf("TypeError: must be real number, not %s", pyTypeNameOf(arg))
		}
		f, err := pyFloatOf(arg)
		if err != nil {
			return "", "", err
		}
		if math.Signbit(f) && !math.IsNaN(f) {
			sign, f = "-", -f
		}
		prec := sp.prec
		if !sp.hasPrec {
			prec = 6
		}
		body = formatFloat(f, sp.conv, prec, sp.alt)
	case 'c':
		switch {
		case arg.IsString() && utf8.RuneCountInString(arg.AsString()) == 1:
			body = arg.AsString()
		case isBigInt(arg):
			return "", "", fmt.Errorf("OverflowError: %%c arg not in range(0x110000)")
		case isIntLike(arg):
			n := asInt(arg)
			if n < 0 || n > 0x10ffff {
				return "", "", fmt.Errorf("OverflowError: %%c arg not in range(0x110000)")
			}
			body = string(rune(n))
		default:
			return "", "", fmt.Errorf("TypeError: %%c requires int or char")
		}
		return "", body, nil
	default:
		return "", "", fmt.Errorf("ValueError: unsupported format character '%c' (0x%x) at index %d", sp.conv, sp.conv, sp.at)
	}
	sp.numeric = sp.conv != 's' && sp.conv != 'r' && sp.conv != 'a'
	if sp.numeric && sign == "" {
		if sp.plus {
			sign = "+"
		} else if sp.space {
			sign = " "
		}
	}
	return sign, body, nil
}

// intDigits writes |n| in sp's base with the # prefix, padded with zeros to the precision
// after the prefix, as Python does.
func (sp *percentSpec) intDigits(n int64) string {
	u := uint64(n)
	if n < 0 {
		u = uint64(-n) // MinInt64 wraps to itself, whose uint64 is its magnitude
	}
	var digits string
	switch sp.conv {
	case 'o':
		digits = strconv.FormatUint(u, 8)
	case 'x', 'X':
		digits = strconv.FormatUint(u, 16)
	default:
		digits = strconv.FormatUint(u, 10)
	}
	return sp.prefixed(digits)
}

// prefixed pads an integer's digits with zeros to the precision and adds the # prefix.
func (sp *percentSpec) prefixed(digits string) string {
	var prefix string
	if sp.alt {
		switch sp.conv {
		case 'o':
			prefix = "0o"
		case 'x', 'X':
			prefix = "0x"
		}
	}
	for sp.hasPrec && len(digits) < sp.prec {
		digits = "0" + digits
	}
	if sp.conv == 'X' {
		return strings.ToUpper(prefix + digits)
	}
	return prefix + digits
}

// pad writes sign and body to the width of sp: left-justified with "-", zero-filled after
// the sign (and a 0x/0o prefix) with "0" for numbers, else right-justified.
func (sp *percentSpec) pad(b *strings.Builder, sign, body string) {
	n := utf8.RuneCountInString(sign) + utf8.RuneCountInString(body)
	switch {
	case n >= sp.width:
		b.WriteString(sign)
		b.WriteString(body)
	case sp.left:
		b.WriteString(sign)
		b.WriteString(body)
		b.WriteString(strings.Repeat(" ", sp.width-n))
	case sp.zero && sp.numeric:
		b.WriteString(sign)
		zeros := strings.Repeat("0", sp.width-n)
		if sp.alt && len(body) > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X' || body[1] == 'o') {
			b.WriteString(body[:2])
			b.WriteString(zeros)
			b.WriteString(body[2:])
		} else {
			b.WriteString(zeros)
			b.WriteString(body)
		}
	default:
		b.WriteString(strings.Repeat(" ", sp.width-n))
		b.WriteString(sign)
		b.WriteString(body)
	}
}

// formatInt is the integer a %d/%x/%o conversion of v formats (Python: int(v) for d i u,
// an integer only for o x X).
func formatInt(v jinja.Value, conv byte) (int64, error) {
	switch {
	case isIntLike(v):
		return asInt(v), nil
	case v.IsFloat() && (conv == 'd' || conv == 'i' || conv == 'u'):
		f := v.AsFloat()
		switch {
		case math.IsNaN(f):
			return 0, fmt.Errorf("ValueError: cannot convert float NaN to integer")
		case math.IsInf(f, 0):
			return 0, fmt.Errorf("OverflowError: cannot convert float infinity to integer")
		case f >= 0x1p63 || f < -0x1p63:
			return 0, fmt.Errorf("the integer of %s is beyond int64", pyStr(v))
		}
		return int64(f), nil
	case conv == 'd' || conv == 'i' || conv == 'u':
		return 0, fmt.Errorf("TypeError: %%%c format: a real number is required, not %s", conv, pyTypeNameOf(v))
	}
	return 0, fmt.Errorf("TypeError: %%%c format: an integer is required, not %s", conv, pyTypeNameOf(v))
}

// formatFloat formats a non-negative f (or NaN) as C's printf does with conv and prec.
func formatFloat(f float64, conv byte, prec int, alt bool) string {
	upper := conv == 'E' || conv == 'F' || conv == 'G'
	var s string
	switch {
	case math.IsNaN(f):
		s = "nan"
	case math.IsInf(f, 0):
		s = "inf"
	case conv == 'f' || conv == 'F':
		s = strconv.FormatFloat(f, 'f', prec, 64)
		if alt && prec == 0 {
			s += "."
		}
	case conv == 'e' || conv == 'E':
		s = strconv.FormatFloat(f, 'e', prec, 64)
		if alt && prec == 0 {
			s = strings.Replace(s, "e", ".e", 1)
		}
	default: // g: precision 0 is 1; exponent form when exp < -4 or exp >= prec
		if prec == 0 {
			prec = 1
		}
		exp := 0
		if f != 0 {
			// The exponent after rounding to prec significant digits.
			e := strconv.FormatFloat(f, 'e', prec-1, 64)
			exp, _ = strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
		}
		if exp < -4 || exp >= prec {
			s = strconv.FormatFloat(f, 'e', prec-1, 64)
			if !alt {
				mant, e, _ := strings.Cut(s, "e")
				if strings.Contains(mant, ".") {
					mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
				}
				s = mant + "e" + e
			}
		} else {
			s = strconv.FormatFloat(f, 'f', prec-1-exp, 64)
			if !alt && strings.Contains(s, ".") {
				s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
			}
		}
	}
	if upper {
		s = strings.ToUpper(s)
	}
	return s
}

// reprOf is Python's repr of a value.
func reprOf(v jinja.Value) string {
	var b strings.Builder
	writeRepr(&b, v, nil)
	return b.String()
}

// asciiOf is Python's ascii() of a repr: non-ASCII characters escaped.
func asciiOf(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}

// percentArgs splits the right operand of % into the arguments: a tuple's items, else the
// value itself.
func percentArgs(v jinja.Value) ([]jinja.Value, *jinja.Value) {
	if v.IsList() && isTuple(v) {
		return v.AsList().Items, nil
	}
	return []jinja.Value{v}, &v
}

// modFilter is Python's a % b: string formatting for a string, else the numbers' modulo.
func modFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("%", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsUndefined() || b.IsUndefined() && !a.IsString() {
		return jinja.Undefined(), errUndefined("%")
	}
	if a.IsString() {
		items, single := percentArgs(b)
		s, err := pyPercent(a.AsString(), items, single)
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	}
	if v, ok, err := bigArith("%", a, b); ok {
		return v, err
	}
	if (isBigInt(a) || isBigInt(b)) && isPyNumber(a) && isPyNumber(b) { // a big int and a float
		x, err := pyFloatOf(a)
		if err != nil {
			return jinja.Undefined(), err
		}
		y, err := pyFloatOf(b)
		if err != nil {
			return jinja.Undefined(), err
		}
		return floatMod(x, y)
	}
	if !isNumeric(a) || !isNumeric(b) {
		return jinja.Undefined(), fmt.Errorf("TypeError: unsupported operand type(s) for %%: '%s' and '%s'", pyTypeNameOf(a), pyTypeNameOf(b))
	}
	if a.IsFloat() || b.IsFloat() {
		return floatMod(asFloat(a), asFloat(b))
	}
	x, y := asInt(a), asInt(b)
	if y == 0 {
		return jinja.Undefined(), fmt.Errorf("ZeroDivisionError: integer modulo by zero")
	}
	if y == -1 {
		return jinja.NewInt(0), nil // also MinInt64 % -1, which Go's % panics on
	}
	m := x % y
	if m != 0 && (m < 0) != (y < 0) {
		m += y
	}
	return jinja.NewInt(m), nil
}

// floatMod is Python's float x % y: the result takes the divisor's sign.
func floatMod(x, y float64) (jinja.Value, error) {
	if y == 0 {
		return jinja.Undefined(), fmt.Errorf("ZeroDivisionError: float modulo")
	}
	m := math.Mod(x, y)
	if m != 0 && (m < 0) != (y < 0) {
		m += y
	} else if m == 0 {
		m = math.Copysign(0, y)
	}
	return jinja.NewFloat(m), nil
}

// formatFilterName is Jinja2's |format (the library has none), renamed like trim.
const formatFilterName = "__kvgate_format"

func rewriteFormat(src string) string { return renameFilter(src, "format", formatFilterName) }

// formatFilter is Jinja2's do_format: soft_str(value) % (kwargs or args).
func formatFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("TypeError: do_format() missing 1 required positional argument: 'value'")
	}
	if len(args) > 1 && len(kwargs) > 0 {
		return jinja.Undefined(), fmt.Errorf("FilterArgumentError: can't handle positional and keyword arguments at the same time")
	}
	var s string
	var err error
	if len(kwargs) > 0 {
		// The library gives keyword arguments unordered; they are used by key, and a
		// %s of the whole mapping prints them sorted (Python: in call order).
		keys := make([]string, 0, len(kwargs))
		for k := range kwargs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			d.AsDict().Set(k, kwargs[k])
		}
		s, err = pyPercent(softStr(args[0]), []jinja.Value{d}, &d)
	} else {
		s, err = pyPercent(softStr(args[0]), args[1:], nil)
	}
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(s), nil
}
