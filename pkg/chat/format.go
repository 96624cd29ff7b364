package chat

import (
	"strings"
)

// Content formats of a template (wire/vllm-chat.md §4): how message content reaches it.
const (
	FormatString = "string" // content is a string: text parts joined with "\n"
	FormatOpenAI = "openai" // content is a list of {"type": "text", "text": ...} parts
)

// DetectContentFormat decides the content format of a template source as vLLM's
// _detect_content_format does on the Jinja AST (§4): follow the variables assigned from
// messages (directly or behind filters, tests and slices), the loop targets over them, and
// answer "openai" iff some loop iterates over such a message's content. A template that
// does not parse, or a non-name target on those paths, is "string".
//
// ardanlabs/jinja does not export its AST, so this walks the template's tags with a small
// Jinja lexer and expression parser that knows only what the rules look at: assignment
// targets, for-loop targets and iterables, and the shape of their expressions.
func DetectContentFormat(source string) string {
	stmts, ok := scanStatements(prepareSource(source))
	if !ok {
		return FormatString
	}
	type assign struct {
		target string // "" for a target that is not a plain name
		rhs    *node
	}
	type loop struct {
		target string
		iter   *node
	}
	var assigns []assign
	var loops []loop
	for _, s := range stmts {
		p := &exprParser{toks: s}
		if len(s) == 0 || s[0].kind != tkName {
			continue
		}
		switch s[0].val {
		case "for":
			p.pos = 1
			target, ok := p.assignTarget("in")
			if !ok || !p.accept(tkName, "in") {
				return FormatString
			}
			iter, ok := p.tuple(false, "recursive")
			if !ok {
				return FormatString
			}
			loops = append(loops, loop{target, iter})
		case "set":
			p.pos = 1
			target, ok := p.assignTarget("")
			if !ok {
				return FormatString
			}
			if !p.accept(tkOp, "=") {
				continue // {% set x %}...{% endset %}: an AssignBlock, not an Assign
			}
			rhs, ok := p.tuple(true, "")
			if !ok {
				return FormatString
			}
			assigns = append(assigns, assign{target, rhs})
		}
	}
	// _iter_nodes_assign_var_or_elems: a BFS over names assigned from messages.
	lists := []string{"messages"}
	seen := map[string]bool{"messages": true}
	for q := 0; q < len(lists); q++ {
		for _, a := range assigns {
			if !isVarOrElems(a.rhs, lists[q], "") {
				continue
			}
			if a.target == "" {
				return FormatString // vLLM's assert isinstance(lhs, Name) fails
			}
			if !seen[a.target] {
				seen[a.target] = true
				lists = append(lists, a.target)
			}
		}
	}
	var msgVars []string
	for _, l := range loops {
		for _, name := range lists {
			if isVarOrElems(l.iter, name, "") {
				if l.target == "" {
					return FormatString
				}
				msgVars = append(msgVars, l.target)
				break
			}
		}
	}
	for _, l := range loops {
		for _, name := range msgVars {
			if isVarOrElems(l.iter, name, "content") {
				if l.target == "" {
					return FormatString
				}
				return FormatOpenAI
			}
		}
	}
	return FormatString
}

// isVarOrElems is vLLM's _is_var_or_elems_access: n is the variable (or, with key, its
// key member), possibly behind filters, tests or a slice.
func isVarOrElems(n *node, name, key string) bool {
	for n != nil {
		switch {
		case n.kind == nFilter || n.kind == nTest:
			n = n.sub
			continue
		case n.kind == nGetitem && n.arg != nil && n.arg.kind == nSlice:
			n = n.sub
			continue
		}
		break
	}
	if n == nil {
		return false
	}
	if key == "" {
		return n.kind == nName && n.name == name
	}
	switch n.kind {
	case nGetattr:
		return n.name == key && n.sub.kind == nName && n.sub.name == name
	case nGetitem:
		return n.arg != nil && n.arg.kind == nConst && n.arg.str && n.arg.name == key && n.sub.kind == nName && n.sub.name == name
	}
	return false
}

