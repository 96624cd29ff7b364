package chat

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// Python string helpers.

// pyIsSpace is Python's str.isspace for one code point: Unicode White_Space plus the
// separators U+001C–U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyStrip is Python's str.strip() without arguments.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pyRStrip is Python's str.rstrip() without arguments.
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }

// The library has no str.isspace, and a method it does not know is undefined, so calling
// it fails where Jinja2 answers. Each call X.isspace() found by the Jinja lexer inside tags
// is rewritten to X|__kvgate_isspace, a filter only a render variable provides. A filter
// binds as tightly as the call for every operand a template applies isspace to (a name, an
// attribute, a subscript, a parenthesised expression); a call followed by more postfix
// syntax, or one inside a dotted filter name, is left as it is.
const isspaceFilterName = "__kvgate_isspace"

// rewriteIsspace rewrites the isspace calls of src; a source the lexer cannot read is
// returned unchanged.
func rewriteIsspace(src string) string {
	type span struct{ from, to int }
	var at []span
	ok := scanTags(src, func(_ bool, toks []token) {
		for i := 1; i+3 < len(toks); i++ {
			if !isOp(toks, i, ".") || toks[i+1].kind != tkName || toks[i+1].val != "isspace" ||
				!isOp(toks, i+2, "(") || !isOp(toks, i+3, ")") {
				continue
			}
			if i+4 < len(toks) && (isOp(toks, i+4, ".") || isOp(toks, i+4, "[") || isOp(toks, i+4, "(")) {
				continue
			}
			if inDottedName(toks, i-1) {
				continue
			}
			at = append(at, span{toks[i].pos, toks[i+3].pos + 1})
		}
	})
	if !ok || len(at) == 0 {
		return src
	}
	var b strings.Builder
	last := 0
	for _, s := range at {
		b.WriteString(src[last:s.from])
		b.WriteString("|" + isspaceFilterName)
		last = s.to
	}
	b.WriteString(src[last:])
	return b.String()
}

// isspaceFilter is Python's str.isspace: true for a non-empty string of Python whitespace.
func isspaceFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || !args[0].IsString() {
		name := "Undefined"
		if len(args) > 0 {
			name = pyTypeName(args[0])
		}
		return jinja.Undefined(), fmt.Errorf("'%s' object has no attribute 'isspace'", name)
	}
	s := args[0].AsString()
	for _, r := range s {
		if !pyIsSpace(r) {
			return jinja.NewBool(false), nil
		}
	}
	return jinja.NewBool(s != ""), nil
}

// inDottedName reports whether toks[j] ends a dotted filter or test name (x|a.b, x is a.b),
// which Jinja2 reads as one name.
func inDottedName(toks []token, j int) bool {
	if toks[j].kind != tkName {
		return false
	}
	for j >= 2 && isOp(toks, j-1, ".") && toks[j-2].kind == tkName {
		j -= 2
	}
	return j >= 1 && (isOp(toks, j-1, "|") || isName(toks, j-1, "is"))
}
