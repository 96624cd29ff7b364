package parse

import "bytes"

// mistral: vllm/tool_parsers/mistral_tool_parser.py. vLLM picks the form from the tokenizer
// (pre-v11 when "[ARGS]" is not in the vocabulary); here the text picks it, which agrees for
// well-formed output:
//
//	content[TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]     (tokenizer < v11)
//	content[TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g{...}                 (tokenizer >= v11)
//
// A "[" after "[TOOL_CALLS]" (and whitespace) selects the JSON array form: each element needs a
// string "name"; "arguments" defaults to {}, sent as json.dumps(..., ensure_ascii=False). Any
// other text selects the name form: the name runs to the first "{" ("[ARGS]" removed,
// whitespace around it trimmed) and the arguments are the raw text from that "{" to the next
// "[TOOL_CALLS]" or the end, not validated (vLLM keeps malformed arguments as a call "to allow
// the model to know it tried to make a tool call"). Content is the text before the first
// "[TOOL_CALLS]". Ids are 9 letters and digits, as Mistral requires.

const (
	mistralCalls = "[TOOL_CALLS]"
	mistralArgs  = "[ARGS]"
)

const (
	mText uint8 = iota
	mSection
	mArray
	mRawArgs
	mName
	mArgs
	mAfter
)

var (
	mistralCallsMarker = newMarkerSet(mistralCalls)
	// A name runs to the "{" of its arguments ("[ARGS]" dropped); a "[TOOL_CALLS]" first means
	// it was not a call.
	mistralNameEnds = newMarkerSet("{", mistralCalls, mistralArgs)
)

func (t *toolStage) stepMistral(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case mText, mAfter:
		if t.st == mAfter {
			if n := skipSpace(b); n > 0 {
				return n
			}
		}
		n, m := mistralCallsMarker.next(b, eof)
		switch {
		case m == 0:
			return t.mistralSection()
		case n > 0:
			t.st = mText
			e.addContent(b[:n])
		}
		return n
	case mSection:
		if n := skipSpace(b); n > 0 {
			t.region = append(t.region, b[:n]...)
			return n
		}
		if b[0] == '[' && markerAt(b, mistralCalls) == noMatch && markerAt(b, mistralArgs) == noMatch {
			t.call.begin(string(t.region))
			t.region = t.region[:0]
			t.st = mArray
			return 0
		}
		if b[0] == '[' && !eof && (markerAt(b, mistralCalls) == partMatch || markerAt(b, mistralArgs) == partMatch) {
			return 0
		}
		t.name = t.name[:0]
		t.st = mName
		return 0
	case mArray:
		return t.feedArray(e, b, mRawArgs, mAfter, mText)
	case mName:
		n, m := mistralNameEnds.next(b, eof)
		switch {
		case m == 0: // "{"
			t.call.idx = e.startCall(string(bytes.TrimSpace(t.name)))
			t.region, t.name = t.region[:0], t.name[:0]
			t.st = mArgs
			return 0
		case m == 1: // a new call before this one had arguments: it was not a call
			return t.headerToContent(e, mText)
		case m == 2: // "[ARGS]"
			t.region = append(t.region, mistralArgs...)
			return len(mistralArgs)
		case n == 0:
			return 0
		}
		return t.holdHeader(e, b[:n], mistralNameEnds, &t.name, mText)
	case mArgs, mRawArgs:
		n, m := mistralCallsMarker.next(b, eof)
		switch {
		case m == 0:
			return t.mistralSection()
		case n > 0:
			e.addArgs(t.call.idx, b[:n])
		}
		return n
	}
	return 0
}

// mistralSection starts a calls section at its "[TOOL_CALLS]" and returns the marker's length.
func (t *toolStage) mistralSection() int {
	t.st = mSection
	t.region = append(t.region[:0], mistralCalls...)
	return len(mistralCalls)
}

// feedArray feeds an array of JSON calls (mistral's pre-v11 form, tool_choice "required").
func (t *toolStage) feedArray(e *emitter, b []byte, raw, after, text uint8) int {
	n, ev := t.call.feed(e, b)
	switch ev {
	case jEnvEnd:
		if t.call.endEnvelope(e) {
			t.call.nextEnvelope()
			return n
		}
		t.call.fail(e)
		t.st = text
		return n
	case jDone:
		t.call.nextEnvelope()
		t.st = after
		return n
	}
	return t.afterFeed(e, n, ev, raw, after, text)
}
