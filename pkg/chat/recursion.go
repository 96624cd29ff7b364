package chat

import (
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Macro recursion. A macro that calls itself without end (the Hermes-style
// json_to_python_type on a schema type list holding "null" recurses into the characters of
// the string) raises RecursionError in Python, which the engine answers with a 400; in the
// library it grows the goroutine stack until the Go runtime kills the process, and operator
// templates render in process. rewriteMacros makes every macro body count itself in and
// out through two render variables, which fail the render beyond maxMacroDepth nested
// calls. Python's limit is its recursion limit (1000 frames) at about five frames per
// macro call: 198 nested calls render under tools/chat/gen.py, so the bound is 200.
const maxMacroDepth = 200

const (
	macroInName  = "__kvgate_macro_in"
	macroOutName = "__kvgate_macro_out"
)

// rewriteMacros adds {{ __kvgate_macro_in() }} at the start of every macro body and
// {{ __kvgate_macro_out() }} at its end. It reports whether the source has a macro; a source
// the lexer cannot read is returned unchanged.
func rewriteMacros(src string) (string, bool) {
	type edit struct {
		pos  int
		text string
	}
	var edits []edit
	ok := scanTagsAt(src, func(statement bool, toks []token, end int) {
		if !statement || len(toks) == 0 || toks[0].kind != tkName {
			return
		}
		switch toks[0].val {
		case "macro":
			edits = append(edits, edit{end, "{{ " + macroInName + "() }}"})
		case "endmacro":
			if start := strings.LastIndex(src[:toks[0].pos], "{%"); start >= 0 {
				edits = append(edits, edit{start, "{{ " + macroOutName + "() }}"})
			}
		}
	})
	if !ok || len(edits) == 0 {
		return src, false
	}
	var b strings.Builder
	b.Grow(len(src) + 32*len(edits))
	last := 0
	for _, e := range edits {
		b.WriteString(src[last:e.pos])
		b.WriteString(e.text)
		last = e.pos
	}
	b.WriteString(src[last:])
	return b.String(), true
}

// setMacroDepth adds the two counting variables of one render to vars.
func setMacroDepth(vars map[string]jinja.Value) {
	depth := 0
	empty := jinja.NewString("")
	vars[macroInName] = jinja.NewCallable("macro", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		if depth++; depth > maxMacroDepth {
			return jinja.Undefined(), fmt.Errorf("RecursionError: maximum recursion depth exceeded (more than %d nested macro calls)", maxMacroDepth)
		}
		return empty, nil
	})
	vars[macroOutName] = jinja.NewCallable("endmacro", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		depth--
		return empty, nil
	})
}
