package chat

import "strings"

// A small Jinja lexer for what the library does not expose: the tokens of statement and
// expression tags, read by DetectContentFormat, mayMutateValues and the source rewrites.

type tokKind uint8

const (
	tkName tokKind = iota + 1
	tkString
	tkNumber
	tkOp
)

type token struct {
	kind tokKind
	val  string // name, decoded string, number text or operator
	pos  int    // offset of the token in the source
}

// scanStatements returns the tokens of every {% ... %} tag in source order, skipping raw
// blocks, comments and {{ }} expressions. It fails on an unterminated tag or string.
func scanStatements(src string) ([][]token, bool) {
	var out [][]token
	ok := scanTags(src, func(statement bool, toks []token) {
		if statement {
			out = append(out, toks)
		}
	})
	return out, ok
}

// scanTags calls fn with the tokens of every {% ... %} (statement) and {{ ... }} tag in
// source order, skipping raw blocks and comments. It fails on an unterminated tag or string.
func scanTags(src string, fn func(statement bool, toks []token)) bool {
	return scanTagsAt(src, func(statement bool, toks []token, _ int) { fn(statement, toks) })
}

// scanTagsAt is scanTags that also gives the end of each tag (after its closer).
func scanTagsAt(src string, fn func(statement bool, toks []token, end int)) bool {
	i := 0
	for {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 {
			return true
		}
		i += j
		if i+1 >= len(src) {
			return true
		}
		switch src[i+1] {
		case '#':
			k := strings.Index(src[i+2:], "#}")
			if k < 0 {
				return false
			}
			i += 2 + k + 2
		case '{', '%':
			closer := "}}"
			if src[i+1] == '%' {
				closer = "%}"
			}
			toks, end, ok := lexTag(src, i+2, closer)
			if !ok {
				return false
			}
			i = end
			if closer == "}}" {
				fn(false, toks, end)
				continue
			}
			if len(toks) > 0 && toks[0].kind == tkName && toks[0].val == "raw" {
				// Skip to {% endraw %} (Jinja's raw block: the body is not lexed).
				k := indexEndraw(src, i)
				if k < 0 {
					return false
				}
				i = k
				continue
			}
			fn(true, toks, end)
		default:
			i++
		}
	}
}

// indexEndraw returns the end of the {% endraw %} tag at or after i, or -1.
func indexEndraw(src string, i int) int {
	for {
		j := strings.Index(src[i:], "{%")
		if j < 0 {
			return -1
		}
		k := i + j + 2
		for k < len(src) && (src[k] == '-' || src[k] == '+' || isJinjaSpace(src[k])) {
			k++
		}
		if strings.HasPrefix(src[k:], "endraw") {
			e := strings.Index(src[k:], "%}")
			if e < 0 {
				return -1
			}
			return k + e + 2
		}
		i = k
	}
}

func isJinjaSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// lexTag tokenizes a tag body starting at i up to its closer ("%}" or "}}", with an
// optional "-" or "+" before it) and returns the tokens and the end of the tag.
func lexTag(src string, i int, closer string) ([]token, int, bool) {
	var toks []token
	if i < len(src) && (src[i] == '-' || src[i] == '+') {
		i++
	}
	for i < len(src) {
		c := src[i]
		switch {
		case isJinjaSpace(c):
			i++
		case (c == '-' || c == '+') && strings.HasPrefix(src[i+1:], closer):
			return toks, i + 1 + len(closer), true
		case strings.HasPrefix(src[i:], closer):
			return toks, i + len(closer), true
		case c == '\'' || c == '"':
			s, end, ok := lexString(src, i)
			if !ok {
				return nil, 0, false
			}
			toks = append(toks, token{tkString, s, i})
			i = end
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (isIdent(src[j]) || src[j] == '.' && j+1 < len(src) && src[j+1] >= '0' && src[j+1] <= '9' ||
				(src[j] == '+' || src[j] == '-') && (src[j-1] == 'e' || src[j-1] == 'E')) {
				j++
			}
			toks = append(toks, token{tkNumber, src[i:j], i})
			i = j
		case isIdent(c):
			j := i
			for j < len(src) && isIdent(src[j]) {
				j++
			}
			toks = append(toks, token{tkName, src[i:j], i})
			i = j
		default:
			op := ""
			for _, o := range []string{"**", "//", "==", "!=", "<=", ">="} {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("+-/*%~[](){}<>=.:|,;", rune(c)) {
					return nil, 0, false
				}
				op = src[i : i+1]
			}
			toks = append(toks, token{tkOp, op, i})
			i += len(op)
		}
	}
	return nil, 0, false
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// lexString reads a Jinja string literal; escapes are kept as written except \' \" \\,
// which is enough to compare the constants the rules look at ('content').
func lexString(src string, i int) (string, int, bool) {
	q := src[i]
	var b strings.Builder
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			if j+1 < len(src) {
				j++
				if src[j] != q && src[j] != '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(src[j])
			}
		case q:
			return b.String(), j + 1, true
		default:
			b.WriteByte(src[j])
		}
	}
	return "", 0, false
}
