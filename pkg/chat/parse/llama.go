package parse

// llama3_json: Llama 3.x JSON calls, vllm/tool_parsers/llama_tool_parser.py with the template
// examples/tool_chat_template_llama3.1_json.jinja.
//
//	[<|python_tag|>]{"name": "f", "parameters": {...}}; {"name": "g", "arguments": {...}}
//
// The output is calls only when it starts with "{" or "<|python_tag|>" (vLLM's streaming rule;
// the non-streaming path also looks for a "{" anywhere, which cannot stream: see
// vllmdiff.go); otherwise it is all content. Each object needs a string "name" and a
// "parameters" or "arguments" value (the first in the text wins); arguments are sent as
// json.dumps(value, ensure_ascii=False). Calls are separated by ";" and whitespace; text after
// the last call is content. A call that breaks before it is committed turns it and the rest
// of the output into content.

const pythonTag = "<|python_tag|>"

const (
	lStart uint8 = iota
	lContent
	lCall
	lRawArgs
	lSep
	lNext
)

func (t *toolStage) stepLlama(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case lStart:
		if b[0] == '{' {
			t.call.begin("")
			t.st = lCall
			return 0
		}
		switch markerAt(b, pythonTag) {
		case fullMatch:
			t.call.begin(pythonTag)
			t.st = lCall
			return len(pythonTag)
		case partMatch:
			if !eof {
				return 0
			}
		}
		t.st = lContent
		return 0
	case lContent:
		e.addContent(b)
		return len(b)
	case lCall:
		n, ev := t.call.feed(e, b)
		if ev == jErr && !t.call.committed {
			// the text of the failed call and everything after it is content
			t.call.fail(e)
			t.st = lContent
			return n
		}
		return t.afterFeed(e, n, ev, lRawArgs, lSep, lContent)
	case lRawArgs:
		e.addArgs(t.call.idx, b)
		return len(b)
	case lSep, lNext:
		if n := skipSpace(b); n > 0 {
			return n
		}
		switch {
		case t.st == lSep && b[0] == ';':
			t.st = lNext
			return 1
		case t.st == lNext && b[0] == '{':
			t.call.begin("")
			t.st = lCall
			return 0
		}
		t.st = lContent
		return 0
	}
	return 0
}
