package chat

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Python's * / // ** unary - and the ordering comparisons, where the library is lenient:
// it answers 'a' < 1, none < 1 and [1] < 'a' (Jinja2: TypeError), 1 / 0 and 1 // 0
// (ZeroDivisionError), -'a' (TypeError), and knows no integer beyond int64 (bigint.go), so
// the gateway would route prompts the engine refuses with a 400. rewriteOperators rewrites
// them into these filters as it does + and - (operators.go); a negated number literal (-1)
// is left to the library, which gets it right.
//
// A comparison chain, a < b <= c, is Python's a < b and b <= c: the library compares it
// right for operands of one type but finds 1 < 2 < 'a' False where Python raises, so it
// becomes (a)|__kvgate_chain('<', (b), '<=', (c)), each comparison Python's, stopping at the
// first false one. Unlike Python, every operand is evaluated before the first comparison:
// one that raises when evaluated (an attribute of an undefined name) raises here even after
// a false comparison. No template of the sweep chains comparisons over such operands.

const (
	mulFilterName      = "__kvgate_mul"
	divFilterName      = "__kvgate_div"
	floorDivFilterName = "__kvgate_floordiv"
	powFilterName      = "__kvgate_pow"
	negFilterName      = "__kvgate_neg"
	ltFilterName       = "__kvgate_lt"
	leFilterName       = "__kvgate_le"
	gtFilterName       = "__kvgate_gt"
	geFilterName       = "__kvgate_ge"
	chainFilterName    = "__kvgate_chain"
)

// maxRepeat bounds the result of str * int and list * int (bytes or items): far beyond any
// prompt the renderer accepts, and small enough to allocate.
const maxRepeat = 1 << 24

func errUnsupported(op string, a, b jinja.Value) error {
	return fmt.Errorf("TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, pyTypeNameOf(a), pyTypeNameOf(b))
}

// numbers returns the operands of an arithmetic operator when both are Python numbers:
// as floats when either is a float, else as integers.
func numbers(a, b jinja.Value) (isFloat bool, x, y float64, i, j *big.Int, err error) {
	if a.IsFloat() || b.IsFloat() {
		if x, err = pyFloatOf(a); err == nil {
			y, err = pyFloatOf(b)
		}
		return true, x, y, nil, nil, err
	}
	i, _ = bigOf(a)
	j, _ = bigOf(b)
	return false, 0, 0, i, j, nil
}

func mulFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("*", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsUndefined() || b.IsUndefined() {
		return jinja.Undefined(), errUndefined("*")
	}
	if a.IsInt() && b.IsInt() {
		x, y := a.AsInt(), b.AsInt()
		if p := x * y; x == 0 || p/x == y && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64) {
			return jinja.NewInt(p), nil
		}
	}
	if isPyNumber(a) && isPyNumber(b) {
		isFloat, x, y, i, j, err := numbers(a, b)
		if err != nil {
			return jinja.Undefined(), err
		}
		if isFloat {
			return jinja.NewFloat(x * y), nil
		}
		return bigIntResult(i.Mul(i, j))
	}
	seq, n := a, b
	if isPyInt(a) {
		seq, n = b, a
	}
	if !seq.IsString() && !seq.IsList() {
		return jinja.Undefined(), errUnsupported("*", a, b)
	}
	if !isPyInt(n) {
		return jinja.Undefined(), fmt.Errorf("TypeError: can't multiply sequence by non-int of type '%s'", pyTypeNameOf(n))
	}
	if isBigInt(n) {
		return jinja.Undefined(), errors.New("OverflowError: cannot fit 'int' into an index-sized integer")
	}
	count := max(asInt(n), 0)
	if seq.IsString() {
		s := seq.AsString()
		if len(s) > 0 && count > maxRepeat/int64(len(s)) {
			return jinja.Undefined(), errors.New("MemoryError: a repeated string too large to render")
		}
		return jinja.NewString(strings.Repeat(s, int(count))), nil
	}
	items := seq.AsList().Items
	if len(items) > 0 && count > maxRepeat/int64(len(items)) {
		return jinja.Undefined(), errors.New("MemoryError: a repeated list too large to render")
	}
	out := make([]jinja.Value, 0, len(items)*int(count))
	for range count {
		out = append(out, items...)
	}
	return jinja.NewList(out), nil
}

func divFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("/", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsUndefined() || b.IsUndefined() {
		return jinja.Undefined(), errUndefined("/")
	}
	if !isPyNumber(a) || !isPyNumber(b) {
		return jinja.Undefined(), errUnsupported("/", a, b)
	}
	isFloat, x, y, i, j, err := numbers(a, b)
	if err != nil {
		return jinja.Undefined(), err
	}
	if isFloat {
		if y == 0 {
			return jinja.Undefined(), errors.New("ZeroDivisionError: float division by zero")
		}
		return jinja.NewFloat(x / y), nil
	}
	if j.Sign() == 0 {
		return jinja.Undefined(), errors.New("ZeroDivisionError: division by zero")
	}
	// int / int is correctly rounded in Python, as the exact quotient's nearest float is.
	f, _ := new(big.Rat).SetFrac(i, j).Float64()
	if math.IsInf(f, 0) {
		return jinja.Undefined(), errors.New("OverflowError: integer division result too large for a float")
	}
	return jinja.NewFloat(f), nil
}

func floorDivFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("//", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsUndefined() || b.IsUndefined() {
		return jinja.Undefined(), errUndefined("//")
	}
	if !isPyNumber(a) || !isPyNumber(b) {
		return jinja.Undefined(), errUnsupported("//", a, b)
	}
	isFloat, x, y, i, j, err := numbers(a, b)
	if err != nil {
		return jinja.Undefined(), err
	}
	if isFloat {
		if y == 0 {
			return jinja.Undefined(), errors.New("ZeroDivisionError: float floor division by zero")
		}
		return jinja.NewFloat(floatFloorDiv(x, y)), nil
	}
	if j.Sign() == 0 {
		return jinja.Undefined(), errors.New("ZeroDivisionError: integer division or modulo by zero")
	}
	q, m := new(big.Int).DivMod(i, j, new(big.Int)) // Euclidean: m >= 0
	if m.Sign() != 0 && j.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	return bigIntResult(q)
}

// floatFloorDiv is CPython's float floor division (float_floor_div, via _float_div_mod).
func floatFloorDiv(x, y float64) float64 {
	mod := math.Mod(x, y)
	div := (x - mod) / y
	if mod != 0 && (y < 0) != (mod < 0) {
		div -= 1.0
	}
	if div == 0 {
		return math.Copysign(0, x/y)
	}
	floor := math.Floor(div)
	if div-floor > 0.5 {
		floor += 1.0
	}
	return floor
}

func powFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("**", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsUndefined() || b.IsUndefined() {
		return jinja.Undefined(), errUndefined("**")
	}
	if !isPyNumber(a) || !isPyNumber(b) {
		return jinja.Undefined(), fmt.Errorf("TypeError: unsupported operand type(s) for ** or pow(): '%s' and '%s'", pyTypeNameOf(a), pyTypeNameOf(b))
	}
	isFloat, x, y, i, j, err := numbers(a, b)
	if err != nil {
		return jinja.Undefined(), err
	}
	if !isFloat && j.Sign() >= 0 {
		if i.CmpAbs(big.NewInt(1)) > 0 && (!j.IsInt64() || j.Int64() > maxIntDigits*4/int64(i.BitLen())) {
			return jinja.Undefined(), fmt.Errorf("ValueError: an integer result of more than %d digits", maxIntDigits)
		}
		return bigIntResult(new(big.Int).Exp(i, j, nil))
	}
	if !isFloat { // a negative integer exponent: a float power
		if x, err = bigToFloat(i); err == nil {
			y, err = bigToFloat(j)
		}
		if err != nil {
			return jinja.Undefined(), err
		}
	}
	switch {
	case x == 0 && y < 0:
		return jinja.Undefined(), errors.New("ZeroDivisionError: 0.0 cannot be raised to a negative power")
	case x < 0 && y != math.Trunc(y) && !math.IsInf(y, 0):
		return jinja.Undefined(), errors.New("ValueError: a negative number to a fractional power is a complex number")
	}
	p := math.Pow(x, y)
	if math.IsInf(p, 0) && !math.IsInf(x, 0) && !math.IsInf(y, 0) {
		return jinja.Undefined(), errors.New("OverflowError: (34, 'Numerical result out of range')")
	}
	return jinja.NewFloat(p), nil
}

func negFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("unary -: no operand")
	}
	v := args[0]
	switch {
	case v.IsUndefined():
		return jinja.Undefined(), errUndefined("unary -")
	case v.IsFloat():
		return jinja.NewFloat(-v.AsFloat()), nil
	case v.IsBool() || v.IsInt() && v.AsInt() != math.MinInt64:
		return jinja.NewInt(-asInt(v)), nil
	case isPyInt(v):
		x, _ := bigOf(v)
		return newBigInt(x.Neg(x)), nil
	}
	return jinja.Undefined(), fmt.Errorf("TypeError: bad operand type for unary -: '%s'", pyTypeNameOf(v))
}

func ltFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	return orderFilter("<", args, func(c int) bool { return c < 0 })
}

func leFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	return orderFilter("<=", args, func(c int) bool { return c <= 0 })
}

func gtFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	return orderFilter(">", args, func(c int) bool { return c > 0 })
}

func geFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	return orderFilter(">=", args, func(c int) bool { return c >= 0 })
}

func orderFilter(op string, args []jinja.Value, holds func(int) bool) (jinja.Value, error) {
	a, b, err := binaryArgs(op, args)
	if err != nil {
		return jinja.Undefined(), err
	}
	if a.IsInt() && b.IsInt() { // the common case first
		x, y := a.AsInt(), b.AsInt()
		return jinja.NewBool(holds(cmpInts(x, y))), nil
	}
	c, ordered, err := pyCompare(op, a, b, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewBool(ordered && holds(c)), nil
}

func cmpInts(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// pyCompare orders a and b as Python's op does: numbers exactly (ordered false with a NaN),
// strings by code point, lists and tuples item by item; anything else is a TypeError (an
// undefined operand Jinja2's UndefinedError).
func pyCompare(op string, a, b jinja.Value, depth int) (c int, ordered bool, err error) {
	switch {
	case a.IsUndefined() || b.IsUndefined():
		return 0, false, errUndefined(op)
	case isPyNumber(a) && isPyNumber(b):
		c, ordered = compareNumbers(a, b)
		return c, ordered, nil
	case a.IsString() && b.IsString():
		return strings.Compare(a.AsString(), b.AsString()), true, nil
	case a.IsList() && b.IsList() && isTuple(a) == isTuple(b) && depth < maxBigIntDepth:
		x, y := a.AsList().Items, b.AsList().Items
		for k := range min(len(x), len(y)) {
			if !pyEqual(x[k], y[k]) {
				return pyCompare(op, x[k], y[k], depth+1)
			}
		}
		return cmpInts(int64(len(x)), int64(len(y))), true, nil
	}
	return 0, false, fmt.Errorf("TypeError: '%s' not supported between instances of '%s' and '%s'", op, pyTypeNameOf(a), pyTypeNameOf(b))
}

// pyEqual is Python's == of two list items as far as ordering lists needs it: numbers
// exactly, anything else as the library compares.
func pyEqual(a, b jinja.Value) bool {
	if isPyNumber(a) && isPyNumber(b) {
		c, ordered := compareNumbers(a, b)
		return ordered && c == 0
	}
	return a.Equals(b)
}

// compareNumbers compares two Python numbers exactly (ordered false when one is NaN).
func compareNumbers(a, b jinja.Value) (int, bool) {
	if a.IsFloat() && math.IsNaN(a.AsFloat()) || b.IsFloat() && math.IsNaN(b.AsFloat()) {
		return 0, false
	}
	if isIntLike(a) && isIntLike(b) {
		return cmpInts(asInt(a), asInt(b)), true
	}
	if a.IsFloat() && b.IsFloat() {
		x, y := a.AsFloat(), b.AsFloat()
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	}
	return exactOf(a).Cmp(exactOf(b)), true
}

// exactOf is a number as an exact big.Float (±Inf included).
func exactOf(v jinja.Value) *big.Float {
	if v.IsFloat() {
		return big.NewFloat(v.AsFloat())
	}
	x, _ := bigOf(v)
	return new(big.Float).SetInt(x)
}

// chainOps are the comparisons a chain may hold, by the name __kvgate_chain is given.
var chainOps = map[string]func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error){
	"<": ltFilter, "<=": leFilter, ">": gtFilter, ">=": geFilter,
	"==": eqFilter, "!=": neFilter, "in": inFilter, "not in": notInFilter,
}

// chainFilter is a comparison chain: its first operand, then (operator, operand) pairs.
func chainFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 3 || len(args)%2 == 0 {
		return jinja.Undefined(), errors.New("comparison chain: malformed arguments")
	}
	left := args[0]
	for i := 1; i < len(args); i += 2 {
		var op func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error)
		if args[i].IsString() {
			op = chainOps[args[i].AsString()]
		}
		if op == nil {
			return jinja.Undefined(), fmt.Errorf("comparison chain: unknown operator %s", args[i].String())
		}
		r, err := op([]jinja.Value{left, args[i+1]}, nil)
		if err != nil || !r.IsTruthy() {
			return r, err
		}
		left = args[i+1]
	}
	return jinja.NewBool(true), nil
}
