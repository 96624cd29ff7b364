package chat

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// Python's str() of a value as Jinja2 prints it. The library prints a list or dict with its
// own repr of strings, which escapes only ASCII control characters; Python escapes every
// character str.isprintable rejects (\x85, \xa0, \u2028, \u200d, ...). The library's
// printing cannot be replaced, so the template source is rewritten: every {{ expr }} found
// by the Jinja lexer becomes {{ (expr)|__kvgate_str }}, a filter only a render variable
// provides, which prints lists and dicts as Python does and passes every other value
// through unchanged; |string is renamed the same way (Jinja2's do_string is str()).

const (
	strFilterName    = "__kvgate_str"
	stringFilterName = "__kvgate_string"
)

// rewriteOutputs wraps every {{ }} expression of src in the print filter; a source the
// lexer cannot read is returned unchanged.
func rewriteOutputs(src string) string {
	type span struct{ from, to int }
	var at []span
	ok := scanTagsAt(src, func(statement bool, toks []token, end int) {
		if statement || len(toks) == 0 || printsText(toks) {
			return
		}
		closeAt := end - len("}}")
		if c := src[closeAt-1]; c == '-' || c == '+' {
			closeAt--
		}
		at = append(at, span{toks[0].pos, closeAt})
	})
	if !ok || len(at) == 0 {
		return src
	}
	var b strings.Builder
	b.Grow(len(src) + len(at)*(len(strFilterName)+4))
	last := 0
	for _, s := range at {
		b.WriteString(src[last:s.from])
		b.WriteByte('(')
		b.WriteString(src[s.from:s.to])
		b.WriteString(")|" + strFilterName)
		last = s.to
	}
	b.WriteString(src[last:])
	return b.String()
}

// stringFilters are filters whose result is never a list or dict.
var stringFilters = map[string]bool{
	tojsonFilterName: true, trimFilterName: true, catFilterName: true, tildeFilterName: true,
	formatFilterName: true, joinFilterName: true, replaceFilterName: true, lengthFilterName: true, stringFilterName: true, "join": true, "upper": true,
	"lower": true, "title": true, "capitalize": true, "replace": true, "indent": true, "center": true,
	"format": true, "length": true, "count": true, "int": true, "float": true, "wordcount": true,
}

// printsText reports whether a {{ }} expression can never be a list or dict, so printing it
// needs no filter (most outputs of real templates): a single literal, or a chain of names,
// attributes, subscripts and calls whose last filter is one of stringFilters, or an
// expression whose top level joins such operands with ~.
func printsText(toks []token) bool {
	if len(toks) == 1 {
		return toks[0].kind == tkString || toks[0].kind == tkNumber
	}
	depth, tilde, lastFilter := 0, false, ""
	for i, t := range toks {
		if t.kind == tkOp {
			switch t.val {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			}
		}
		if depth != 0 {
			continue
		}
		switch {
		case t.kind == tkName && (t.val == "if" || t.val == "else" || t.val == "and" || t.val == "or"):
			return false
		case isOp(toks, i, "~"):
			tilde = true
		case isOp(toks, i, "|") && i+1 < len(toks) && toks[i+1].kind == tkName:
			lastFilter = toks[i+1].val
		case t.kind == tkOp && t.val != "." && t.val != ")" && t.val != "]" && t.val != "|" && t.val != "(" && t.val != "[":
			return false // another operator: the result may be anything
		}
	}
	return tilde || stringFilters[lastFilter]
}

// rewriteString renames the string filter (see rewriteTrim).
func rewriteString(src string) string { return renameFilter(src, "string", stringFilterName) }

// strFilter prints a list, dict or big integer as Python's str() does; any other value is
// returned as it is, for the library to print as before.
func strFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), fmt.Errorf("print filter takes one value")
	}
	if v := args[0]; v.IsList() || v.IsDict() {
		var b strings.Builder
		writeRepr(&b, v, nil)
		return jinja.NewString(b.String()), nil
	} else if digits, ok := bigIntText(v); ok {
		s, err := bigIntString(digits)
		return jinja.NewString(s), err
	}
	return args[0], nil
}

// stringFilter is Jinja2's do_string: soft_str(value).
func stringFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("do_string() missing 1 required positional argument: 'value'")
	}
	return jinja.NewString(softStr(args[0])), nil
}

// pyStr is Python's str() of a value, with Jinja2's undefined as "".
func pyStr(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsUndefined():
		return ""
	case v.IsList(), v.IsDict():
		var b strings.Builder
		writeRepr(&b, v, nil)
		return b.String()
	}
	if digits, ok := bigIntText(v); ok {
		return digits
	}
	return v.String()
}

// writeRepr writes Python's repr of v; ancestors are the containers being printed (a
// container inside itself prints as [...] or {...}, as Python's does).
func writeRepr(b *strings.Builder, v jinja.Value, ancestors []any) {
	switch {
	case v.IsString():
		writeReprString(b, v.AsString())
	case v.IsList():
		l := v.AsList()
		tuple := isTuple(v)
		if slices.Contains(ancestors, any(l)) {
			b.WriteString(map[bool]string{false: "[...]", true: "(...)"}[tuple])
			return
		}
		ancestors = append(ancestors, l)
		b.WriteByte(map[bool]byte{false: '[', true: '('}[tuple])
		for i, item := range l.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, item, ancestors)
		}
		if tuple && len(l.Items) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(map[bool]byte{false: ']', true: ')'}[tuple])
	case v.IsDict():
		d := v.AsDict()
		if slices.Contains(ancestors, any(d)) {
			b.WriteString("{...}")
			return
		}
		ancestors = append(ancestors, d)
		b.WriteByte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprString(b, k)
			b.WriteString(": ")
			writeRepr(b, d.Data[k], ancestors)
		}
		b.WriteByte('}')
	default:
		if digits, ok := bigIntText(v); ok {
			b.WriteString(digits)
			return
		}
		b.WriteString(v.String())
	}
}

// isTuple reports whether a list value is a tuple: the library keeps that private, but its
// equality compares it first (a list equal to a plain list of its own items is not a tuple;
// items unequal to themselves, NaN, fall back to the library's own repr).
func isTuple(v jinja.Value) bool {
	if v.Equals(jinja.NewList(v.AsList().Items)) {
		return false
	}
	return strings.HasPrefix(v.String(), "(")
}

// writeReprString writes Python's repr of a str: single quotes unless the string holds a
// single quote and no double quote; backslash, the quote, \t \n \r escaped; every other
// character str.isprintable rejects (Unicode categories C* and Z* except the space) as
// \xNN, \uNNNN or \UNNNNNNNN. Printability follows Go's Unicode tables, which may be newer
// than the engine's Python's (characters assigned since differ).
func writeReprString(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x7f && r >= 0x20:
			b.WriteRune(r)
		case unicode.IsPrint(r) && r >= 0xa0:
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
}
