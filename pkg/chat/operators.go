package chat

import (
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Python's operators where the library is lenient. Jinja2 evaluates + - ~ and % with
// Python's operators and iterates a for loop's value with iter(), so 'a' + 1, 'a' + none,
// list + tuple, {} + {}, 'a' - 'b', 1 % 0 raise TypeError or ZeroDivisionError, anything +
// an undefined name raises UndefinedError, and {% for x in none %} raises TypeError; vLLM
// answers each with a 400. The library prints both operands of a + next to each other as
// soon as one is a string, treats other operands as numbers, iterates None as empty, formats
// str % args with Go's fmt.Sprintf, prints lists in ~ with its own repr, and binds ~ looser
// than + and - (Jinja2: tighter), so the gateway would route prompts the engine never
// computes.
//
// The library cannot be given operators, so rewriteOperators rewrites them into private
// filters a render variable implements with Python's rules: A + B becomes
// (A)|__kvgate_add(B), and likewise - (__kvgate_sub), ~ (__kvgate_tilde, pyfilters.go) and %
// (__kvgate_mod, pyformat.go); a for loop's iterable X becomes (X)|__kvgate_iter. The
// operands are found by jinjaexpr.go's parser, which has Jinja2's precedence, in {{ }} tags
// and in the expressions of if, elif, set and for; a tag it cannot read, and every other
// statement, is left as it is. The filters return what the library returns wherever Python
// does not raise (one exception: tuple + tuple is a list, as it is in the library). The split
// chains of rewriteConcat get the same check per operand (__kvgate_cat: the operand must be
// a string).
//
// The iterable, sequence, callable, number and integer tests are rewritten likewise, X is
// [not] T into (X)|__kvgate_test('T', not negated): Jinja2's undefined is iterable, a
// sequence and callable (it has __iter__, __len__, __getitem__ and __call__), the library's
// is none of them; a big integer (bigint.go) is a number and an integer and not callable, and
// a bool is a number (numbers.Number), which the library's tests do not know.
const (
	addFilterName  = "__kvgate_add"
	subFilterName  = "__kvgate_sub"
	iterFilterName = "__kvgate_iter"
	catFilterName  = "__kvgate_cat"
	testFilterName = "__kvgate_test"
)

// binaryFilterNames are the private filters of the binary operators rewriteOperators
// rewrites (arith.go has * / // ** and the ordering comparisons).
var binaryFilterNames = map[string]string{
	"+": addFilterName, "-": subFilterName, "~": tildeFilterName, "%": modFilterName,
	"*": mulFilterName, "/": divFilterName, "//": floorDivFilterName, "**": powFilterName,
	"<": ltFilterName, "<=": leFilterName, ">": gtFilterName, ">=": geFilterName,
}

// opEdit is one change of rewriteOperators: text inserted at pos, replacing n bytes there.
type opEdit struct {
	pos, rank, n int
	text         string
}

// Ranks order the edits at one offset: closers of operands, then closers of loop
// iterables (which enclose them), then openers, then the operator replaced.
const (
	rankClose = iota
	rankCloseIter
	rankOpen
	rankReplace
)

func rewriteOperators(src string) string { return rewriteOps(src, false) }

// rewriteBigOperators is rewriteOperators for a template's big variant (bigeq.go): ==, !=,
// in, not in and the equality tests too.
func rewriteBigOperators(src string) string { return rewriteOps(src, true) }

func rewriteOps(src string, big bool) string {
	var edits []opEdit
	ok := scanTagsAt(src, func(statement bool, toks []token, end int) {
		if len(toks) == 0 {
			return
		}
		closeAt := end - 2
		if c := src[closeAt-1]; c == '-' || c == '+' {
			closeAt--
		}
		edits = append(edits, operatorEdits(statement, toks, closeAt, big)...)
	})
	if !ok || len(edits) == 0 {
		return src
	}
	sort.SliceStable(edits, func(i, j int) bool {
		if edits[i].pos != edits[j].pos {
			return edits[i].pos < edits[j].pos
		}
		return edits[i].rank < edits[j].rank
	})
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

// operatorEdits returns the edits of one tag (its tokens; closeAt: the offset of its closer),
// or nil when the parser cannot read all of it; big adds the big variant's edits.
func operatorEdits(statement bool, toks []token, closeAt int, big bool) []opEdit {
	offset := func(i int) int {
		if i < len(toks) {
			return toks[i].pos
		}
		return closeAt
	}
	var tag []opEdit
	p := &exprParser{toks: toks, rec: func(op string, start, at, end int) {
		if test, ok := strings.CutPrefix(op, "is "); ok {
			negated := strings.HasPrefix(test, "not ")
			test = strings.TrimPrefix(test, "not ")
			last := toks[end-1]
			tag = append(tag,
				opEdit{pos: toks[start].pos, rank: rankOpen, text: "("},
				opEdit{pos: toks[at].pos, rank: rankReplace, n: last.pos + len(last.val) - toks[at].pos,
					text: fmt.Sprintf(")|%s('%s', %t)", testFilterName, test, !negated)})
			return
		}
		if op == "neg" {
			tag = append(tag,
				opEdit{pos: toks[at].pos, rank: rankReplace, n: 1, text: "("},
				opEdit{pos: offset(end), rank: rankClose, text: ")|" + negFilterName})
			return
		}
		name, n := binaryFilterNames[op], len(toks[at].val)
		if f, ok := equalityOps[op]; ok {
			name = f
			if op == "not in" {
				n = toks[at+1].pos + len(toks[at+1].val) - toks[at].pos
			}
		}
		tag = append(tag,
			opEdit{pos: toks[start].pos, rank: rankOpen, text: "("},
			opEdit{pos: toks[at].pos, rank: rankReplace, n: n, text: ")|" + name + "("},
			opEdit{pos: offset(end), rank: rankClose, text: ")"})
	}}
	p.eq = big
	p.recChain = func(start int, ops []int, end int) { tag = append(tag, chainEdits(toks, start, ops, offset(end))...) }
	// X is T(Y) becomes (X)|filter(Y); X is T Y becomes (X)|filter(Y).
	p.recTest = func(filter string, start, at, nameEnd, argEnd int) {
		last := toks[nameEnd-1]
		replace := opEdit{pos: toks[at].pos, rank: rankReplace, n: last.pos + len(last.val) - toks[at].pos, text: ")|" + filter}
		tag = append(tag, opEdit{pos: toks[start].pos, rank: rankOpen, text: "("})
		if argEnd < 0 {
			tag = append(tag, replace)
			return
		}
		replace.n = toks[nameEnd].pos - toks[at].pos
		replace.text += "("
		tag = append(tag, replace, opEdit{pos: offset(argEnd), rank: rankClose, text: ")"})
	}
	if !statement {
		if _, ok := p.tuple(true, ""); !ok || p.pos != len(toks) {
			return nil
		}
		return tag
	}
	if toks[0].kind != tkName {
		return nil
	}
	p.pos = 1
	switch toks[0].val {
	case "if", "elif":
		if _, ok := p.expression(true); !ok {
			return nil
		}
	case "set":
		if _, ok := p.assignTarget(""); !ok || !p.accept(tkOp, "=") {
			return nil
		}
		if _, ok := p.tuple(true, ""); !ok {
			return nil
		}
	case "for":
		if _, ok := p.assignTarget("in"); !ok || !p.accept(tkName, "in") {
			return nil
		}
		start := p.pos
		if _, ok := p.tuple(false, ""); !ok || p.pos == start {
			return nil
		}
		tag = append(tag,
			opEdit{pos: toks[start].pos, rank: rankOpen, text: "("},
			opEdit{pos: offset(p.pos), rank: rankCloseIter, text: ")|" + iterFilterName + " "})
		if p.accept(tkName, "if") {
			if _, ok := p.expression(true); !ok {
				return nil
			}
		}
		p.accept(tkName, "recursive")
	default:
		return nil
	}
	if p.pos != len(toks) {
		return nil
	}
	return tag
}

// chainEdits are the edits of a comparison chain (its first operand's start, its operators'
// token indexes, the offset of its end): a < b <= c becomes
// (a)|__kvgate_chain('<', (b), '<=', (c)).
func chainEdits(toks []token, start int, ops []int, end int) []opEdit {
	edits := []opEdit{{pos: toks[start].pos, rank: rankOpen, text: "("}}
	for i, at := range ops {
		op, n := toks[at].val, len(toks[at].val)
		if op == "not" {
			op, n = "not in", toks[at+1].pos+len(toks[at+1].val)-toks[at].pos
		}
		text := "), '" + op + "', ("
		if i == 0 {
			text = ")|" + chainFilterName + "('" + op + "', ("
		}
		edits = append(edits, opEdit{pos: toks[at].pos, rank: rankReplace, n: n, text: text})
	}
	return append(edits, opEdit{pos: end, rank: rankClose, text: "))"})
}

// pyTypeNameOf is type(v).__name__ for the values a template sees (bool included).
func pyTypeNameOf(v jinja.Value) string {
	switch {
	case v.IsBool():
		return "bool"
	case v.IsInt(), isBigInt(v):
		return "int"
	case v.IsList() && isTuple(v):
		return "tuple"
	case v.IsCallable():
		return "function"
	}
	return pyTypeName(v)
}

// errUndefined is Jinja2's UndefinedError for an operand that is undefined; the library's
// undefined values do not carry their name.
func errUndefined(op string) error {
	return fmt.Errorf("UndefinedError: an undefined value is an operand of %s", op)
}

// binaryArgs returns a filter's operands.
func binaryArgs(name string, args []jinja.Value) (jinja.Value, jinja.Value, error) {
	if len(args) != 2 {
		return jinja.Value{}, jinja.Value{}, fmt.Errorf("%s takes two operands", name)
	}
	return args[0], args[1], nil
}

func isIntLike(v jinja.Value) bool { return v.IsInt() || v.IsBool() }

func asInt(v jinja.Value) int64 {
	if v.IsBool() {
		if v.AsBool() {
			return 1
		}
		return 0
	}
	return v.AsInt()
}

func asFloat(v jinja.Value) float64 {
	if v.IsFloat() {
		return v.AsFloat()
	}
	return float64(asInt(v))
}

func isNumeric(v jinja.Value) bool { return isIntLike(v) || v.IsFloat() }

// addFilter is Python's a + b.
func addFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("+", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsUndefined() || b.IsUndefined() {
		return jinja.Undefined(), errUndefined("+")
	}
	switch {
	case a.IsString():
		if b.IsString() {
			return jinja.NewString(a.AsString() + b.AsString()), nil
		}
		return jinja.Undefined(), fmt.Errorf(`TypeError: can only concatenate str (not "%s") to str`, pyTypeNameOf(b))
	case a.IsList():
		if !b.IsList() || isTuple(a) != isTuple(b) {
			return jinja.Undefined(), fmt.Errorf(`TypeError: can only concatenate %s (not "%s") to %s`, pyTypeNameOf(a), pyTypeNameOf(b), pyTypeNameOf(a))
		}
		x, y := a.AsList().Items, b.AsList().Items
		items := make([]jinja.Value, 0, len(x)+len(y))
		return jinja.NewList(append(append(items, x...), y...)), nil
	case isNumeric(a) && isNumeric(b):
		if a.IsFloat() || b.IsFloat() {
			return jinja.NewFloat(asFloat(a) + asFloat(b)), nil
		}
		x, y := asInt(a), asInt(b)
		if sum := x + y; (x >= 0) == (y >= 0) && (sum >= 0) != (x >= 0) {
			return newBigInt(new(big.Int).Add(big.NewInt(x), big.NewInt(y))), nil
		}
		return jinja.NewInt(x + y), nil
	}
	if v, ok, err := bigArith("+", a, b); ok {
		return v, err
	}
	return jinja.Undefined(), fmt.Errorf("TypeError: unsupported operand type(s) for +: '%s' and '%s'", pyTypeNameOf(a), pyTypeNameOf(b))
}

// subFilter is Python's a - b.
func subFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("-", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsUndefined() || b.IsUndefined() {
		return jinja.Undefined(), errUndefined("-")
	}
	if v, ok, err := bigArith("-", a, b); ok {
		return v, err
	}
	if !isNumeric(a) || !isNumeric(b) {
		return jinja.Undefined(), fmt.Errorf("TypeError: unsupported operand type(s) for -: '%s' and '%s'", pyTypeNameOf(a), pyTypeNameOf(b))
	}
	if a.IsFloat() || b.IsFloat() {
		return jinja.NewFloat(asFloat(a) - asFloat(b)), nil
	}
	x, y := asInt(a), asInt(b)
	if d := x - y; (x >= 0) != (y >= 0) && (d >= 0) != (x >= 0) {
		return newBigInt(new(big.Int).Sub(big.NewInt(x), big.NewInt(y))), nil
	}
	return jinja.NewInt(x - y), nil
}

// iterFilter is Python's iter() check of a for loop's value: numbers, None and callables
// are not iterable; an undefined value iterates as empty (Jinja2's Undefined.__iter__).
func iterFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), fmt.Errorf("for: no iterable")
	}
	v := args[0]
	if v.IsNone() || isNumeric(v) || v.IsCallable() { // a big integer too (callable)
		return jinja.Undefined(), fmt.Errorf("TypeError: '%s' object is not iterable", pyTypeNameOf(v))
	}
	return v, nil
}

