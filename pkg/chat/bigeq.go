package chat

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync"

	"github.com/ardanlabs/jinja"
)

// Big integers (bigint.go) in ==, !=, in, not in, the eq/equalto/ne/in tests and the
// filters int, float, abs, round, sum, max and min. The library compares with
// Value.Equals, which finds a callable equal to nothing, itself included, and its filters
// take a callable as 0; Python compares exactly (a big integer equals an equal big
// integer, never an int64, and a float only when exactly equal) and its int(), float(),
// abs(), round(), sum(), max() and min() know big integers.
//
// Rewriting every == of every template into a filter would put a call on the hot path of
// all of them, for values that only requests with a big integer hold. A template is
// therefore compiled a second time, lazily, with these operators, tests and filters
// rewritten into the private filters below (compiled.bigVariant), and that variant renders
// only requests whose JSON decoding produced a big integer (jsonDecoder.big). The private
// filters do what the library does unless a big integer is an operand: the filters call
// the library's own (libraryFilters), so the variant renders every other value as the
// template does.
//
// A big integer made by a template's arithmetic in a request that holds none sends the
// render to the big variant too (render.go's renderCompiled). Comparison chains
// (a == b == c, arith.go) and the comparison tests given by name to select, reject,
// selectattr and rejectattr (select.go) are Python's in both variants.
const (
	eqFilterName    = "__kvgate_eq"
	neFilterName    = "__kvgate_ne"
	inFilterName    = "__kvgate_in"
	notInFilterName = "__kvgate_notin"

	intFilterName   = "__kvgate_int"
	floatFilterName = "__kvgate_float"
	absFilterName   = "__kvgate_abs"
	roundFilterName = "__kvgate_round"
	sumFilterName   = "__kvgate_sum"
	maxFilterName   = "__kvgate_max"
	minFilterName   = "__kvgate_min"
)

// equalityOps are the comparison operators the big variant rewrites, by their filters.
var equalityOps = map[string]string{"==": eqFilterName, "!=": neFilterName, "in": inFilterName, "not in": notInFilterName}

// equalityTests are the tests with an argument the big variant rewrites: X is T Y becomes
// (X)|filter(Y), and X is not T Y the negated filter.
var equalityTests = map[string][2]string{
	"eq": {eqFilterName, neFilterName}, "equalto": {eqFilterName, neFilterName}, "ne": {neFilterName, eqFilterName},
	"in": {inFilterName, notInFilterName},
}

// bigFilterRenames are the library filters the big variant replaces.
var bigFilterRenames = [][2]string{
	{"int", intFilterName}, {"float", floatFilterName}, {"abs", absFilterName}, {"round", roundFilterName},
	{"sum", sumFilterName}, {"max", maxFilterName}, {"min", minFilterName},
}

// bigSourceRewrites are sourceRewrites for the big variant: the filters renamed before
// rewriteConcat (as join and replace are), and the operators rewritten with equality.
var bigSourceRewrites = []func(string) string{
	prepareSource, rewriteWhitespace, rewriteIntLiterals, rewriteSelect, rewriteTrim, rewriteString, rewriteFormat, rewriteJoin,
	rewriteReplace, rewriteLength, rewriteIsspace, rewriteTojson, rewriteBigFilters, rewriteConcat, rewriteBigOperators, rewriteOutputs,
}

func rewriteBigFilters(src string) string {
	for _, r := range bigFilterRenames {
		src = renameFilter(src, r[0], r[1])
	}
	return src
}