// ---- template lexer: statement tags as expression tokens ----

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
				fn(false, toks)
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
			fn(true, toks)
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

// ---- expression parser (Jinja2's precedence; only the node shapes §4 needs) ----

type nodeKind uint8

const (
	nOther   nodeKind = iota // anything the rules do not look into
	nName                    // name
	nConst                   // a literal; str set for strings (name holds the value)
	nGetattr                 // sub.name
	nGetitem                 // sub[arg]
	nSlice                   // a slice subscript
	nFilter                  // sub|filter
	nTest                    // sub is test
)

type node struct {
	kind nodeKind
	name string
	str  bool
	sub  *node
	arg  *node
}

var other = &node{kind: nOther}

type exprParser struct {
	toks []token
	pos  int
}

func (p *exprParser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

func (p *exprParser) is(kind tokKind, val string) bool {
	t := p.peek()
	return t.kind == kind && t.val == val
}

func (p *exprParser) accept(kind tokKind, val string) bool {
	if p.is(kind, val) {
		p.pos++
		return true
	}
	return false
}

// assignTarget parses a for/set target: a name (returned), or a tuple or namespace
// reference (returned as ""). stop is a name ending the target ("in" for loops).
func (p *exprParser) assignTarget(stop string) (string, bool) {
	paren := p.accept(tkOp, "(")
	t := p.peek()
	if t.kind != tkName {
		return "", false
	}
	p.pos++
	name := t.val
	if p.accept(tkOp, ".") { // namespace reference ns.attr
		if p.peek().kind != tkName {
			return "", false
		}
		p.pos++
		name = ""
	}
	for p.accept(tkOp, ",") {
		name = ""
		if p.is(tkName, stop) || p.is(tkOp, ")") || p.is(tkOp, "=") {
			break
		}
		if p.peek().kind != tkName {
			return "", false
		}
		p.pos++
	}
	if paren && !p.accept(tkOp, ")") {
		return "", false
	}
	return name, true
}

// tuple parses an expression, or a tuple of them (returned as nOther). With condexpr
// false, a bare "if" ends it (the iterable of a for loop); stop is a name that also ends it.
func (p *exprParser) tuple(condexpr bool, stop string) (*node, bool) {
	first, ok := p.expression(condexpr)
	if !ok {
		return nil, false
	}
	if !p.is(tkOp, ",") {
		return first, true
	}
	for p.accept(tkOp, ",") {
		if p.pos >= len(p.toks) || p.is(tkName, stop) || p.is(tkName, "if") {
			break
		}
		if _, ok := p.expression(condexpr); !ok {
			return nil, false
		}
	}
	return other, true
}

func (p *exprParser) expression(condexpr bool) (*node, bool) {
	n, ok := p.or()
	if !ok || !condexpr {
		return n, ok
	}
	for p.accept(tkName, "if") {
		if _, ok := p.or(); !ok {
			return nil, false
		}
		if p.accept(tkName, "else") {
			if _, ok := p.expression(true); !ok {
				return nil, false
			}
		}
		n = other
	}
	return n, true
}

func (p *exprParser) binary(next func() (*node, bool), ops ...string) (*node, bool) {
	n, ok := next()
	if !ok {
		return nil, false
	}
	for {
		matched := false
		for _, op := range ops {
			if (op == "and" || op == "or") && p.accept(tkName, op) || op != "and" && op != "or" && p.accept(tkOp, op) {
				matched = true
				break
			}
		}
		if !matched {
			return n, true
		}
		if _, ok := next(); !ok {
			return nil, false
		}
		n = other
	}
}

func (p *exprParser) or() (*node, bool)  { return p.binary(p.and, "or") }
func (p *exprParser) and() (*node, bool) { return p.binary(p.not, "and") }

func (p *exprParser) not() (*node, bool) {
	if p.accept(tkName, "not") {
		if _, ok := p.not(); !ok {
			return nil, false
		}
		return other, true
	}
	return p.compare()
}

func (p *exprParser) compare() (*node, bool) {
	n, ok := p.math1()
	if !ok {
		return nil, false
	}
	for {
		switch {
		case p.accept(tkOp, "=="), p.accept(tkOp, "!="), p.accept(tkOp, "<"), p.accept(tkOp, "<="),
			p.accept(tkOp, ">"), p.accept(tkOp, ">="), p.accept(tkName, "in"):
		case p.is(tkName, "not") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tkName && p.toks[p.pos+1].val == "in":
			p.pos += 2
		default:
			return n, true
		}
		if _, ok := p.math1(); !ok {
			return nil, false
		}
		n = other
	}
}

func (p *exprParser) math1() (*node, bool) { return p.binary(p.concat, "+", "-") }
func (p *exprParser) concat() (*node, bool) {
	return p.binary(p.math2, "~")
}
func (p *exprParser) math2() (*node, bool) { return p.binary(p.pow, "*", "/", "//", "%") }
func (p *exprParser) pow() (*node, bool)   { return p.binary(p.unaryFiltered, "**") }

func (p *exprParser) unaryFiltered() (*node, bool) { return p.unary(true) }

func (p *exprParser) unary(withFilter bool) (*node, bool) {
	var n *node
	if p.accept(tkOp, "-") || p.accept(tkOp, "+") {
		if _, ok := p.unary(false); !ok {
			return nil, false
		}
		n = other
	} else {
		var ok bool
		if n, ok = p.primary(); !ok {
			return nil, false
		}
		if n, ok = p.postfix(n); !ok {
			return nil, false
		}
	}
	if withFilter {
		return p.filterExpr(n)
	}
	return n, true
}

func (p *exprParser) primary() (*node, bool) {
	t := p.peek()
	switch t.kind {
	case tkName:
		p.pos++
		switch t.val {
		case "true", "false", "none", "True", "False", "None":
			return &node{kind: nConst}, true
		}
		return &node{kind: nName, name: t.val}, true
	case tkString:
		s := t.val
		p.pos++
		for p.peek().kind == tkString { // adjacent literals concatenate
			s += p.peek().val
			p.pos++
		}
		return &node{kind: nConst, str: true, name: s}, true
	case tkNumber:
		p.pos++
		return &node{kind: nConst}, true
	case tkOp:
		switch t.val {
		case "(":
			p.pos++
			if p.accept(tkOp, ")") {
				return other, true
			}
			n, ok := p.tuple(true, "")
			if !ok || !p.accept(tkOp, ")") {
				return nil, false
			}
			return n, true
		case "[":
			p.pos++
			if !p.seq("]", false) {
				return nil, false
			}
			return other, true
		case "{":
			p.pos++
			if !p.seq("}", true) {
				return nil, false
			}
			return other, true
		}
	}
	return nil, false
}

// seq parses the rest of a list or dict literal up to closer.
func (p *exprParser) seq(closer string, dict bool) bool {
	for !p.accept(tkOp, closer) {
		if _, ok := p.expression(true); !ok {
			return false
		}
		if dict {
			if !p.accept(tkOp, ":") {
				return false
			}
			if _, ok := p.expression(true); !ok {
				return false
			}
		}
		if !p.accept(tkOp, ",") && !p.is(tkOp, closer) {
			return false
		}
	}
	return true
}

func (p *exprParser) postfix(n *node) (*node, bool) {
	for {
		switch {
		case p.accept(tkOp, "."):
			t := p.peek()
			switch t.kind {
			case tkName:
				p.pos++
				n = &node{kind: nGetattr, name: t.val, sub: n}
			case tkNumber:
				p.pos++
				n = &node{kind: nGetitem, sub: n, arg: &node{kind: nConst}}
			default:
				return nil, false
			}
		case p.accept(tkOp, "["):
			arg, ok := p.subscripts()
			if !ok {
				return nil, false
			}
			n = &node{kind: nGetitem, sub: n, arg: arg}
		case p.is(tkOp, "("):
			if !p.callArgs() {
				return nil, false
			}
			n = other
		default:
			return n, true
		}
	}
}

// subscripts parses the inside of [...] after the bracket: one subscript (a slice or an
// expression) or a tuple of them (nOther).
func (p *exprParser) subscripts() (*node, bool) {
	var args []*node
	for {
		a, ok := p.subscript()
		if !ok {
			return nil, false
		}
		args = append(args, a)
		if p.accept(tkOp, "]") {
			break
		}
		if !p.accept(tkOp, ",") {
			return nil, false
		}
		if p.accept(tkOp, "]") {
			args = append(args, other)
			break
		}
	}
	if len(args) > 1 {
		return other, true
	}
	return args[0], true
}

func (p *exprParser) subscript() (*node, bool) {
	var first *node
	if !p.is(tkOp, ":") {
		n, ok := p.expression(true)
		if !ok {
			return nil, false
		}
		if !p.is(tkOp, ":") {
			return n, true
		}
		first = n
	}
	_ = first
	p.pos++ // ':'
	if !p.is(tkOp, "]") && !p.is(tkOp, ",") && !p.is(tkOp, ":") {
		if _, ok := p.expression(true); !ok {
			return nil, false
		}
	}
	if p.accept(tkOp, ":") && !p.is(tkOp, "]") && !p.is(tkOp, ",") {
		if _, ok := p.expression(true); !ok {
			return nil, false
		}
	}
	return &node{kind: nSlice}, true
}

// callArgs parses (...) call arguments: positional, name=value, *args and **kwargs.
func (p *exprParser) callArgs() bool {
	if !p.accept(tkOp, "(") {
		return false
	}
	for !p.accept(tkOp, ")") {
		if p.accept(tkOp, "*") || p.accept(tkOp, "**") {
		} else if p.peek().kind == tkName && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tkOp && p.toks[p.pos+1].val == "=" {
			p.pos += 2
		}
		if _, ok := p.expression(true); !ok {
			return false
		}
		if !p.accept(tkOp, ",") && !p.is(tkOp, ")") {
			return false
		}
	}
	return true
}

func (p *exprParser) filterExpr(n *node) (*node, bool) {
	for {
		switch {
		case p.accept(tkOp, "|"):
			if p.peek().kind != tkName {
				return nil, false
			}
			p.pos++
			for p.is(tkOp, ".") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tkName {
				p.pos += 2
			}
			if p.is(tkOp, "(") && !p.callArgs() {
				return nil, false
			}
			n = &node{kind: nFilter, sub: n}
		case p.accept(tkName, "is"):
			p.accept(tkName, "not")
			if p.peek().kind != tkName {
				return nil, false
			}
			p.pos++
			for p.is(tkOp, ".") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tkName {
				p.pos += 2
			}
			t := p.peek()
			switch {
			case p.is(tkOp, "("):
				if !p.callArgs() {
					return nil, false
				}
			case (t.kind == tkName || t.kind == tkString || t.kind == tkNumber || p.is(tkOp, "[") || p.is(tkOp, "{")) &&
				!(t.kind == tkName && (t.val == "else" || t.val == "or" || t.val == "and")):
				a, ok := p.primary()
				if !ok {
					return nil, false
				}
				if _, ok := p.postfix(a); !ok {
					return nil, false
				}
			}
			n = &node{kind: nTest, sub: n}
		case p.is(tkOp, "("):
			if !p.callArgs() {
				return nil, false
			}
			n = other
		default:
			return n, true
		}
	}
}
