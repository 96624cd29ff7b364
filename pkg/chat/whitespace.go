package chat

import "strings"

// Jinja2's whitespace control, applied to the template source before the library sees it.
//
// The library (ardanlabs/jinja v1.12.0, the newest release) implements trim_blocks,
// lstrip_blocks and the "-" markers by looking, from each tag, for the nearest text segment
// in the given direction, skipping any tags in between. Jinja2's lexer only ever touches the
// text right next to the tag. So in {% for m in messages %}{{ m.content }}\n{% endfor %} the
// for tag's trim_blocks eats the "\n" after {{ m.content }}, in every iteration; a {{- right
// after {% endfor %} trims the end of the loop body; {% if %}  {% endif %} loses its spaces.
// It also strips only ASCII whitespace where Jinja2 strips Python's (str.rstrip, \s).
//
// rewriteWhitespace does Jinja2's work itself and hands the library a source with nothing
// left to trim: every text segment is cut as Jinja2's lexer cuts it (Lexer.tokeniter:
// "-" strips all Python whitespace on its side, lstrip_blocks strips a line's whitespace
// before a block or comment tag that starts it, trim_blocks one "\n" after a block or comment
// tag, "+" turns the defaults off, {% raw %} takes no trim_blocks), then every block and
// comment tag is written with "+" on both sides (which turns the library's defaults off) and
// every "-" marker is dropped. The result renders the text Jinja2 renders, as long as this
// scanner finds the tags where the library's scanner does: it follows the library's rules
// (strings with backslash escapes, brackets nesting, comments up to the first "#}", raw
// blocks up to {% endraw %}), and a source it cannot read is returned unchanged for the
// library to report.
//
// Patching the library was the alternative; the fix here stays in this package, and the
// probes of tools/chat/gen.py (TestProbes) check it against Jinja2.
func rewriteWhitespace(src string) string {
	segs, ok := scanSegments(src)
	if !ok {
		return src
	}
	tagged := false
	for _, s := range segs {
		if s.kind != wsText {
			tagged = true
			break
		}
	}
	if !tagged {
		return src
	}
	// Cut each text as Jinja2 does: first the side after the previous tag (its closer's
	// match), then the side before the next tag (the opener's rule, which sees whether
	// the previous match ended a line).
	lineStart := true
	for i := range segs {
		s := &segs[i]
		if s.kind != wsText {
			continue
		}
		text := s.text
		if i > 0 {
			p := &segs[i-1]
			switch {
			case p.right == '-':
				rest := strings.TrimLeftFunc(text, pyIsSpace)
				lineStart = len(rest) < len(text) && text[len(text)-len(rest)-1] == '\n'
				text = rest
			case p.right == '+' || p.kind == wsExpr || p.raw:
				lineStart = false
			default: // a block or comment tag: trim_blocks
				lineStart = strings.HasPrefix(text, "\n")
				if lineStart {
					text = text[1:]
				}
			}
		}
		if i+1 < len(segs) {
			n := &segs[i+1]
			switch {
			case n.left == '-':
				text = pyRStrip(text)
			case n.left == '+' || n.kind == wsExpr:
			default: // a block or comment tag: lstrip_blocks
				l := strings.LastIndexByte(text, '\n') + 1
				if (l > 0 || lineStart) && l < len(text) && strings.TrimLeftFunc(text[l:], pyIsSpace) == "" {
					text = text[:l]
				}
			}
		}
		s.text = text
	}
	var b strings.Builder
	b.Grow(len(src) + 4*len(segs))
	for i, s := range segs {
		switch s.kind {
		case wsText:
			t := s.text
			// A "{" left right before a tag would open a tag with the tag's own "{"
			// ("{{%"): print it instead. (Inside raw blocks the library looks only for
			// {% endraw %}, so there it stays.)
			if !s.inRaw && strings.HasSuffix(t, "{") && i+1 < len(segs) {
				t = t[:len(t)-1] + "{{ '{' }}"
			}
			b.WriteString(t)
		case wsExpr:
			b.WriteString("{{")
			body := s.text
			if strings.HasPrefix(body, "-") || strings.HasPrefix(body, "+") {
				b.WriteByte(' ')
			}
			b.WriteString(body)
			if strings.HasSuffix(body, "-") || strings.HasSuffix(body, "+") {
				b.WriteByte(' ')
			}
			b.WriteString("}}")
		case wsStmt:
			b.WriteString("{%+")
			b.WriteString(s.text)
			b.WriteString("+%}")
		case wsComment:
			b.WriteString("{#+")
			b.WriteString(s.text)
			b.WriteString("+#}")
		}
	}
	return b.String()
}

