package chat

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/ardanlabs/jinja"

	"github.com/kvgate/kvgate/pkg/chat/internal/pyfloat"
)

// tojson is the library's filter, which is what templates call for tool schemas and
// tool-call arguments on every request with tools: the library checks the whole value for
// cycles (allocating as it goes), then writes it rune by rune. The filter is renamed in the
// template source as trim is (rewriteTojson, see env.go), and the private name's variable
// gives the same bytes with one pass that copies runs of plain text: the default call
// (`x | tojson`, Python's json.dumps(x, ensure_ascii=False)) is encoded here, any call with
// arguments (indent, separators, sort_keys, ensure_ascii) is handed to the library's own
// filter. BenchmarkTojson measures the two on the bench conversation's tools; TestTojson
// compares them on hard values.
const tojsonFilterName = "__kvgate_tojson"

// rewriteTojson renames the tojson filter in src, as rewriteTrim does for trim.
func rewriteTojson(src string) string { return renameFilter(src, "tojson", tojsonFilterName) }

var tojsonValue = jinja.NewCallable("tojson", tojsonFilter)

var errTojsonCycle = errors.New("tojson: circular reference detected")

func tojsonFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	if len(args) > 1 || len(kwargs) > 0 {
		if hasBigInt(args[0], 0) {
			return bigTojson(args, kwargs)
		}
		return libraryTojson(args, kwargs)
	}
	bp := jsonBufPool.Get().(*[]byte)
	var anc ancestors
	b, err := appendTojson((*bp)[:0], args[0], &anc)
	if err != nil {
		return jinja.Undefined(), err
	}
	s := string(b)
	if cap(b) <= 64<<10 {
		*bp = b
		jsonBufPool.Put(bp)
	}
	return jinja.NewString(s), nil
}

var jsonBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// libraryTojsonTemplate calls the library's tojson with all four of its arguments, each
// resolved as the library resolves them (keyword first, then position, then the default).
var libraryTojsonTemplate = sync.OnceValues(func() (*jinja.Template, error) {
	return jinja.Compile("{{ v | tojson(ensure_ascii=a, indent=i, separators=s, sort_keys=k) }}")
})

func libraryTojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	t, err := libraryTojsonTemplate()
	if err != nil {
		return jinja.Undefined(), err
	}
	arg := func(i int, name string, def jinja.Value) jinja.Value {
		if v, ok := kwargs[name]; ok {
			return v
		}
		if i < len(args) {
			return args[i]
		}
		return def
	}
	out, err := t.RenderValues(map[string]jinja.Value{
		"v": args[0],
		"a": arg(1, "ensure_ascii", jinja.NewBool(false)),
		"i": arg(2, "indent", jinja.None()),
		"s": arg(3, "separators", jinja.None()),
		"k": arg(4, "sort_keys", jinja.NewBool(false)),
	})
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(out), nil
}

// ancestors are the containers being encoded, outermost first: a value that contains one of
// them is circular. The first few live in the array, so encoding does not allocate for them.
type ancestors struct {
	fixed [16]unsafe.Pointer
	more  []unsafe.Pointer
	n     int
}

func (a *ancestors) push(p unsafe.Pointer) bool {
	for i := 0; i < a.n && i < len(a.fixed); i++ {
		if a.fixed[i] == p {
			return false
		}
	}
	for _, q := range a.more {
		if q == p {
			return false
		}
	}
	if a.n < len(a.fixed) {
		a.fixed[a.n] = p
	} else {
		a.more = append(a.more, p)
	}
	a.n++
	return true
}

func (a *ancestors) pop() {
	a.n--
	if a.n >= len(a.fixed) {
		a.more = a.more[:len(a.more)-1]
	}
}

