package chat

import "strings"

// Chat templates build each turn as one string and print it, for example Qwen3's
// {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}: the
// library evaluates the chain left to right, and every + copies the whole string so far
// into a new one (a message's content several times over), only to write the result into
// the output and drop it. rewriteConcat splits such a tag into one tag per operand,
// {{- '<|im_start|>' }}{{ message.role }}{{ '\n' }}..., which prints the same bytes
// without the intermediate strings. BenchmarkRenderConcat measures the Qwen3 template on
// the bench conversation with and without it.
//
// The split is exact for Python's semantics, and made only where that can be shown from
// the tokens:
//   - Python's + of a string and another value is their concatenation if the other value
//     is a string and raises otherwise, so once the chain is a string, printing each operand
//     in turn (each checked to be a string, see below) prints the same text or raises. A
//     chain is a string from its first + on when its first or second operand is a string
//     literal; no other chain is split.
//   - The tag's top level holds only operands joined by +: no other operator (the library
//     parses - * / % ~, comparisons, in, is, not, and, or, if/else around or between the
//     sums), so each operand is parsed alone exactly as it was inside the chain.
//   - Each operand is evaluated in the same order as before, but printed right away rather
//     than when the chain ends: that could differ only if a later operand changed an
//     earlier non-string value, so every call in the tag must be a filter or one of the
//     methods that change nothing (str.strip, dict.get, ...); a tag with any other call
//     (a macro, a global, list.append) is left as it is.
//   - A tag with braces outside strings (dict literals), or whose strings hold tag
//     delimiters, is left as it is, so this lexer and the library's scanner agree on
//     where it ends.
//
// Python's + of strings raises for any operand that is not a string (rewriteOperators gives
// the unsplit + that rule), so each operand that is not a string literal is printed through
// __kvgate_cat, which checks that: {{ '<|im_start|>' }}{{ (message.role)|__kvgate_cat }}...
func rewriteConcat(src string) string {
	type edit struct {
		pos, n int
		text   string
	}
	var edits []edit
	ok := scanTagsAt(src, func(statement bool, toks []token, end int) {
		if statement {
			return
		}
		plus := concatSplits(toks)
		if len(plus) == 0 {
			return
		}
		closeAt := end - 2
		if c := src[closeAt-1]; c == '-' || c == '+' {
			closeAt--
		}
		start := 0
		for i := 0; i <= len(plus); i++ {
			stop, at := len(toks), closeAt
			if i < len(plus) {
				stop, at = plus[i], toks[plus[i]].pos
			}
			checked := !(stop-start == 1 && toks[start].kind == tkString)
			if checked {
				edits = append(edits, edit{pos: toks[start].pos, text: "("})
			}
			text := "}}{{"
			if checked {
				text = ")|" + catFilterName + text
			}
			if i < len(plus) {
				edits = append(edits, edit{pos: at, n: 1, text: text})
			} else if checked {
				edits = append(edits, edit{pos: at, text: ")|" + catFilterName})
			}
			if i < len(plus) {
				start = plus[i] + 1
			}
		}
	})
	if !ok || len(edits) == 0 {
		return src
	}
	var b strings.Builder
	b.Grow(len(src) + 16*len(edits))
	last := 0
	for _, e := range edits {
		b.WriteString(src[last:e.pos])
		b.WriteString(e.text)
		last = e.pos + e.n
	}
	b.WriteString(src[last:])
	return b.String()
}

// pureMethods are the methods of the library's strings and dicts that return a new value
// and change nothing.
var pureMethods = map[string]bool{
	"strip": true, "lstrip": true, "rstrip": true, "split": true, "startswith": true, "endswith": true,
	"count": true, "find": true, "replace": true, "upper": true, "lower": true, "title": true,
	"capitalize": true, "format": true, "get": true, "items": true, "keys": true, "values": true,
}

// concatSplits returns the indexes of the top-level + tokens of a {{ }} tag that can be
// split there (see rewriteConcat), or nil.
func concatSplits(toks []token) []int {
	var plus []int
	depth := 0
	operandStart := 0 // index of the first token of the current top-level operand
	stringOperand := func(from, to int) bool { return to-from == 1 && toks[from].kind == tkString }
	firstIsString := false
	for i, t := range toks {
		switch t.kind {
		case tkString:
			if strings.Contains(t.val, "}}") || strings.Contains(t.val, "{{") || strings.Contains(t.val, "{%") ||
				strings.Contains(t.val, "%}") || strings.Contains(t.val, "{#") || strings.Contains(t.val, "#}") {
				return nil
			}
		case tkName:
			if depth == 0 {
				switch t.val {
				case "if", "else", "and", "or", "not", "in", "is":
					return nil
				}
			}
		case tkOp:
			switch t.val {
			case "{", "}":
				return nil
			case "(", "[":
				if t.val == "(" && i > 0 && toks[i-1].kind == tkName {
					// A call: a filter's arguments or a pure method; anything else may
					// change values.
					if i < 2 || !(toks[i-2].kind == tkOp && (toks[i-2].val == "|" || toks[i-2].val == "." && pureMethods[toks[i-1].val])) {
						return nil
					}
				} else if t.val == "(" && i > 0 && (toks[i-1].val == ")" || toks[i-1].val == "]") && toks[i-1].kind == tkOp {
					return nil // calling what a call or a subscript returned
				}
				depth++
			case ")", "]":
				if depth--; depth < 0 {
					return nil
				}
			case "+":
				if depth > 0 {
					continue
				}
				if i == operandStart || i+1 == len(toks) {
					return nil // a unary + or a dangling one
				}
				if len(plus) == 0 {
					firstIsString = stringOperand(operandStart, i)
				} else if len(plus) == 1 && !firstIsString && !stringOperand(operandStart, i) {
					return nil // neither of the first two operands is a string literal
				}
				plus = append(plus, i)
				operandStart = i + 1
			case ".", "|", ",", ":":
				if depth == 0 && (t.val == "," || t.val == ":") {
					return nil
				}
			default:
				if depth == 0 {
					return nil // - * / % ~ ** // comparisons and the rest
				}
			}
		}
	}
	if depth != 0 || len(plus) == 0 {
		return nil
	}
	if len(plus) == 1 && !firstIsString && !stringOperand(operandStart, len(toks)) {
		return nil
	}
	// Operands must not start with a sign (the library binds unary signs before filters).
	for _, p := range plus {
		if n := toks[p+1]; n.kind == tkOp && (n.val == "+" || n.val == "-") {
			return nil
		}
	}
	if toks[0].kind == tkOp && (toks[0].val == "+" || toks[0].val == "-") {
		return nil
	}
	return plus
}
