package chat

import (
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// select, reject, selectattr and rejectattr with a comparison test named by a string
// (selectattr('n', 'equalto', x), select('gt', 5)): Jinja2 runs Python's operator, the
// library its own test, which finds a big integer (bigint.go) equal to nothing and compares
// an undefined value or unlike types where Python raises. rewriteSelect renames the four
// filters, in both variants, to these, which apply the comparison filters of the operators'
// rewrite (Python's rules, big integers exact) to each item of a list and leave every other
// call (no test, another test, not a list, keyword arguments) to the library's filter.
const (
	selectFilterName     = "__kvgate_select"
	rejectFilterName     = "__kvgate_reject"
	selectattrFilterName = "__kvgate_selectattr"
	rejectattrFilterName = "__kvgate_rejectattr"
)

var selectRenames = [][2]string{
	{"select", selectFilterName}, {"reject", rejectFilterName},
	{"selectattr", selectattrFilterName}, {"rejectattr", rejectattrFilterName},
}

func rewriteSelect(src string) string {
	for _, r := range selectRenames {
		if strings.Contains(src, r[0]) {
			src = renameFilter(src, r[0], r[1])
		}
	}
	return src
}

// selectTests are Jinja2's comparison tests, by every name it knows them by.
var selectTests = map[string]func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error){
	"eq": eqFilter, "equalto": eqFilter, "==": eqFilter, "ne": neFilter, "!=": neFilter,
	"lt": ltFilter, "lessthan": ltFilter, "<": ltFilter, "le": leFilter, "<=": leFilter,
	"gt": gtFilter, "greaterthan": gtFilter, ">": gtFilter, "ge": geFilter, ">=": geFilter,
	"in": inFilter,
}

// selectFilter is one of the four filters: attr when it takes an attribute, keep the
// test's answer that keeps an item.
func selectFilter(name string, attr, keep bool) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		at := 1
		if attr {
			at = 2
		}
		if len(args) != at+2 || len(kwargs) > 0 || !args[0].IsList() || !args[at].IsString() || attr && !args[1].IsString() {
			return callLibrary(name, args, kwargs)
		}
		test := selectTests[args[at].AsString()]
		if test == nil {
			return callLibrary(name, args, kwargs)
		}
		var parts []string
		if attr {
			parts = strings.Split(args[1].AsString(), ".")
		}
		var out []jinja.Value
		for _, item := range args[0].AsList().Items {
			v := item
			for _, p := range parts {
				v = attrItem(v, p)
			}
			r, err := test([]jinja.Value{v, args[at+1]}, nil)
			if err != nil {
				return jinja.Undefined(), err
			}
			if r.IsTruthy() == keep {
				out = append(out, item)
			}
		}
		return jinja.NewList(out), nil
	}
}

// attrItem is one step of Jinja2's make_attrgetter: a part of digits is an index, any
// other a key; what is not there is undefined.
func attrItem(v jinja.Value, part string) jinja.Value {
	switch {
	case v.IsDict():
		if x, ok := v.AsDict().Get(part); ok && !isDigits(part) {
			return x
		}
	case v.IsList() && isDigits(part):
		if i, err := strconv.Atoi(part); err == nil && i < v.AsList().Len() {
			return v.AsList().Get(i)
		}
	}
	return jinja.Undefined()
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
