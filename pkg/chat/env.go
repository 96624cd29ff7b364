package chat

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// The Jinja environment of wire/vllm-chat.md §8 on top of ardanlabs/jinja. The library
// already matches transformers' setup in trim_blocks/lstrip_blocks, loop controls,
// namespace(), {% generation %}, Python printing and tojson (json.dumps with
// ensure_ascii=False, indent, separators, sort_keys). What it lacks is closed with render
// variables, which shadow the library's globals (templates cannot tell them apart):
//
//   - range: ImmutableSandboxedEnvironment's safe_range, which refuses ranges longer than
//     MAX_RANGE (100000) with Python's OverflowError text. This also bounds what one
//     range() call can make a loop do.
//   - strftime_now: datetime.now().strftime(fmt) with glibc's C-locale directives (the
//     library's mapping to Go layouts misses %-d, %e, %j, ...).
//   - tojson: the library's filter under a private name (tojson.go), for speed only: the
//     bytes are the library's.
//
// raise_exception is the library's own: it fails the render with the message, which the
// renderer returns as a 400 as vLLM does.

// maxRange is Jinja2's sandbox MAX_RANGE.
const maxRange = 100000

func rangeGlobal(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var start, stop, step int64 = 0, 0, 1
	ints := make([]int64, len(args))
	for i, a := range args {
		switch {
		case a.IsInt():
			ints[i] = a.AsInt()
		case a.IsBool():
			if a.AsBool() {
				ints[i] = 1
			}
		default:
			return jinja.Undefined(), fmt.Errorf("'%s' object cannot be interpreted as an integer", pyTypeName(a))
		}
	}
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	case 0:
		return jinja.Undefined(), fmt.Errorf("range expected at least 1 argument, got 0")
	default:
		return jinja.Undefined(), fmt.Errorf("range expected at most 3 arguments, got %d", len(ints))
	}
	if step == 0 {
		return jinja.Undefined(), fmt.Errorf("range() arg 3 must not be zero")
	}
	var n int64
	switch {
	case step > 0 && start < stop:
		n = (stop-start-1)/step + 1
	case step < 0 && start > stop:
		n = (start-stop-1)/(-step) + 1
	}
	if n < 0 || n > maxRange { // n < 0: the subtraction overflowed, far beyond the bound
		return jinja.Undefined(), fmt.Errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	items := make([]jinja.Value, n)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}

func pyTypeName(v jinja.Value) string {
	switch {
	case v.IsNone():
		return "NoneType"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	case v.IsUndefined():
		return "Undefined"
	}
	return "object"
}

// strftimeGlobal returns strftime_now for a clock.
func strftimeGlobal(now func() time.Time) jinja.Value {
	return jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 0 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now() missing 1 required positional argument: 'format'")
		}
		return jinja.NewString(strftime(now(), args[0].AsString())), nil
	})
}

