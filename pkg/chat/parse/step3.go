package parse

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"

	"github.com/kvgate/kvgate/pkg/chat/internal/pyfloat"
	"github.com/kvgate/kvgate/pkg/openai"
)

// step3: Step3's calls, vllm/tool_parsers/step3_tool_parser.py (its streaming path).
//
//	content<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="NAME"><steptml:parameter name="P">VALUE</steptml:parameter></steptml:invoke><｜tool_call_end｜>...<｜tool_calls_end｜>content
//
// Content is the text before the block, as written. In the block, text outside calls
// (whitespace, a "<｜tool_sep｜>" between calls) is dropped, as vLLM's non-streaming path drops
// it (its streaming path stops reading at anything but whitespace); a call is the text between
// its begin and end markers. Its name is that of the first
// `<steptml:invoke name="NAME">` in it (NAME: no quote, not empty; what comes before it, such as
// "function<｜tool_sep｜>", is not read), sent with the call's id as soon as it is complete. Its
// parameters, every `<steptml:parameter name="P">VALUE</steptml:parameter>` of the call's text
// with no "<" in VALUE (a later duplicate replacing the value in place, as a dict does), are
// sent once the call ends, as json.dumps of VALUE stripped and cast by the tool's schema
// (step3Value). Everything after the block's end marker is content, a second block included.
//
// Bounded and malformed input (vLLM's streaming parser stops reading at most of these):
//   - a call whose text holds no complete invoke header is content;
//   - a call with no parameter gets "{}" (vLLM's streaming path sends no arguments for it);
//   - a call cut off by the end of output, or longer than MaxCallBytes, is closed with the
//     parameters complete so far (before its header: content); the rest of an over-long call
//     is dropped as other text in the block is.

const (
	s3CallsBegin = "<｜tool_calls_begin｜>"
	s3CallsEnd   = "<｜tool_calls_end｜>"
	s3CallBegin  = "<｜tool_call_begin｜>"
	s3CallEnd    = "<｜tool_call_end｜>"
	s3Invoke     = `<steptml:invoke name="`
	s3Param      = `<steptml:parameter name="`
	s3ParamEnd   = "</steptml:parameter>"
)

var (
	s3ContentEnd = newMarkerSet(s3CallsBegin)
	s3BlockMarks = newMarkerSet(s3CallBegin, s3CallsEnd)
	s3CallEnds   = newMarkerSet(s3CallEnd)
)

const (
	s3Text uint8 = iota
	s3Block
	s3Call
	s3After
)

// step3Call is the state of the call being read: whether its name was sent (and its index),
// and where the search for its invoke header goes on.
type step3Call struct {
	committed bool
	idx       int
	name      string
	scan      int
}

func (t *toolStage) stepStep3(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case s3Text:
		n, m := s3ContentEnd.next(b, eof)
		if m == 0 {
			t.st = s3Block
			return len(s3CallsBegin)
		}
		e.addContent(b[:n])
		return n
	case s3Block:
		n, m := s3BlockMarks.next(b, eof)
		switch m {
		case 0:
			t.region = append(t.region[:0], s3CallBegin...)
			t.s3 = step3Call{}
			t.st = s3Call
			return len(s3CallBegin)
		case 1:
			t.st = s3After
			return len(s3CallsEnd)
		}
		return n // other text in the block is dropped
	case s3Call:
		return t.step3Body(e, b, eof)
	}
	e.addContent(b)
	return len(b)
}

// step3Body takes the text of a call up to its end marker, at most MaxCallBytes of it.
func (t *toolStage) step3Body(e *emitter, b []byte, eof bool) int {
	n, m := s3CallEnds.next(b, eof)
	switch {
	case m == 0:
		t.step3Close(e)
		t.st = s3Block
		return len(s3CallEnd)
	case n == 0:
		return 0
	}
	room := t.limit - (len(t.region) - len(s3CallBegin))
	if room <= 0 {
		t.step3Close(e)
		t.st = s3Block
		return 0
	}
	n = min(n, room)
	t.region = append(t.region, b[:n]...)
	if !t.s3.committed {
		t.step3Commit(e, false)
	}
	return n
}

// step3Commit sends the call's id and name once its invoke header is complete.
func (t *toolStage) step3Commit(e *emitter, final bool) {
	if name, ok := t.step3Header(final); ok {
		t.s3.idx = e.startCall(name)
		t.s3.name = name
		t.s3.committed = true
	}
}

