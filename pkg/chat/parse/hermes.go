package parse

// hermes: Qwen3 / Hermes calls, vllm/tool_parsers/hermes_tool_parser.py.
//
//	content<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>\n<tool_call>...
//
// Each call's JSON is an object with a string "name" and an "arguments" value (any JSON);
// arguments are sent as json.dumps(arguments, ensure_ascii=False). Content is the text before
// the first call; whitespace after a call's "</tool_call>" (between calls) is dropped; other
// text after a call is content. A call whose JSON breaks before it is committed (see
// callDriver) is content, markers included, as vLLM's non-streaming path makes it; a missing
// "</tool_call>" at the end of output is accepted, as vLLM's regex does.

const toolCallClose = "</tool_call>"

var (
	hermesOpen    = newMarkerSet(toolCallOpen)
	hermesClose   = newMarkerSet(toolCallClose)
	hermesMarkers = newMarkerSet(toolCallOpen, toolCallClose)
)

const (
	hText uint8 = iota
	hCall
	hRawArgs
	hTail
	hAfter
)

func (t *toolStage) stepHermes(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case hText:
		n, m := hermesOpen.next(b, eof)
		switch {
		case m == 0:
			return t.hermesCall()
		case n > 0:
			e.addContent(b[:n])
		}
		return n
	case hCall:
		n, m := hermesClose.next(b, eof)
		switch {
		case m == 0 && t.call.committed:
			t.call.m.end() // a number cut short by the marker is still sent
			t.call.sync(e)
			t.st = hAfter
			return len(toolCallClose)
		case m == 0:
			t.call.region = append(t.call.region, toolCallClose...)
			t.call.fail(e)
			t.st = hText
			return len(toolCallClose)
		case n > 0:
			k, ev := t.call.feed(e, b[:n])
			return t.afterFeed(e, k, ev, hRawArgs, hTail, hText)
		}
		return 0
	case hRawArgs:
		n, m := hermesMarkers.next(b, eof)
		switch {
		case m == 0:
			return t.hermesCall()
		case m == 1:
			t.st = hAfter
			return len(toolCallClose)
		case n > 0:
			e.addArgs(t.call.idx, b[:n])
		}
		return n
	case hTail, hAfter:
		if n := skipSpace(b); n > 0 {
			return n
		}
		n, m := hermesMarkers.next(b, eof)
		switch {
		case m == 0:
			return t.hermesCall()
		case m == 1 && t.st == hTail:
			t.st = hAfter
			return len(toolCallClose)
		case n == 0 && m < 0:
			return 0
		}
		t.st = hText
		return 0
	}
	return 0
}

// hermesCall starts a call at its "<tool_call>" and returns the marker's length.
func (t *toolStage) hermesCall() int {
	t.call.begin(toolCallOpen)
	t.st = hCall
	return len(toolCallOpen)
}

// afterFeed applies the outcome of feeding a call's JSON: on an error, a committed call goes
// on as raw arguments (error inside them) or as the tail after the JSON (error after them), and
// an uncommitted one becomes content; a complete JSON value ends the call. It returns the bytes
// consumed.
func (t *toolStage) afterFeed(e *emitter, n int, ev jevent, raw, tail, text uint8) int {
	switch ev {
	case jErr:
		switch {
		case t.call.committed && t.call.m.inArgs():
			t.st = raw
		case t.call.committed:
			t.st = tail
		default:
			t.call.fail(e)
			t.st = text
		}
	case jDone:
		if t.call.endEnvelope(e) {
			t.st = tail
		} else {
			t.call.fail(e)
			t.st = text
		}
	default:
		if t.call.overLimit(t.limit) {
			t.call.fail(e)
			t.st = text
		}
	}
	return n
}