type wsKind uint8

const (
	wsText wsKind = iota
	wsExpr
	wsStmt
	wsComment
)

// wsSegment is a piece of the source as the library's scanner cuts it: a text, or a tag
// with its body (without the markers) and markers ('-', '+' or 0).
type wsSegment struct {
	kind        wsKind
	text        string
	left, right byte
	raw         bool // a {% raw %} tag: no trim_blocks after it
	inRaw       bool // a text inside a raw block
}

// scanSegments cuts src into texts and tags by the library's scanner rules. It fails on an
// unterminated tag or raw block.
func scanSegments(src string) ([]wsSegment, bool) {
	var segs []wsSegment
	textStart := 0
	i := 0
	for i < len(src) {
		if src[i] != '{' || i+1 >= len(src) {
			i++
			continue
		}
		var kind wsKind
		var closer string
		switch src[i+1] {
		case '{':
			kind, closer = wsExpr, "}}"
		case '%':
			kind, closer = wsStmt, "%}"
		case '#':
			kind, closer = wsComment, "#}"
		default:
			i++
			continue
		}
		if i > textStart {
			segs = append(segs, wsSegment{kind: wsText, text: src[textStart:i]})
		}
		seg, end, ok := scanTag(src, i+2, kind, closer)
		if !ok {
			return nil, false
		}
		i = end
		if kind == wsStmt && strings.TrimSpace(seg.text) == "raw" {
			seg.raw = true
			segs = append(segs, seg)
			body, at, ok := scanRawBody(src, i)
			if !ok {
				return nil, false
			}
			if body != "" {
				segs = append(segs, wsSegment{kind: wsText, text: body, inRaw: true})
			}
			i = at
			textStart = i
			continue
		}
		segs = append(segs, seg)
		textStart = i
	}
	if textStart < len(src) {
		segs = append(segs, wsSegment{kind: wsText, text: src[textStart:]})
	}
	return segs, true
}

// scanTag reads a tag whose opener ends before i, as the library's scanner does: an optional
// marker, then up to the first closer (with an optional marker before it) outside strings
// and, except in comments, outside brackets.
func scanTag(src string, i int, kind wsKind, closer string) (wsSegment, int, bool) {
	seg := wsSegment{kind: kind}
	if i < len(src) && (src[i] == '-' || src[i] == '+') {
		seg.left = src[i]
		i++
	}
	start := i
	depth := 0
	for i < len(src) {
		c := src[i]
		if kind != wsComment && (c == '\'' || c == '"') {
			i++
			for i < len(src) && src[i] != c {
				if src[i] == '\\' && i+1 < len(src) {
					i++
				}
				i++
			}
			if i < len(src) {
				i++
			}
			continue
		}
		if depth == 0 && (c == '-' || c == '+') && i+2 < len(src) && src[i+1] == closer[0] && src[i+2] == closer[1] {
			seg.text, seg.right = src[start:i], c
			return seg, i + 3, true
		}
		if depth == 0 && i+1 < len(src) && c == closer[0] && src[i+1] == closer[1] {
			seg.text = src[start:i]
			return seg, i + 2, true
		}
		if kind != wsComment {
			switch c {
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				depth--
			}
		}
		i++
	}
	return seg, 0, false
}

// scanRawBody returns the text of a raw block starting at i and the offset of its
// {% endraw %} tag, found as the library finds it: the first "{%" whose text up to the next
// "%}" is endraw. The next "%}" is remembered, so the scan is linear.
func scanRawBody(src string, i int) (string, int, bool) {
	closeAt := -1 // offset of the next "%}" at or after the current opener's body
	for j := i; j+1 < len(src); j++ {
		if src[j] != '{' || src[j+1] != '%' {
			continue
		}
		if closeAt < j+2 {
			e := strings.Index(src[j+2:], "%}")
			if e < 0 {
				return "", 0, false
			}
			closeAt = j + 2 + e
		}
		if strings.TrimSpace(strings.Trim(strings.TrimSpace(src[j+2:closeAt]), "-+")) == "endraw" {
			return src[i:j], j, true
		}
	}
	return "", 0, false
}
