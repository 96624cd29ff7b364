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

func (t *toolStage) stepMistral(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case mText, mAfter:
		if t.st == mAfter {
			if n := skipSpace(b); n > 0 {
				return n
			}
		}
		j := bytes.IndexByte(b, '[')
		if j != 0 {
			if j < 0 {
				j = len(b)
			}
			t.st = mText
			e.addContent(b[:j])
			return j
		}
		switch markerAt(b, mistralCalls) {
		case fullMatch:
			t.st = mSection
			t.region = append(t.region[:0], mistralCalls...)
			return len(mistralCalls)
		case partMatch:
			if !eof {
				return 0
			}
		}
		t.st = mText
		e.addContent(b[:1])
		return 1
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
		j := indexAny2(b, '{', '[')
		if j != 0 {
			if j < 0 {
				j = len(b)
			}
			if j = t.capRegion(j); j == 0 {
				e.addContent(t.region)
				t.region, t.name = t.region[:0], t.name[:0]
				t.st = mText
				return 0
			}
			t.region = append(t.region, b[:j]...)
			t.name = append(t.name, b[:j]...)
			return j
		}
		if b[0] == '{' {
			t.call.idx = e.startCall(string(bytes.TrimSpace(t.name)))
			t.region, t.name = t.region[:0], t.name[:0]
			t.st = mArgs
			return 0
		}
		full, part := anyMarkerAt(b, mistralMarkers)
		switch {
		case full == 1: // [ARGS]
			t.region = append(t.region, mistralArgs...)
			return len(mistralArgs)
		case full == 0: // a new call before this one had arguments: it was not a call
			e.addContent(t.region)
			t.region, t.name = t.region[:0], t.name[:0]
			t.st = mText
			return 0
		case part && !eof:
			return 0
		}
		t.region = append(t.region, b[0])
		t.name = append(t.name, b[0])
		return 1
	case mArgs, mRawArgs:
		j := bytes.IndexByte(b, '[')
		if j != 0 {
			if j < 0 {
				j = len(b)
			}
			e.addArgs(t.call.idx, b[:j])
			return j
		}
		switch markerAt(b, mistralCalls) {
		case fullMatch:
			t.st = mSection
			t.region = append(t.region[:0], mistralCalls...)
			return len(mistralCalls)
		case partMatch:
			if !eof {
				return 0
			}
		}
		e.addArgs(t.call.idx, b[:1])
		return 1
	}
	return 0
}

var mistralMarkers = []string{mistralCalls, mistralArgs}

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