// catFilter checks one operand of a string concatenation split by rewriteConcat: Python's +
// of a string accepts only a string.
func catFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), fmt.Errorf("+: no operand")
	}
	v := args[0]
	switch {
	case v.IsString():
		return v, nil
	case v.IsUndefined():
		return jinja.Undefined(), errUndefined("+")
	}
	return jinja.Undefined(), fmt.Errorf(`TypeError: can only concatenate str (not "%s") to str`, pyTypeNameOf(v))
}

// testFilter is Jinja2's iterable, sequence and callable tests (args: the value, the test's
// name, and whether the test is not negated), which answer True for an undefined value.
func testFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 3 || !args[1].IsString() || !args[2].IsBool() {
		return jinja.Undefined(), fmt.Errorf("is: bad test")
	}
	v := args[0]
	var r bool
	switch args[1].AsString() {
	case "iterable", "sequence":
		r = v.IsUndefined() || v.IsString() || v.IsList() || v.IsDict()
	case "callable":
		r = v.IsUndefined() || v.IsCallable() && !isBigInt(v)
	case "number": // isinstance(v, numbers.Number): bools too
		r = isPyNumber(v)
	case "integer": // isinstance(v, int), bools excepted
		r = v.IsInt() || isBigInt(v)
	}
	return jinja.NewBool(r == args[2].AsBool()), nil
}