// step3Header searches the call's text for its invoke header from where the last search
// stopped; a header still incomplete at the end of the text waits for more unless final.
func (t *toolStage) step3Header(final bool) (string, bool) {
	body := t.region[len(s3CallBegin):]
	for {
		i := bytes.Index(body[t.s3.scan:], []byte(s3Invoke))
		if i < 0 {
			t.s3.scan = max(t.s3.scan, len(body)-len(s3Invoke)+1)
			return "", false
		}
		i += t.s3.scan
		name, _, st := quotedAttr(body, i+len(s3Invoke))
		switch {
		case st == attrOK:
			return string(name), true
		case st == attrWait && !final:
			t.s3.scan = i
			return "", false
		}
		t.s3.scan = i + 1
	}
}

const (
	attrOK = iota
	attrBad
	attrWait
)

// quotedAttr reads `VALUE">` at b[j:] (VALUE: no quote, not empty): VALUE and the index after
// the ">", or why not (attrWait: b ends before it is decided).
func quotedAttr(b []byte, j int) ([]byte, int, int) {
	q := bytes.IndexByte(b[j:], '"')
	switch {
	case q < 0:
		return nil, 0, attrWait
	case q == 0:
		return nil, 0, attrBad
	case j+q+1 == len(b):
		return nil, 0, attrWait
	case b[j+q+1] != '>':
		return nil, 0, attrBad
	}
	return b[j : j+q], j + q + 2, attrOK
}

// step3Close ends the call being read: a call without a name is content; one with a name gets
// its arguments.
func (t *toolStage) step3Close(e *emitter) {
	if !t.s3.committed {
		t.step3Commit(e, true)
	}
	if !t.s3.committed {
		t.headerToContent(e, t.st)
		return
	}
	body := t.region[len(s3CallBegin):]
	e.addArgs(t.s3.idx, step3Args(body, step3Schema(t.tools, t.s3.name)))
	t.region = t.region[:0]
	t.s3 = step3Call{}
}

// step3Args is json.dumps of the call's parameters (findall of the parameter pattern over its
// text), each value stripped and cast by its schema type.
func step3Args(body []byte, types map[string]string) []byte {
	var keys []string
	vals := map[string]string{}
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(s3Param))
		if j < 0 {
			break
		}
		j += i
		i = j + 1
		name, v, st := quotedAttr(body, j+len(s3Param))
		if st != attrOK {
			continue
		}
		k := bytes.IndexByte(body[v:], '<')
		if k < 0 || !bytes.HasPrefix(body[v+k:], []byte(s3ParamEnd)) {
			continue
		}
		if _, ok := vals[string(name)]; !ok {
			keys = append(keys, string(name))
		}
		vals[string(name)] = strings.TrimFunc(string(body[v:v+k]), pyIsSpace)
		i = v + k + len(s3ParamEnd)
	}
	args := []byte{'{'}
	for n, k := range keys {
		if n > 0 {
			args = append(args, ", "...)
		}
		args = append(appendPyString(args, []byte(k)), ": "...)
		args = step3Value(args, vals[k], types[k])
	}
	return append(args, '}')
}

// step3Schema maps the parameters of the first tool named name to their schema "type" when it
// is a string (_cast_arguments reads nothing else).
func step3Schema(tools []openai.ChatTool, name string) map[string]string {
	for _, tl := range tools {
		if tl.Name != name {
			continue
		}
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if json.Unmarshal(tl.Parameters, &s) != nil {
			return nil
		}
		types := map[string]string{}
		for k, raw := range s.Properties {
			var p struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(raw, &p) == nil {
				types[k] = p.Type
			}
		}
		return types
	}
	return nil
}

// step3Value appends the JSON of a stripped value as _cast_arguments casts it: integer by
// Python's int(), number by float() (repr), boolean "true"/"false" and null "null" in any case;
// a value that does not read, and any other type, stays the string. A float that is infinite or
// NaN stays the string too (vLLM would write Infinity or NaN, which is not JSON).
func step3Value(dst []byte, v, typ string) []byte {
	low := strings.ToLower(v)
	switch typ {
	case "integer":
		if s, ok := pyInt(v); ok {
			return append(dst, s...)
		}
	case "number":
		if f, ok := pyFloat(v); ok {
			return pyfloat.Append(dst, f)
		}
	case "boolean":
		if low == "true" || low == "false" {
			return append(dst, low...)
		}
	case "null":
		if low == "null" {
			return append(dst, "null"...)
		}
	}
	return appendPyString(dst, []byte(v))
}

// pyIsSpace is Python's str.isspace() for one character.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// finishStep3 closes a call cut off by the end of output.
func (t *toolStage) finishStep3(e *emitter) {
	if t.st == s3Call {
		t.step3Close(e)
		t.st = s3Block
	}
}