// libraryFilters are the library's own int, float, abs, round, sum, max and min, which the
// private filters call for values that are not big integers, and select, reject,
// selectattr and rejectattr, which select.go's call for the tests it leaves to them. The library keeps its filters
// as variables of the scope under the user's ("__filter_" + name), so a template can hand
// them to a callable; this is done once.
var libraryFilters = sync.OnceValues(func() (map[string]jinja.Value, error) {
	var names []string
	for _, r := range append(bigFilterRenames, selectRenames...) {
		names = append(names, r[0])
	}
	var src strings.Builder
	src.WriteString("{{ f(")
	for i, name := range names {
		if i > 0 {
			src.WriteString(", ")
		}
		src.WriteString("__filter_" + name)
	}
	src.WriteString(") }}")
	t, err := jinja.Compile(src.String())
	if err != nil {
		return nil, err
	}
	got := map[string]jinja.Value{}
	capture := jinja.NewCallable("f", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		for i, v := range args {
			if i < len(names) && v.IsCallable() {
				got[names[i]] = v
			}
		}
		return jinja.None(), nil
	})
	if _, err := t.RenderValues(map[string]jinja.Value{"f": capture}); err != nil {
		return nil, err
	}
	if len(got) != len(names) {
		return nil, errors.New("chat: the template library's filters are not reachable")
	}
	return got, nil
})

// callLibrary calls the library's filter name.
func callLibrary(name string, args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	fs, err := libraryFilters()
	if err != nil {
		return jinja.Undefined(), err
	}
	return fs[name].AsCallable().Fn(args, kwargs)
}

// pyEq is Python's a == b where the library's Equals is right but for big integers: numbers
// exactly, lists and dicts item by item (as Equals walks them).
func pyEq(a, b jinja.Value, depth int) bool {
	switch {
	case isPyNumber(a) && isPyNumber(b) && (isBigInt(a) || isBigInt(b)):
		c, ordered := compareNumbers(a, b)
		return ordered && c == 0
	case isBigInt(a) || isBigInt(b):
		return false
	case depth >= maxBigIntDepth:
	case a.IsList() && b.IsList():
		x, y := a.AsList(), b.AsList()
		if isTuple(a) != isTuple(b) || len(x.Items) != len(y.Items) {
			return false
		}
		for i := range x.Items {
			if !pyEq(x.Items[i], y.Items[i], depth+1) {
				return false
			}
		}
		return true
	case a.IsDict() && b.IsDict():
		x, y := a.AsDict(), b.AsDict()
		if x.Len() != y.Len() {
			return false
		}
		for _, k := range x.Keys {
			v, ok := y.Get(k)
			if !ok || !pyEq(x.Data[k], v, depth+1) {
				return false
			}
		}
		return true
	}
	return a.Equals(b)
}

// pyContains is Python's item in container where the library's answer is right but for
// big integers: a list holds an equal item (pyEq), a dict a key, a string a substring; a
// big integer is no key of a dict (their keys are strings), and Python's TypeError where a
// big integer makes one.
func pyContains(container, item jinja.Value) (bool, error) {
	switch {
	case container.IsList():
		for _, v := range container.AsList().Items {
			if pyEq(v, item, 0) {
				return true, nil
			}
		}
		return false, nil
	case container.IsDict():
		return item.IsString() && container.AsDict().Has(item.AsString()), nil
	case container.IsString():
		if item.IsString() {
			return strings.Contains(container.AsString(), item.AsString()), nil
		}
		if isBigInt(item) {
			return false, errors.New("TypeError: 'in <string>' requires string as left operand, not int")
		}
	case isBigInt(container):
		return false, errors.New("TypeError: argument of type 'int' is not iterable")
	}
	return false, nil
}

func eqFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("==", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewBool(pyEq(a, b, 0)), nil
}

func neFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("!=", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewBool(!pyEq(a, b, 0)), nil
}

func inFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("in", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	r, err := pyContains(b, a)
	return jinja.NewBool(r), err
}

func notInFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	a, b, err := binaryArgs("not in", args)
	if err != nil {
		return jinja.Undefined(), err
	}
	r, err := pyContains(b, a)
	return jinja.NewBool(!r), err
}

// bigIntFilter is Jinja2's do_int(value, default=0, base=10): a big integer is int() of
// itself (base applies to strings only), a float its exact integer part (the library
// turns one beyond int64 into 0) and a string is parsed as Python parses it (pyint.go).
func bigIntFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return callLibrary("int", args, kwargs)
	}
	switch v := args[0]; {
	case isBigInt(v):
		return v, nil
	case v.IsFloat():
		return pyIntOfFloat(v.AsFloat(), intFilterArg(args, kwargs, 1, "default", jinja.NewInt(0)))
	case v.IsString():
		def := intFilterArg(args, kwargs, 1, "default", jinja.NewInt(0))
		base := intFilterArg(args, kwargs, 2, "base", jinja.NewInt(10))
		if !base.IsInt() && !base.IsBool() {
			base = jinja.NewInt(-1) // int(s, base) raises TypeError, which do_int catches
		}
		b := int64(0)
		if base.IsInt() {
			b = base.AsInt()
		} else if base.AsBool() {
			b = 1
		}
		return pyIntOfString(v.AsString(), def, b)
	}
	return callLibrary("int", args, kwargs)
}

