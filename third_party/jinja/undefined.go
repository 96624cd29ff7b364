package jinja

// This file is not part of the upstream library: kvgate added it (see KVGATE.md).

import (
	"errors"
	"strings"
)

// UndefinedError is Jinja2's UndefinedError: an attribute, an item or a slice was taken of
// an undefined value. Jinja2's default Undefined prints as "" and is falsy, but raises as
// soon as anything is looked up in it, so `tools[0].function` with no tools, or
// `messages[9].role` past the end, fails the render there and renders here, upstream.
//
// Message is Jinja2's own, which names where the undefined value came from ("'x' is
// undefined", "'dict object' has no attribute 'x'", "list object has no element 9").
type UndefinedError struct {
	Message string
}

func (e *UndefinedError) Error() string { return "UndefinedError: " + e.Message }

// undefinedError describes the undefined value ex evaluated to, as Jinja2's
// Undefined._undefined_message does. It runs only on the error path, so it may evaluate
// the parts of ex again to learn what the value was looked up in.
func (e *evaluator) undefinedError(ex expr) error {
	var obj, key Value
	switch n := ex.(type) {
	case *nameExpr:
		return &UndefinedError{Message: pyQuote(n.name) + " is undefined"}
	case *attrExpr:
		if name, ok := n.obj.(*nameExpr); ok && name.name == "loop" {
			switch n.attr { // Jinja2's LoopContext gives these two undefined values a hint
			case "previtem":
				return &UndefinedError{Message: "there is no previous item"}
			case "nextitem":
				return &UndefinedError{Message: "there is no next item"}
			}
		}
		o, err := e.evalExpr(n.obj)
		if err != nil {
			return err
		}
		obj, key = o, NewString(n.attr)
	case *itemExpr:
		o, err := e.evalExpr(n.obj)
		if err != nil {
			return err
		}
		k, err := e.evalExpr(n.key)
		if err != nil {
			return err
		}
		obj, key = o, k
	default:
		return &UndefinedError{Message: "an undefined value has no attributes or items"}
	}
	if key.IsString() {
		return &UndefinedError{Message: pyQuote(objectTypeRepr(obj)) + " has no attribute " + pyQuote(key.AsString())}
	}
	return &UndefinedError{Message: objectTypeRepr(obj) + " has no element " + printValue(key)}
}

// objectTypeRepr is Jinja2's object_type_repr for the value kinds of this library.
func objectTypeRepr(v Value) string {
	switch v.kind {
	case KindNone:
		return "None"
	case KindBool:
		return "bool object"
	case KindInt:
		return "int object"
	case KindFloat:
		return "float object"
	case KindString:
		return "str object"
	case KindList:
		return "list object"
	case KindDict:
		return "dict object"
	case KindCallable:
		return "function object"
	}
	return "jinja2.runtime.Undefined object"
}

// pyQuote is Python's repr of a string, for the printable strings names and keys are: single
// quotes unless the text holds one and no double quote.
func pyQuote(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	var b strings.Builder
	b.WriteString(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case string(r) == q:
			b.WriteString(`\` + q)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(q)
	return b.String()
}

// unsafeMethod is what Jinja2's ImmutableSandboxedEnvironment, the one transformers renders
// chat templates in, gives for a method that changes a list or a dict (its _mutable_spec):
// a value that raises SecurityError when called. Upstream's append, insert and dict's pop
// and update changed the value, so a template could alter a request's messages, and render,
// where the engine answers 400. The lists are Jinja2 3.1.2's (Debian's, the reference of
// kvgate's tests); Jinja2 3.1.6 also refuses a list's pop and clear, which 3.1.2 allows.
func unsafeMethod(kind, method string) (Value, bool) {
	switch method {
	case "append", "extend", "insert", "remove", "reverse", "sort":
		if kind != "list" {
			return Undefined(), false
		}
	case "clear", "pop", "popitem", "setdefault", "update":
		if kind != "dict" {
			return Undefined(), false
		}
	default:
		return Undefined(), false
	}
	err := errors.New("SecurityError: access to attribute '" + method + "' of '" + kind + "' object is unsafe.")
	return NewCallable(kind+"."+method, func([]Value, map[string]Value) (Value, error) { return Undefined(), err }), true
}
