package parse

import "bytes"

// glm45 / glm47: GLM-4.5/4.6 and GLM-4.7 calls, vllm/tool_parsers/glm4_moe_tool_parser.py and
// glm47_moe_tool_parser.py.
//
//	content<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n...</tool_call>   (4.5, 4.6)
//	content<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>          (4.7)
//
// Both names read both layouts: the name runs to its line's end, the first "<arg_key>" or
// "</tool_call>", whitespace around it removed; an empty name makes the call content. A key
// is the text between "<arg_key>" and "</arg_key>" (stripped), its value the text between the
// "<arg_value>" that follows (after whitespace) and "</arg_value>" (or "</tool_call>"),
// converted as xmlCall's glm rules say; the arguments are json.dumps of the pairs,
// ensure_ascii=False, "{}" without any. As vLLM's streaming path sends it, all text outside
// the calls is content, whitespace between calls included. A call cut off by the end of output
// keeps what it had and is closed.

const (
	gKeyOpen  = "<arg_key>"
	gKeyClose = "</arg_key>"
	gValOpen  = "<arg_value>"
	gValClose = "</arg_value>"
)

var (
	gNameEnds  = newMarkerSet("\n", gKeyOpen, toolCallClose)
	gBodyMarks = newMarkerSet(gKeyOpen, toolCallClose)
	gKeyEnds   = newMarkerSet(gKeyClose)
	gValueEnds = newMarkerSet(gValClose, toolCallClose)
)

const (
	gText uint8 = iota
	gName
	gBody
	gKey
	gBetween
	gValue
)

func (t *toolStage) stepGLM(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case gText:
		n, m := qContentEnd.next(b, eof)
		if m == 0 {
			t.region = append(t.region[:0], toolCallOpen...)
			t.name = t.name[:0]
			t.st = gName
			return len(toolCallOpen)
		}
		e.addContent(b[:n])
		return n
	case gName:
		n, m := gNameEnds.next(b, eof)
		switch {
		case m >= 0:
			return t.glmCommit(e)
		case n == 0:
			return 0
		}
		return t.holdHeader(e, b[:n], gNameEnds, &t.name, gText)
	case gBody:
		n, m := gBodyMarks.next(b, eof)
		switch m {
		case 0:
			t.xml.pname = t.xml.pname[:0]
			t.st = gKey
			return len(gKeyOpen)
		case 1:
			t.xml.closeCall(e, t.call.idx)
			t.st = gText
			return len(toolCallClose)
		}
		return n
	case gKey:
		n, m := gKeyEnds.next(b, eof)
		if m == 0 {
			t.xml.pname = bytes.TrimSpace(t.xml.pname)
			t.st = gBetween
			return len(gKeyClose)
		}
		t.xml.addName(b[:n], t.limit)
		return n
	case gBetween:
		if n := skipSpace(b); n > 0 {
			return n
		}
		switch markerAt(b, gValOpen) {
		case fullMatch:
			t.xml.startValue()
			t.st = gValue
			return len(gValOpen)
		case partMatch:
			if !eof {
				return 0
			}
		}
		t.st = gBody // a key without a value is dropped
		return 0
	case gValue:
		n, m := gValueEnds.next(b, eof)
		if m < 0 {
			t.xml.addValue(e, t.call.idx, b[:n], t.limit)
			return n
		}
		t.xml.endValue(e, t.call.idx)
		if m == 1 {
			t.xml.closeCall(e, t.call.idx)
			t.st = gText
			return len(toolCallClose)
		}
		t.st = gBody
		return len(gValClose)
	}
	return 0
}

// glmCommit ends a call's name at the marker after it (left in the buffer): an empty name makes
// the call content, any other commits the call.
func (t *toolStage) glmCommit(e *emitter) int {
	name := bytes.TrimSpace(t.name)
	if len(name) == 0 {
		return t.headerToContent(e, gText)
	}
	t.call.idx = e.startCall(string(name))
	t.xml.begin(t.tools, string(name))
	t.region, t.name = t.region[:0], t.name[:0]
	t.st = gBody
	return 0
}

// finishGLM resolves the state at the end of output, as finishQwenXML does.
func (t *toolStage) finishGLM(e *emitter) {
	switch t.st {
	case gName:
		t.headerToContent(e, gText)
	case gValue:
		t.xml.endValue(e, t.call.idx)
		t.xml.closeCall(e, t.call.idx)
	case gBody, gKey, gBetween:
		t.xml.closeCall(e, t.call.idx)
	}
}