var (
	shortDays   = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	longDays    = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	shortMonths = []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
	longMonths  = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// strftime formats t as Python's naive datetime.strftime does on glibc.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		if composite, ok := strftimeComposites[format[i]]; ok {
			b.WriteString(strftime(t, composite))
		} else if !writeDirective(&b, t, format[i], pad) {
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// strftimeComposites are the directives that stand for a format of others (in the C locale;
// the "-" flag does not reach inside them).
var strftimeComposites = map[byte]string{
	'c': "%a %b %e %H:%M:%S %Y",
	'x': "%m/%d/%y",
	'X': "%H:%M:%S",
	'T': "%H:%M:%S",
	'D': "%m/%d/%y",
	'F': "%Y-%m-%d",
	'R': "%H:%M",
}

// writeDirective writes the field of t that directive c names, zero-padded unless pad is false
// (glibc's "-" flag); it reports false for a directive it does not know, which strftime writes
// as it is.
func writeDirective(b *strings.Builder, t time.Time, c byte, pad bool) bool {
	num := func(n, width int) {
		s := strconv.Itoa(n)
		if pad {
			for len(s) < width {
				s = "0" + s
			}
		}
		b.WriteString(s)
	}
	switch c {
	case 'a':
		b.WriteString(shortDays[t.Weekday()])
	case 'A':
		b.WriteString(longDays[t.Weekday()])
	case 'b', 'h':
		b.WriteString(shortMonths[t.Month()-1])
	case 'B':
		b.WriteString(longMonths[t.Month()-1])
	case 'd':
		num(t.Day(), 2)
	case 'e':
		s := strconv.Itoa(t.Day())
		if pad && len(s) < 2 {
			s = " " + s
		}
		b.WriteString(s)
	case 'f':
		num(t.Nanosecond()/1000, 6)
	case 'H':
		num(t.Hour(), 2)
	case 'I':
		h := t.Hour() % 12
		if h == 0 {
			h = 12
		}
		num(h, 2)
	case 'j':
		num(t.YearDay(), 3)
	case 'm':
		num(int(t.Month()), 2)
	case 'M':
		num(t.Minute(), 2)
	case 'p':
		if t.Hour() < 12 {
			b.WriteString("AM")
		} else {
			b.WriteString("PM")
		}
	case 'S':
		num(t.Second(), 2)
	case 'u':
		wd := int(t.Weekday())
		if wd == 0 {
			wd = 7
		}
		b.WriteString(strconv.Itoa(wd))
	case 'w':
		b.WriteString(strconv.Itoa(int(t.Weekday())))
	case 'U':
		num((t.YearDay()+6-int(t.Weekday()))/7, 2)
	case 'W':
		num((t.YearDay()+6-(int(t.Weekday())+6)%7)/7, 2)
	case 'y':
		num(t.Year()%100, 2)
	case 'Y':
		b.WriteString(strconv.Itoa(t.Year()))
	case 'n':
		b.WriteByte('\n')
	case 't':
		b.WriteByte('\t')
	case 'z', 'Z':
		// naive datetime: empty
	case '%':
		b.WriteByte('%')
	default:
		return false
	}
	return true
}

// The |trim filter of the library strips Go whitespace, which lacks the separators
// U+001C–U+001F that Python's str.strip removes, and filters cannot be replaced. But the
// library resolves a filter name it does not know from the render variables, so the
// template source is rewritten to call trim under a private name that only a render
// variable provides: every |trim (and {% filter trim %}) found by the Jinja lexer inside
// tags, never in text, comments, raw blocks or string literals. The rename is exact: the
// private name is a filter name only, and the variable implements Jinja2's do_trim
// (soft_str(value).strip(chars)).
const trimFilterName = "__kvgate_trim"

// rewriteTrim renames the trim filter in src; a source the lexer cannot read is returned
// unchanged (the library then reports its own error).
func rewriteTrim(src string) string { return renameFilter(src, "trim", trimFilterName) }

// renameFilter renames the filter name in src to to: every |name (and {% filter name %})
// found by the Jinja lexer inside tags, never in text, comments, raw blocks or string
// literals. A source the lexer cannot read is returned unchanged.
func renameFilter(src, name, to string) string {
	var at []int
	ok := scanTags(src, func(_ bool, toks []token) {
		for i := 1; i < len(toks); i++ {
			t := toks[i]
			if t.kind != tkName || t.val != name {
				continue
			}
			prev := toks[i-1]
			if prev.kind == tkOp && prev.val == "|" || i == 1 && prev.kind == tkName && prev.val == "filter" {
				at = append(at, t.pos)
			}
		}
	})
	if !ok || len(at) == 0 {
		return src
	}
	var b strings.Builder
	b.Grow(len(src) + len(at)*len(to))
	last := 0
	for _, p := range at {
		b.WriteString(src[last:p])
		b.WriteString(to)
		last = p + len(name)
	}
	b.WriteString(src[last:])
	return b.String()
}

// trimFilter is Jinja2's do_trim: the value as a string, stripped of Python whitespace or
// of the given characters.
func trimFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("do_trim() missing 1 required positional argument: 'value'")
	}
	s := softStr(args[0])
	chars, ok := kwargs["chars"]
	if !ok && len(args) > 1 {
		chars, ok = args[1], true
	}
	if !ok || chars.IsNone() || chars.IsUndefined() {
		return jinja.NewString(pyStrip(s)), nil
	}
	set := softStr(chars)
	return jinja.NewString(strings.TrimFunc(s, func(r rune) bool { return strings.ContainsRune(set, r) })), nil
}

// softStr is Jinja2's soft_str as the library prints values: strings as they are, an
// undefined as "", everything else in Python's str() form.
func softStr(v jinja.Value) string { return pyStr(v) }
