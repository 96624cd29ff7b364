package chat

// mutatingMethods are the methods the library implements that change their receiver, and
// the other mutating methods of Python's list and dict, should a later version add them.
var mutatingMethods = map[string]bool{
	"append": true, "pop": true, "insert": true, "update": true, "extend": true, "remove": true,
	"clear": true, "setdefault": true, "popitem": true, "sort": true, "reverse": true,
}

// mayMutateValues reports whether the template src could change a value it was given: it
// names a mutating method after a '.', or it assigns an attribute ({% set x.a = v %}) of a
// name x that is not bound, and bound only, by {% set x = namespace(...) %}. A source the lexer cannot
// read, or whose tags it may delimit differently from the library (unbalanced brackets),
// may mutate.
func mayMutateValues(src string) bool {
	var stmts [][]token
	mutates := false
	ok := scanTags(src, func(statement bool, toks []token) {
		depth := 0
		for i, t := range toks {
			switch {
			case t.kind == tkName && i > 0 && toks[i-1].kind == tkOp && toks[i-1].val == "." && mutatingMethods[t.val]:
				mutates = true
			case t.kind == tkOp && (t.val == "(" || t.val == "[" || t.val == "{"):
				depth++
			case t.kind == tkOp && (t.val == ")" || t.val == "]" || t.val == "}"):
				depth--
			}
		}
		if depth != 0 {
			mutates = true
		}
		if statement {
			stmts = append(stmts, toks)
		}
	})
	if !ok || mutates {
		return true
	}
	// The names whose attributes are assigned, and whether each is bound only to a namespace.
	assigned := map[string]bool{}
	for _, s := range stmts {
		if isName(s, 0, "set") && len(s) > 2 && s[1].kind == tkName && isOp(s, 2, ".") {
			assigned[s[1].val] = true
		}
	}
	if len(assigned) == 0 {
		return false
	}
	nsBound := map[string]bool{"loop": true} // loop is the library's own, made per loop
	assigned["namespace"] = true             // rebinding namespace() itself would defeat the check
	for _, s := range stmts {
		if len(s) == 0 || s[0].kind != tkName {
			continue
		}
		switch s[0].val {
		case "set":
			// The target is what comes before the first '=' (all of it for a block set).
			end := len(s)
			for i := 1; i < len(s); i++ {
				if isOp(s, i, "=") {
					end = i
					break
				}
			}
			for i := 1; i < end; i++ {
				if s[i].kind != tkName || !assigned[s[i].val] || i > 1 && isOp(s, i-1, ".") {
					continue
				}
				if isOp(s, i+1, ".") && i == 1 {
					continue // an attribute assignment, checked through its name's bindings
				}
				// A binding of an assigned name: only `set x = namespace(...)` keeps it a
				// namespace.
				if !(i == 1 && end == 2 && s[i].val != "namespace" && isName(s, 3, "namespace") && isOp(s, 4, "(")) {
					return true
				}
				nsBound[s[i].val] = true
			}
		case "for":
			for i := 1; i < len(s) && !isName(s, i, "in"); i++ {
				if s[i].kind == tkName && assigned[s[i].val] {
					return true
				}
			}
		case "macro", "call":
			for _, t := range s {
				if t.kind == tkName && assigned[t.val] {
					return true
				}
			}
		}
	}
	// An attribute assigned on a name the template never binds would be assigned on a
	// variable it was given.
	for n := range assigned {
		if n != "namespace" && !nsBound[n] {
			return true
		}
	}
	return false
}

func isName(toks []token, i int, name string) bool {
	return i < len(toks) && toks[i].kind == tkName && toks[i].val == name
}

func isOp(toks []token, i int, op string) bool {
	return i < len(toks) && toks[i].kind == tkOp && toks[i].val == op
}