// appendTojson appends v as the library's tojson writes it with default arguments: Python's
// json.dumps(v, ensure_ascii=False) with ", " and ": " separators, keys in insertion order,
// undefined and callables as null, a big integer as its digits.
func appendTojson(b []byte, v jinja.Value, anc *ancestors) ([]byte, error) {
	switch {
	case v.IsString():
		return appendJSONString(b, v.AsString()), nil
	case v.IsDict():
		d := v.AsDict()
		if !anc.push(unsafe.Pointer(d)) {
			return b, errTojsonCycle
		}
		b = append(b, '{')
		for i, k := range d.Keys {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendJSONString(b, k)
			b = append(b, ": "...)
			var err error
			if b, err = appendTojson(b, d.Data[k], anc); err != nil {
				return b, err
			}
		}
		anc.pop()
		return append(b, '}'), nil
	case v.IsList():
		l := v.AsList()
		if !anc.push(unsafe.Pointer(l)) {
			return b, errTojsonCycle
		}
		b = append(b, '[')
		for i, x := range l.Items {
			if i > 0 {
				b = append(b, ", "...)
			}
			var err error
			if b, err = appendTojson(b, x, anc); err != nil {
				return b, err
			}
		}
		anc.pop()
		return append(b, ']'), nil
	case v.IsInt():
		return strconv.AppendInt(b, v.AsInt(), 10), nil
	case v.IsBool():
		if v.AsBool() {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case v.IsFloat():
		return pyfloat.Append(b, v.AsFloat()), nil
	}
	if digits, ok := bigIntText(v); ok {
		s, err := bigIntString(digits)
		return append(b, s...), err
	}
	return append(b, "null"...), nil
}

// jsonPlain marks the ASCII bytes a JSON string holds as they are.
var jsonPlain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString appends s quoted as the library's tojson does (Python's json.dumps with
// ensure_ascii=False): '"', '\\' and \b \f \n \r \t escaped, other controls as \u00XX, every
// other code point as it is, and each byte that is not part of valid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] < utf8.RuneSelf && jsonPlain[s[j]] {
			j++
		}
		b = append(b, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, "\uFFFD"...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
	}
	return append(b, '"')
}

// maxBigIntDepth bounds the walks for big integers; a deeper (or circular) value is left to
// the library, which reports a circular one.
const maxBigIntDepth = 256

// hasBigInt reports whether v holds a big integer (bigint.go) within maxBigIntDepth levels.
func hasBigInt(v jinja.Value, depth int) bool {
	if depth > maxBigIntDepth {
		return false
	}
	switch {
	case v.IsDict():
		for _, x := range v.AsDict().Data {
			if hasBigInt(x, depth+1) {
				return true
			}
		}
	case v.IsList():
		for _, x := range v.AsList().Items {
			if hasBigInt(x, depth+1) {
				return true
			}
		}
	default:
		return isBigInt(v)
	}
	return false
}

// bigTojsonMark starts the string that stands for a big integer in bigTojson. The library
// writes its NUL as \u0000 in any mode; the random part keeps a request's own strings from
// ever matching it.
var bigTojsonMark = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "\x00" + hex.EncodeToString(b[:]) + ":"
}()

// bigTojson is the library's tojson with arguments of a value holding big integers, which
// the library would write as null: each is replaced by a marked string of its digits, and
// the quoted marked strings in the output by the digits.
func bigTojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	v, err := markBigInts(args[0], 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	out, err := libraryTojson(append([]jinja.Value{v}, args[1:]...), kwargs)
	if err != nil || !out.IsString() {
		return out, err
	}
	s := out.AsString()
	mark := `"\u0000` + bigTojsonMark[1:]
	var b strings.Builder
	for {
		i := strings.Index(s, mark)
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		s = s[i+len(mark):]
		j := strings.IndexByte(s, '"')
		if j < 0 {
			return jinja.Undefined(), errors.New("tojson: big integer lost")
		}
		b.WriteString(s[:j])
		s = s[j+1:]
	}
	b.WriteString(s)
	return jinja.NewString(b.String()), nil
}

// markBigInts copies v with each big integer replaced by bigTojsonMark and its digits.
func markBigInts(v jinja.Value, depth int) (jinja.Value, error) {
	if depth > maxBigIntDepth {
		return v, nil
	}
	switch {
	case v.IsDict():
		out := jinja.NewDict()
		d, od := v.AsDict(), out.AsDict()
		for _, k := range d.Keys {
			x, err := markBigInts(d.Data[k], depth+1)
			if err != nil {
				return v, err
			}
			od.Set(k, x)
		}
		return out, nil
	case v.IsList():
		items := make([]jinja.Value, len(v.AsList().Items))
		for i, x := range v.AsList().Items {
			var err error
			if items[i], err = markBigInts(x, depth+1); err != nil {
				return v, err
			}
		}
		return jinja.NewList(items), nil
	}
	if digits, ok := bigIntText(v); ok {
		s, err := bigIntString(digits)
		return jinja.NewString(bigTojsonMark + s), err
	}
	return v, nil
}
