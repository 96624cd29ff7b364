package chat

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
