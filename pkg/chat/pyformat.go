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
	mapping := single != nil && (single.IsDict() || single.IsList())
	next := func() (jinja.Value, error) {
		if argi >= len(args) {
			return jinja.Value{}, fmt.Errorf("TypeError: not enough arguments for format string")
		}
		argi++
		return args[argi-1], nil
	}
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", fmt.Errorf("ValueError: incomplete format")
		}
		var arg jinja.Value
		haveArg := false
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
				return "", fmt.Errorf("ValueError: incomplete format key")
			}
			key := format[i+1 : j-1]
			if single == nil || !single.IsDict() {
				if single != nil && single.IsList() {
					return "", fmt.Errorf("TypeError: list indices must be integers or slices, not str")
				}
				return "", fmt.Errorf("TypeError: format requires a mapping")
			}
			v, ok := single.AsDict().Get(key)
			if !ok {
				return "", fmt.Errorf("KeyError: %s", reprOf(jinja.NewString(key)))
			}
			arg, haveArg = v, true
			i = j
		}
		var left, zero, alt, plus, space bool
	flags:
		for ; i < len(format); i++ {
			switch format[i] {
			case '-':
				left = true
			case '0':
				zero = true
			case '#':
				alt = true
			case '+':
				plus = true
			case ' ':
				space = true
			default:
				break flags
			}
		}
		number := func() (int, bool, error) {
			if i < len(format) && format[i] == '*' {
				i++
				v, err := next()
				if err != nil {
					return 0, false, err
				}
				if !isIntLike(v) {
					return 0, false, fmt.Errorf("TypeError: * wants int")
				}
				return int(asInt(v)), true, nil
			}
			n, any := 0, false
			for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
				n, any = n*10+int(format[i]-'0'), true
				if n > 1<<20 {
					return 0, false, fmt.Errorf("ValueError: width too big")
				}
			}
			return n, any, nil
		}
		width, _, err := number()
		if err != nil {
			return "", err
		}
		if width < 0 {
			left, width = true, -width
		}
		prec, hasPrec := -1, false
		if i < len(format) && format[i] == '.' {
			i++
			if prec, _, err = number(); err != nil {
				return "", err
			}
			hasPrec = true
			if prec < 0 {
				prec = 0
			}
		}
		for i < len(format) && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L') {
			i++
		}
		if i >= len(format) {
			return "", fmt.Errorf("ValueError: incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveArg {
			if arg, err = next(); err != nil {
				return "", err
			}
		}
		var body, sign string
		numeric := false
		switch conv {
		case 's', 'r', 'a':
			switch conv {
			case 's':
				body = pyStr(arg)
			case 'r':
				body = reprOf(arg)
			default:
				body = asciiOf(reprOf(arg))
			}
			if hasPrec && utf8.RuneCountInString(body) > prec {
				body = string([]rune(body)[:prec])
			}
		case 'd', 'i', 'u', 'o', 'x', 'X':
			n, err := formatInt(arg, conv)
			if err != nil {
				return "", err
			}
			numeric = true
			if n < 0 {
				sign, n = "-", -n
			}
			switch conv {
			case 'o':
				body = strconv.FormatUint(uint64(n), 8)
				if alt {
					body = "0o" + body
				}
			case 'x', 'X':
				body = strconv.FormatUint(uint64(n), 16)
				if alt {
					body = "0x" + body
				}
				if conv == 'X' {
					body = strings.ToUpper(body)
				}
			default:
				body = strconv.FormatUint(uint64(n), 10)
			}
			if hasPrec {
				// Python pads the digits (after any 0x prefix) to the precision.
				digits := body
				prefix := ""
				if alt && (conv == 'o' || conv == 'x' || conv == 'X') {
					prefix, digits = body[:2], body[2:]
				}
				for len(digits) < prec {
					digits = "0" + digits
				}
				body = prefix + digits
			}
		case 'e', 'E', 'f', 'F', 'g', 'G':
			if !isNumeric(arg) {
				return "", fmt.Errorf("TypeError: must be real number, not %s", pyTypeNameOf(arg))
			}
			f := asFloat(arg)
			numeric = true
			if math.Signbit(f) && !math.IsNaN(f) {
				sign, f = "-", -f
			}
			if !hasPrec {
				prec = 6
			}
			body = formatFloat(f, conv, prec, alt)
		case 'c':
			switch {
			case arg.IsString() && utf8.RuneCountInString(arg.AsString()) == 1:
				body = arg.AsString()
			case isIntLike(arg):
				n := asInt(arg)
				if n < 0 || n > 0x10ffff {
					return "", fmt.Errorf("OverflowError: %%c arg not in range(0x110000)")
				}
				body = string(rune(n))
			default:
				return "", fmt.Errorf("TypeError: %%c requires int or char")
			}
		default:
			return "", fmt.Errorf("ValueError: unsupported format character '%c' (0x%x) at index %d", conv, conv, i)
		}
		if numeric && sign == "" {
			if plus {
				sign = "+"
			} else if space {
				sign = " "
			}
		}
		n := utf8.RuneCountInString(sign) + utf8.RuneCountInString(body)
		switch {
		case n >= width:
			b.WriteString(sign)
			b.WriteString(body)
		case left:
			b.WriteString(sign)
			b.WriteString(body)
			b.WriteString(strings.Repeat(" ", width-n))
		case zero && numeric:
			b.WriteString(sign)
			pad := strings.Repeat("0", width-n)
			// The zeros go after a 0x/0o prefix.
			if alt && len(body) > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X' || body[1] == 'o') {
				b.WriteString(body[:2])
				b.WriteString(pad)
				b.WriteString(body[2:])
			} else {
				b.WriteString(pad)
				b.WriteString(body)
			}
		default:
			b.WriteString(strings.Repeat(" ", width-n))
			b.WriteString(sign)
			b.WriteString(body)
		}
	}
	if argi < len(args) && !mapping {
		return "", fmt.Errorf("TypeError: not all arguments converted during string formatting")
	}
	return b.String(), nil
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
	if !isNumeric(a) || !isNumeric(b) {
		return jinja.Undefined(), fmt.Errorf("TypeError: unsupported operand type(s) for %%: '%s' and '%s'", pyTypeNameOf(a), pyTypeNameOf(b))
	}
	if a.IsFloat() || b.IsFloat() {
		x, y := asFloat(a), asFloat(b)
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