// intFilterArg is do_int's argument at position i, or named name, or def.
func intFilterArg(args []jinja.Value, kwargs map[string]jinja.Value, i int, name string, def jinja.Value) jinja.Value {
	if i < len(args) {
		return args[i]
	}
	if v, ok := kwargs[name]; ok {
		return v
	}
	return def
}

// bigFloatFilter is Jinja2's do_float: float() of a big integer, whose OverflowError
// do_float does not catch.
func bigFloatFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) > 0 && isBigInt(args[0]) {
		f, err := pyFloatOf(args[0])
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewFloat(f), nil
	}
	return callLibrary("float", args, kwargs)
}

// bigAbsFilter is abs(): exact for a big integer, and for the one int64 whose absolute
// value is not an int64.
func bigAbsFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) > 0 && (isBigInt(args[0]) || args[0].IsInt() && args[0].AsInt() == math.MinInt64) {
		x, _ := bigOf(args[0])
		return newBigInt(x.Abs(x)), nil
	}
	return callLibrary("abs", args, kwargs)
}

// bigRoundFilter is Jinja2's do_round(value, precision=0, method='common') of a big
// integer: common is Python's round(int, ndigits), an int rounded half to even to a
// multiple of 10**-ndigits; ceil and floor are math.ceil/floor(value * 10**precision) /
// 10**precision, a float.
func bigRoundFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !isBigInt(args[0]) {
		return callLibrary("round", args, kwargs)
	}
	precision, method := jinja.NewInt(0), jinja.NewString("common")
	if len(args) > 1 {
		precision = args[1]
	} else if p, ok := kwargs["precision"]; ok {
		precision = p
	}
	if len(args) > 2 {
		method = args[2]
	} else if m, ok := kwargs["method"]; ok {
		method = m
	}
	if !method.IsString() || method.AsString() != "common" && method.AsString() != "ceil" && method.AsString() != "floor" {
		return jinja.Undefined(), errors.New("FilterArgumentError: method must be common, ceil or floor")
	}
	if !isPyInt(precision) {
		return jinja.Undefined(), fmt.Errorf("TypeError: '%s' object cannot be interpreted as an integer", pyTypeNameOf(precision))
	}
	x, _ := bigOf(args[0])
	n, _ := bigOf(precision)
	if method.AsString() != "common" {
		return bigCeilFloor(x, n, method.AsString() == "ceil")
	}
	if n.Sign() >= 0 {
		return args[0], nil
	}
	// Beyond the digits of x, every multiple but 0 is farther than x from it.
	if n.CmpAbs(big.NewInt(int64(len(x.String())))) > 0 {
		return jinja.NewInt(0), nil
	}
	m := new(big.Int).Exp(big.NewInt(10), new(big.Int).Neg(n), nil)
	q, r := new(big.Int).DivMod(x, m, new(big.Int)) // Euclidean, m > 0: floor division
	switch c := new(big.Int).Lsh(r, 1).Cmp(m); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		q.Add(q, big.NewInt(1))
	}
	return newBigInt(q.Mul(q, m)), nil
}

