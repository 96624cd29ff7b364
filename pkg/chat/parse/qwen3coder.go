package parse

// qwen3_coder / qwen3_xml: Qwen3-Coder and Qwen3.5/3.6 XML calls,
// vllm/tool_parsers/qwen3coder_tool_parser.py (qwen3xml_tool_parser.py parses the same format
// with an XML reader).
//
//	content<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//
// A call is committed at its "<function=NAME>" header; text after "<tool_call>" that is not
// such a header (after whitespace) makes the call content. Each parameter's value is the text
// up to "</parameter>" (or, when that is missing, "<parameter=", "</function>", "</tool_call>"
// or the end of output), one leading and one trailing "\n" removed, converted by the type the
// request's tool schema gives that parameter (xmlvalue.go), and the arguments are the JSON
// object vLLM builds, json.dumps(params, ensure_ascii=False): {"P": VALUE, ...}, "{}" without
// parameters. A call truncated by the end of output keeps the parameters written so far and is
// closed. Text after a call other than whitespace is content, as for hermes. Ids are "call_" +
// 24 hex digits, as the parser makes them.

const (
	qFnOpen   = "<function="
	qFnClose  = "</function>"
	qParOpen  = "<parameter="
	qParClose = "</parameter>"
)

// qwenFormat is the wrapper of the XML calls: <tool_call> for Qwen, <seed:tool_call> for
// seed_oss (vllm/tool_parsers/seed_oss_tool_parser.py, the same body).
type qwenFormat struct {
	open, close                                  string
	contentEnd, bodyMarks, valueEnds, fnEndMarks *markerSet
}

func newQwenFormat(open, close string) *qwenFormat {
	return &qwenFormat{open: open, close: close, contentEnd: newMarkerSet(open),
		bodyMarks: newMarkerSet(qParOpen, qFnClose, close), valueEnds: newMarkerSet(qParClose, qParOpen, qFnClose, close),
		fnEndMarks: newMarkerSet(close)}
}

var (
	qwenXML = newQwenFormat(toolCallOpen, toolCallClose)
	seedXML = newQwenFormat("<seed:tool_call>", "</seed:tool_call>")
	// qContentEnd finds "<tool_call>" (GLM's calls open with it too).
	qContentEnd = qwenXML.contentEnd
)

const (
	qText uint8 = iota
	qOpen
	qFnName
	qBody
	qParName
	qValue
	qFnEnd
	qAfter
)

func (t *toolStage) stepQwenXML(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case qText, qAfter:
		if t.st == qAfter {
			if n := skipSpace(b); n > 0 {
				return n
			}
		}
		n, m := t.qf.contentEnd.next(b, eof)
		switch {
		case m == 0:
			t.region = append(t.region[:0], t.qf.open...)
			t.st = qOpen
			return len(t.qf.open)
		case n == 0:
			return 0
		}
		t.st = qText
		e.addContent(b[:n])
		return n
	case qOpen:
		return t.qwenOpen(e, b, eof)
	case qFnName:
		return t.qwenName(e, b, eof)
	case qBody:
		return t.qwenBody(e, b, eof)
	case qParName:
		return t.qwenParName(b)
	case qValue:
		return t.qwenValue(e, b, eof)
	case qFnEnd:
		if n := skipSpace(b); n > 0 {
			return n
		}
		n, m := t.qf.fnEndMarks.next(b, eof)
		switch {
		case m == 0:
			t.st = qAfter
			return len(t.qf.close)
		case n == 0:
			return 0
		}
		t.st = qText
		return 0
	}
	return 0
}

// qwenOpen reads the whitespace and "<function=" after the call's opening marker.
func (t *toolStage) qwenOpen(e *emitter, b []byte, eof bool) int {
	if n := skipSpace(b); n > 0 {
		if n = t.capRegion(n); n == 0 {
			return t.headerToContent(e, qText)
		}
		t.region = append(t.region, b[:n]...)
		return n
	}
	switch markerAt(b, qFnOpen) {
	case fullMatch:
		t.region = append(t.region, qFnOpen...)
		t.name = t.name[:0]
		t.st = qFnName
		return len(qFnOpen)
	case partMatch:
		if !eof {
			return 0
		}
	}
	return t.headerToContent(e, qText)
}

// qwenName reads a function name up to its ">" and commits the call there; a line break or a
// "<" first, or a name longer than MaxCallBytes, makes the call content.
func (t *toolStage) qwenName(e *emitter, b []byte, eof bool) int {
	for i, c := range b {
		switch c {
		case '>':
			t.region = append(t.region, b[:i+1]...)
			t.name = append(t.name, b[:i]...)
			t.call.idx = e.startCall(string(t.name))
			t.xml.begin(t.tools, string(t.name))
			t.region, t.name = t.region[:0], t.name[:0]
			t.st = qBody
			return i + 1
		case '\n', '<':
			t.region = append(t.region, b[:i]...)
			return i + t.headerToContent(e, qText)
		}
		if len(t.region)+i+1 > t.limit {
			return t.headerToContent(e, qText)
		}
	}
	if eof {
		return t.headerToContent(e, qText) // b goes on as text
	}
	t.region = append(t.region, b...)
	t.name = append(t.name, b...)
	return len(b)
}

// qwenBody reads between parameters: whitespace and stray text are dropped.
func (t *toolStage) qwenBody(e *emitter, b []byte, eof bool) int {
	n, m := t.qf.bodyMarks.next(b, eof)
	switch m {
	case 0:
		t.xml.pname = t.xml.pname[:0]
		t.st = qParName
		return len(qParOpen)
	case 1:
		t.xml.closeCall(e, t.call.idx)
		t.st = qFnEnd
		return len(qFnClose)
	case 2:
		t.xml.closeCall(e, t.call.idx)
		t.st = qAfter
		return len(t.qf.close)
	}
	return n
}

// qwenParName reads a parameter name up to its ">" (a name longer than MaxCallBytes is cut
// there).
func (t *toolStage) qwenParName(b []byte) int {
	for i, c := range b {
		if c == '>' {
			t.xml.addName(b[:i], t.limit)
			t.xml.startValue()
			t.st = qValue
			return i + 1
		}
	}
	t.xml.addName(b, t.limit)
	return len(b)
}

// qwenValue reads a parameter value up to the marker that ends it.
func (t *toolStage) qwenValue(e *emitter, b []byte, eof bool) int {
	if t.xml.atStart {
		t.xml.atStart = false
		if b[0] == '\n' {
			return 1
		}
	}
	n, m := t.qf.valueEnds.next(b, eof)
	if m < 0 {
		if n > 0 {
			t.xml.addValue(e, t.call.idx, b[:n], t.limit)
		}
		return n
	}
	t.xml.endValue(e, t.call.idx)
	switch m {
	case 0:
		t.st = qBody
	case 1:
		t.xml.pname = t.xml.pname[:0]
		t.st = qParName
	case 2:
		t.xml.closeCall(e, t.call.idx)
		t.st = qFnEnd
	case 3:
		t.xml.closeCall(e, t.call.idx)
		t.st = qAfter
	}
	return len(t.qf.valueEnds.ms[m])
}

// finishQwenXML resolves the state at the end of output: a call cut off in its header is
// content, one cut off in its body is closed with what it has.
func (t *toolStage) finishQwenXML(e *emitter) {
	switch t.st {
	case qOpen, qFnName:
		t.headerToContent(e, qText)
	case qValue:
		t.xml.endValue(e, t.call.idx)
		t.xml.closeCall(e, t.call.idx)
	case qBody, qParName:
		t.xml.closeCall(e, t.call.idx)
	}
}
