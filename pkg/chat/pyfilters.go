package chat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Jinja2's filters and operators that turn values into text, with Python's str() of lists
// and dicts (pyStr: strings in them printed with Python's repr, pyrepr.go). The library
// turns a list into text with its own repr, which escapes only ASCII control characters,
// so {{ 'x' ~ parts }}, {{ parts|join }} or {{ parts|replace(...) }} of a list holding
// "\xa0" printed the character where Jinja2 prints \xa0. ~ is rewritten with the other
// operators (operators.go); join and replace are renamed like trim (env.go).
const (
	tildeFilterName   = "__kvgate_tilde"
	modFilterName     = "__kvgate_mod"
	joinFilterName    = "__kvgate_join"
	replaceFilterName = "__kvgate_replace"
)

func rewriteJoin(src string) string    { return renameFilter(src, "join", joinFilterName) }
func rewriteReplace(src string) string { return renameFilter(src, "replace", replaceFilterName) }

// tildeFilter is Jinja2's a ~ b: str(a) + str(b), an undefined value as "".
func tildeFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("~", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsString() && b.IsString() {
		return jinja.NewString(a.AsString() + b.AsString()), nil
	}
	return jinja.NewString(pyStr(a) + pyStr(b)), nil
}

// joinFilter is Jinja2's do_join(value, d=”, attribute=None): soft_str(d).join of the
// items' soft_str.
func joinFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("TypeError: do_join() missing 1 required positional argument: 'value'")
	}
	sep, attr := "", jinja.Undefined()
	if len(args) > 1 {
		sep = softStr(args[1])
	} else if d, ok := kwargs["d"]; ok {
		sep = softStr(d)
	}
	if len(args) > 2 {
		attr = args[2]
	} else if a, ok := kwargs["attribute"]; ok {
		attr = a
	}
	items, err := iterItems(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		if !attr.IsUndefined() && !attr.IsNone() {
			it = attrOf(it, attr)
		}
		b.WriteString(softStr(it))
	}
	return jinja.NewString(b.String()), nil
}

// iterItems is what Python's iteration of v yields: a list's items, a dict's keys, a
// string's characters, nothing for an undefined value.
func iterItems(v jinja.Value) ([]jinja.Value, error) {
	switch {
	case v.IsList():
		return v.AsList().Items, nil
	case v.IsDict():
		keys := v.AsDict().Keys
		out := make([]jinja.Value, len(keys))
		for i, k := range keys {
			out[i] = jinja.NewString(k)
		}
		return out, nil
	case v.IsString():
		var out []jinja.Value
		for _, r := range v.AsString() {
			out = append(out, jinja.NewString(string(r)))
		}
		return out, nil
	case v.IsUndefined():
		return nil, nil
	}
	return nil, fmt.Errorf("TypeError: '%s' object is not iterable", pyTypeNameOf(v))
}

// attrOf is Jinja2's make_attrgetter: the dotted attribute path (parts that are integers
// index lists), undefined where it is missing.
func attrOf(v, attr jinja.Value) jinja.Value {
	path := []string{softStr(attr)}
	if attr.IsString() {
		path = strings.Split(attr.AsString(), ".")
	} else if isIntLike(attr) {
		path = []string{strconv.FormatInt(asInt(attr), 10)}
	}
	for _, p := range path {
		switch {
		case v.IsDict():
			x, ok := v.AsDict().Get(p)
			if !ok {
				return jinja.Undefined()
			}
			v = x
		case v.IsList():
			n, err := strconv.Atoi(p)
			l := v.AsList().Items
			if err != nil || n >= len(l) || n < -len(l) {
				return jinja.Undefined()
			}
			if n < 0 {
				n += len(l)
			}
			v = l[n]
		default:
			return jinja.Undefined()
		}
	}
	return v
}

// replaceFilter is Jinja2's do_replace(s, old, new, count=None): str(s).replace(str(old),
// str(new), count).
func replaceFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 3 {
		return jinja.Undefined(), fmt.Errorf("TypeError: do_replace() needs the value, old and new")
	}
	count := jinja.None()
	if len(args) > 3 {
		count = args[3]
	} else if c, ok := kwargs["count"]; ok {
		count = c
	}
	n := -1
	switch {
	case count.IsNone():
	case isIntLike(count):
		if c := asInt(count); c >= 0 && c < 1<<31 {
			n = int(c)
		}
	default:
		return jinja.Undefined(), fmt.Errorf("TypeError: '%s' object cannot be interpreted as an integer", pyTypeNameOf(count))
	}
	return jinja.NewString(strings.Replace(pyStr(args[0]), pyStr(args[1]), pyStr(args[2]), n)), nil
}

// lengthFilterName is Jinja2's |length (and its alias |count), renamed like trim: Python's
// len() raises TypeError for None, numbers and booleans, where the library answers 0 (so
// {% if tools|length %} with no tools rendered where Jinja2 raises).
const lengthFilterName = "__kvgate_length"

func rewriteLength(src string) string {
	return renameFilter(renameFilter(src, "length", lengthFilterName), "count", lengthFilterName)
}

// lengthFilter is Python's len(): code points of a string, items of a list, keys of a dict,
// 0 for an undefined value (Jinja2's Undefined.__len__).
func lengthFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("TypeError: do_length() missing 1 required positional argument: 'value'")
	}
	switch v := args[0]; {
	case v.IsString():
		return jinja.NewInt(int64(utf8.RuneCountInString(v.AsString()))), nil
	case v.IsList():
		return jinja.NewInt(int64(v.AsList().Len())), nil
	case v.IsDict():
		return jinja.NewInt(int64(v.AsDict().Len())), nil
	case v.IsUndefined():
		return jinja.NewInt(0), nil
	default:
		return jinja.Undefined(), fmt.Errorf("TypeError: object of type '%s' has no len()", pyTypeNameOf(v))
	}
}
