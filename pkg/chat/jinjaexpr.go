package chat

// An expression parser over jinjalex.go's tokens, with Jinja2's precedence, that builds only
// the node shapes DetectContentFormat's rules look at (wire/vllm-chat.md §4).

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
	// rec, if set, is told of every binary operator of recordedOps and of every ordering
	// comparison that is not chained (< <= > >=) with the token indexes of its left
	// operand's start, of the operator and of the end of its right operand (exclusive), of
	// every unary - but of a number literal (op "neg", the operator's index twice), and
	// of every argument-less "is [not] T" for T in testsOfUndefined (op "is T" or "is not
	// T", the subject's start, the "is" and the end of the test name).
	rec func(op string, start, at, end int)
	// eq makes rec also told of ==, !=, in and not in when not chained (op "not in" at the
	// "not"), and recTest of every test of equalityTests with an argument: the filter it
	// becomes (negated when "is not"), the subject's start, the "is", the end of the test
	// name, and the end of a bare argument (x is eq y; -1 for parentheses, x is eq(y)).
	eq      bool
	recTest func(filter string, start, at, nameEnd, argEnd int)
	// recChain, if set, is told of every comparison chain (a < b <= c, a == b in c): the
	// start of its first operand, the index of each operator ("not in" at the "not") and
	// the end of its last operand.
	recChain func(start int, ops []int, end int)
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
		if p.pos >= len(p.toks) || p.is(tkName, stop) || p.is(tkName, "if") || p.is(tkOp, ")") {
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
	start := p.pos
	n, ok := next()
	if !ok {
		return nil, false
	}
	for {
		matched := ""
		at := p.pos
		for _, op := range ops {
			if (op == "and" || op == "or") && p.accept(tkName, op) || op != "and" && op != "or" && p.accept(tkOp, op) {
				matched = op
				break
			}
		}
		if matched == "" {
			return n, true
		}
		if _, ok := next(); !ok {
			return nil, false
		}
		if p.rec != nil && recordedOps[matched] {
			p.rec(matched, start, at, p.pos)
		}
		n = other
	}
}

// recordedOps are the binary operators rec is told of.
var recordedOps = map[string]bool{"+": true, "-": true, "~": true, "%": true, "*": true, "/": true, "//": true, "**": true}

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
	start := p.pos
	n, ok := p.math1()
	if !ok {
		return nil, false
	}
	// An ordering comparison alone is recorded, and so is a chain (a < b < c).
	ops, orderAt, eqAt, eqOp := 0, -1, -1, ""
	var at []int
	defer func() {
		if ok && ops > 1 && p.recChain != nil {
			p.recChain(start, at, p.pos)
		}
		if !ok || ops != 1 || p.rec == nil {
			return
		}
		if orderAt >= 0 {
			p.rec(p.toks[orderAt].val, start, orderAt, p.pos)
		} else if eqAt >= 0 && p.eq {
			p.rec(eqOp, start, eqAt, p.pos)
		}
	}()
	for {
		ops++
		switch {
		case p.is(tkOp, "<") || p.is(tkOp, "<=") || p.is(tkOp, ">") || p.is(tkOp, ">="):
			orderAt = p.pos
		case p.is(tkOp, "==") || p.is(tkOp, "!=") || p.is(tkName, "in"):
			eqAt, eqOp = p.pos, p.peek().val
		case p.is(tkName, "not") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tkName && p.toks[p.pos+1].val == "in":
			eqAt, eqOp = p.pos, "not in"
		}
		at = append(at, p.pos)
		switch {
		case p.accept(tkOp, "=="), p.accept(tkOp, "!="), p.accept(tkOp, "<"), p.accept(tkOp, "<="),
			p.accept(tkOp, ">"), p.accept(tkOp, ">="), p.accept(tkName, "in"):
		case p.is(tkName, "not") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tkName && p.toks[p.pos+1].val == "in":
			p.pos += 2
		default:
			ops--
			at = at[:len(at)-1]
			return n, true
		}
		if _, ok = p.math1(); !ok {
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
	start := p.pos
	var n *node
	if p.accept(tkOp, "-") || p.accept(tkOp, "+") {
		neg := p.toks[start].val == "-"
		if _, ok := p.unary(false); !ok {
			return nil, false
		}
		// A negated number literal is left to the library (-1 is common and exact there).
		if neg && p.rec != nil && !(p.pos == start+2 && p.toks[start+1].kind == tkNumber) {
			p.rec("neg", start, start, p.pos)
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
		return p.filterExpr(n, start)
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

// filterExpr parses the filters, tests and calls after n, whose first token is at start.
func (p *exprParser) filterExpr(n *node, start int) (*node, bool) {
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
			at := p.pos - 1
			negated := p.accept(tkName, "not")
			if p.peek().kind != tkName {
				return nil, false
			}
			name := p.peek().val
			p.pos++
			if p.rec != nil && testsOfUndefined[name] && !p.is(tkOp, "(") && !p.is(tkOp, ".") && !startsTestArg(p.peek()) {
				op := "is " + name
				if negated {
					op = "is not " + name
				}
				p.rec(op, start, at, p.pos)
			}
			dotted := false
			for p.is(tkOp, ".") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tkName {
				p.pos += 2
				dotted = true
			}
			nameEnd := p.pos
			filters, isEqTest := equalityTests[name]
			recTest := func(argEnd int) {
				if p.eq && p.recTest != nil && isEqTest && !dotted {
					f := filters[0]
					if negated {
						f = filters[1]
					}
					p.recTest(f, start, at, nameEnd, argEnd)
				}
			}
			t := p.peek()
			switch {
			case p.is(tkOp, "("):
				if !p.callArgs() {
					return nil, false
				}
				recTest(-1)
			case (t.kind == tkName || t.kind == tkString || t.kind == tkNumber || p.is(tkOp, "[") || p.is(tkOp, "{")) &&
				!(t.kind == tkName && (t.val == "else" || t.val == "or" || t.val == "and")):
				a, ok := p.primary()
				if !ok {
					return nil, false
				}
				if _, ok := p.postfix(a); !ok {
					return nil, false
				}
				recTest(p.pos)
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

// testsOfUndefined are the tests that Jinja2 answers True for an undefined value (it has
// __iter__, __len__ and __getitem__, and __call__) and the library False, and the number
// tests, which must see big integers (operators.go's testFilter).
var testsOfUndefined = map[string]bool{"iterable": true, "sequence": true, "callable": true, "number": true, "integer": true}

// startsTestArg reports whether t would start the argument of a test written without
// parentheses (x is divisibleby 3), as filterExpr reads one.
func startsTestArg(t token) bool {
	switch t.kind {
	case tkName:
		return t.val != "else" && t.val != "or" && t.val != "and"
	case tkString, tkNumber:
		return true
	case tkOp:
		return t.val == "[" || t.val == "{"
	}
	return false
}