// bigCeilFloor is math.ceil/floor(x * 10**n) / 10**n for a big integer x: with n >= 0 the
// product is an int, ceil and floor keep it, and int / int is the correctly rounded float
// of x; with n < 0, 10**n is a float and the arithmetic is float's.
func bigCeilFloor(x, n *big.Int, ceil bool) (jinja.Value, error) {
	if n.Sign() >= 0 {
		f, err := bigToFloat(x)
		if err != nil {
			return jinja.Undefined(), errors.New("OverflowError: integer division result too large for a float")
		}
		return jinja.NewFloat(f), nil
	}
	f, err := bigToFloat(x)
	if err != nil {
		return jinja.Undefined(), err
	}
	p := 0.0 // 10 ** n underflows to 0.0 far enough below
	if n.IsInt64() {
		p = math.Pow(10, float64(n.Int64()))
	}
	g := f * p
	if math.IsInf(g, 0) {
		return jinja.Undefined(), errors.New("OverflowError: cannot convert float infinity to integer")
	}
	if ceil {
		g = math.Ceil(g)
	} else {
		g = math.Floor(g)
	}
	if p == 0 {
		return jinja.Undefined(), errors.New("ZeroDivisionError: float division by zero")
	}
	return jinja.NewFloat(g / p), nil
}

// aggregateItems returns the items a filter of an iterable looks at (after attribute) and
// whether one is a big integer.
func aggregateItems(v, attribute jinja.Value) (items []jinja.Value, hasBig bool) {
	if !v.IsList() {
		return nil, false
	}
	items = v.AsList().Items
	if !attribute.IsUndefined() && !attribute.IsNone() {
		keyed := make([]jinja.Value, len(items))
		for i, it := range items {
			keyed[i] = attrOf(it, attribute)
		}
		items = keyed
	}
	for _, it := range items {
		if isBigInt(it) {
			return items, true
		}
	}
	return items, false
}

// bigSumFilter is Jinja2's do_sum(iterable, attribute=None, start=0): Python's sum, start +
// each item in turn with Python's + (operators.go's addFilter), when a big integer takes part.
func bigSumFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return callLibrary("sum", args, kwargs)
	}
	attribute, start := jinja.None(), jinja.NewInt(0)
	if len(args) > 1 {
		attribute = args[1]
	} else if a, ok := kwargs["attribute"]; ok {
		attribute = a
	}
	if len(args) > 2 {
		start = args[2]
	} else if s, ok := kwargs["start"]; ok {
		start = s
	}
	items, hasBig := aggregateItems(args[0], attribute)
	if !hasBig && !isBigInt(start) {
		return callLibrary("sum", args, kwargs)
	}
	if start.IsString() {
		return jinja.Undefined(), errors.New("TypeError: sum() can't sum strings [use ''.join(seq) instead]")
	}
	acc := start
	for _, it := range items {
		var err error
		if acc, err = addFilter([]jinja.Value{acc, it}, nil); err != nil {
			return jinja.Undefined(), err
		}
	}
	return acc, nil
}

func bigMaxFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	return bigExtremum("max", args, kwargs)
}

func bigMinFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	return bigExtremum("min", args, kwargs)
}

// bigExtremum is Jinja2's do_max/do_min(value, case_sensitive=False, attribute=None) when a
// big integer is among the keys: Python's max/min with the key function, the first of equal
// extremes, and Python's TypeError for keys that do not order.
func bigExtremum(name string, args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return callLibrary(name, args, kwargs)
	}
	caseSensitive, attribute := jinja.NewBool(false), jinja.None()
	if len(args) > 1 {
		caseSensitive = args[1]
	} else if c, ok := kwargs["case_sensitive"]; ok {
		caseSensitive = c
	}
	if len(args) > 2 {
		attribute = args[2]
	} else if a, ok := kwargs["attribute"]; ok {
		attribute = a
	}
	keys, hasBig := aggregateItems(args[0], attribute)
	if !hasBig {
		return callLibrary(name, args, kwargs)
	}
	key := func(i int) jinja.Value {
		k := keys[i]
		if !caseSensitive.IsTruthy() && k.IsString() {
			return jinja.NewString(strings.ToLower(k.AsString())) // as the library lowers
		}
		return k
	}
	op, want := ">", 1
	if name == "min" {
		op, want = "<", -1
	}
	items := args[0].AsList().Items
	best, bestKey := 0, key(0)
	for i := 1; i < len(items); i++ {
		k := key(i)
		c, ordered, err := pyCompare(op, k, bestKey, 0)
		if err != nil {
			return jinja.Undefined(), err
		}
		if ordered && c == want {
			best, bestKey = i, k
		}
	}
	return items[best], nil
}
