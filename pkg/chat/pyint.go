package chat

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// Jinja2's do_int of a str is int(value, base), else int(float(value)), else the default;
// the library parses a string with Go's rules into an int64 (0 beyond it, '1e20'|int is 0).
// These are CPython's int() and float() of a str: Python whitespace stripped, Unicode decimal
// digits, '_' between digits, base prefixes, inf and nan.

// errIntInf is int() of an infinite float, which do_int does not catch.
var errIntInf = errors.New("OverflowError: cannot convert float infinity to integer")

// pyIntOfString is do_int(s, def, base).
func pyIntOfString(s string, def jinja.Value, base int64) (jinja.Value, error) {
	if x, ok := pyParseInt(s, base); ok {
		return newBigInt(x), nil
	}
	f, ok := pyParseFloat(s)
	if !ok {
		return def, nil
	}
	return pyIntOfFloat(f, def)
}

// pyIntOfFloat is do_int of a float: its integer part, exact; NaN gives the default (int()
// raises ValueError, which do_int catches), an infinity raises.
func pyIntOfFloat(f float64, def jinja.Value) (jinja.Value, error) {
	switch {
	case math.IsNaN(f):
		return def, nil
	case math.IsInf(f, 0):
		return jinja.Undefined(), errIntInf
	case f < 1<<63 && f >= -(1<<63):
		return jinja.NewInt(int64(f)), nil
	}
	x, _ := big.NewFloat(f).Int(nil)
	return newBigInt(x), nil
}

// pyDecimalASCII is CPython's _PyUnicode_TransformDecimalAndSpaceToASCII after the strip:
// Unicode decimal digits become their ASCII digit; ok is false for any other non-ASCII
// character, which no number accepts.
func pyDecimalASCII(s string) (_ string, ok bool) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return s, true
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case unicode.Is(unicode.Nd, r):
			b.WriteByte('0' + byte(decimalValue(r)))
		default:
			return "", false
		}
	}
	return b.String(), true
}

// decimalValue is the value of a Unicode decimal digit: Nd comes in runs of ten from a zero.
func decimalValue(r rune) int {
	for _, rg := range unicode.Nd.R16 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	return 0
}

// pyMaxStrDigits is CPython's default limit on the digits int() converts in a base that is
// not a power of two (sys.get_int_max_str_digits); more is a ValueError.
const pyMaxStrDigits = 4300

// pyParseInt is int(s, base) of a str; ok is false where Python raises ValueError (or
// TypeError, for a base out of range: do_int catches both).
func pyParseInt(s string, base int64) (_ *big.Int, ok bool) {
	if base != 0 && (base < 2 || base > 36) {
		return nil, false
	}
	s, ok = pyDecimalASCII(pyStrip(s))
	if !ok {
		return nil, false
	}
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	prefixed := false
	if len(s) >= 2 && s[0] == '0' {
		p := map[byte]int64{'x': 16, 'X': 16, 'o': 8, 'O': 8, 'b': 2, 'B': 2}[s[1]]
		if p != 0 && (base == 0 || base == p) {
			base, s, prefixed = p, s[2:], true
		}
	}
	if base == 0 {
		base = 10
		// A decimal with base 0 has no leading zero, but for zero itself.
		if strings.TrimLeft(s, "0_") != "" && s[0] == '0' {
			return nil, false
		}
	}
	digits, ok := pyDigits(s, prefixed)
	if !ok {
		return nil, false
	}
	if base&(base-1) != 0 && len(digits) > pyMaxStrDigits {
		return nil, false
	}
	x, ok := new(big.Int).SetString(digits, int(base))
	if !ok {
		return nil, false
	}
	if neg {
		x.Neg(x)
	}
	return x, true
}

// pyDigits removes the '_' Python allows between digits (and after a base prefix); ok is
// false for an empty number or a misplaced '_'.
func pyDigits(s string, prefixed bool) (string, bool) {
	if s == "" || s[len(s)-1] == '_' || s[0] == '_' && !prefixed || strings.Contains(s, "__") {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; !(s[i] >= '0' && s[i] <= '9' || c >= 'a' && c <= 'z' || s[i] == '_') {
			return "", false // big.Int would take a second sign
		}
	}
	return strings.ReplaceAll(s, "_", ""), true
}

// pyParseFloat is float(s) of a str; ok is false where Python raises ValueError.
func pyParseFloat(s string) (float64, bool) {
	s, ok := pyDecimalASCII(pyStrip(s))
	if !ok {
		return 0, false
	}
	body := s
	if body != "" && (body[0] == '+' || body[0] == '-') {
		body = body[1:]
	}
	switch strings.ToLower(body) {
	case "inf", "infinity":
		if s[0] == '-' {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "nan":
		return math.NaN(), true
	}
	if !pyFloatSyntax(body) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) { // out of range is ±Inf or 0, as in Python
		return 0, false
	}
	return f, true
}

// pyFloatSyntax checks Python's float literal without its sign: digitpart ["." [digitpart]]
// [exponent] or "." digitpart [exponent], digitpart being digits with single '_' between.
func pyFloatSyntax(s string) bool {
	i := 0
	digitpart := func() bool {
		start := i
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_' && i > start && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9') {
			i++
		}
		return i > start
	}
	whole := digitpart()
	frac := false
	if i < len(s) && s[i] == '.' {
		i++
		frac = digitpart()
	}
	if !whole && !frac {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if !digitpart() {
			return false
		}
	}
	return i == len(s)
}
