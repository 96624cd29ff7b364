package parse

// tool_choice "required" and named, whatever the tool parser (vLLM constrains the output with
// guided decoding; vllm/tool_parsers/abstract_tool_parser.py, vllm/parser/abstract_parser.py):
//   - named {"type":"function","function":{"name":N}}: the output (after reasoning) is the
//     arguments, sent verbatim as one call named N; an output that is only whitespace is no
//     call. Content is "" and the finish reason stays the engine's.
//   - "required": the output is a JSON array of {"name": N, "parameters": {...}}, each a call
//     with arguments json.dumps(parameters, ensure_ascii=False). Content is "".

const (
	nWait uint8 = iota
	nArgs
)

func (t *toolStage) stepNamed(e *emitter, b []byte, eof bool) int {
	if t.st == nWait {
		if n := skipSpace(b); n == len(b) && len(t.region)+n <= t.limit {
			t.region = append(t.region, b...)
			return n
		}
		t.call.idx = e.startCall(t.named)
		e.addArgs(t.call.idx, t.region)
		t.region = t.region[:0]
		t.st = nArgs
	}
	e.addArgs(t.call.idx, b)
	return len(b)
}

const (
	rStart uint8 = iota
	rCall
	rRawArgs
	rAfter
	rContent
)

func (t *toolStage) stepRequired(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case rStart:
		t.call.begin("")
		t.st = rCall
		return 0
	case rCall:
		return t.feedArray(e, b, rRawArgs, rAfter, rContent)
	case rRawArgs:
		e.addArgs(t.call.idx, b)
		return len(b)
	case rAfter:
		if n := skipSpace(b); n > 0 {
			return n
		}
		t.st = rContent
		return 0
	}
	e.addContent(b)
	return len(b)
}
