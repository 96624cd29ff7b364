package parse

// granite: Granite 3.x calls, vllm/tool_parsers/granite_tool_parser.py.
//
//	[<|tool_call|> or <tool_call>][{"name": "f", "arguments": {...}}, ...]
//
// The output is calls only when, after leading whitespace and one optional "<|tool_call|>" or
// "<tool_call>" (and whitespace), it starts with "[" (both of vLLM's paths); otherwise it is all
// content. The array's objects need a string "name" and an "arguments" value, sent as
// json.dumps(arguments, ensure_ascii=False); text after the array is content.

var graniteBOT = []string{"<|tool_call|>", toolCallOpen}

const (
	grStart uint8 = iota
	grSpace
	grCall
	grRaw
	grAfter
	grContent
)

func (t *toolStage) stepGranite(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case grStart, grSpace:
		if n := skipSpace(b); n > 0 {
			if n = t.capRegion(n); n == 0 {
				return t.headerToContent(e, grContent)
			}
			t.region = append(t.region, b[:n]...)
			return n
		}
		if t.st == grStart {
			full, part := anyMarkerAt(b, graniteBOT)
			switch {
			case full >= 0:
				t.region = append(t.region, graniteBOT[full]...)
				t.st = grSpace
				return len(graniteBOT[full])
			case part && !eof:
				return 0
			}
		}
		if b[0] != '[' {
			return t.headerToContent(e, grContent)
		}
		t.call.begin(string(t.region))
		t.region = t.region[:0]
		t.st = grCall
		return 0
	case grCall:
		return t.feedArray(e, b, grRaw, grAfter, grContent)
	case grRaw:
		e.addArgs(t.call.idx, b)
		return len(b)
	case grAfter:
		if n := skipSpace(b); n > 0 {
			return n
		}
		t.st = grContent
		return 0
	}
	e.addContent(b)
	return len(b)
}

// finishGranite resolves the end of output: a prefix that never reached "[" is content, an
// array cut off keeps its committed calls.
func (t *toolStage) finishGranite(e *emitter) {
	switch t.st {
	case grStart, grSpace:
		t.headerToContent(e, grContent)
	case grCall:
		t.call.endOfRegion(e)
	}
}
