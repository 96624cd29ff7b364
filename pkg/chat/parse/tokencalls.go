package parse

import (
	"bytes"
	"strings"
)

// Token-delimited calls with raw JSON arguments: kimi_k2 and deepseek_v31 (one machine, a
// tokenFormat each).
//
// kimi_k2 (vllm/tool_parsers/kimi_k2_tool_parser.py):
//
//	content<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
//
// The call's id is its header, "functions.NAME:IDX" (whitespace around it removed; it must end
// in ":" and digits and hold no "<"); the name is the header before that ":" less a
// "functions." prefix. Arguments are the raw text, whitespace around it removed.
//
// deepseek_v31 (vllm/tool_parsers/deepseekv31_tool_parser.py, DeepSeek V3.1 and V3.2's
// non-DSML form):
//
//	content<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//
// The name is the header as written (not empty), the arguments the raw text, the id made as
// for the JSON formats.
//
// For both: content is the text before the section; whitespace inside the section and after
// it is dropped, other text after it is content; a header that is malformed or cut off makes
// the call content. A call is committed at its arguments marker; a new call marker inside the
// arguments ends them.
type tokenFormat struct {
	sectionBegin, sectionEnd, callBegin, argsBegin, callEnd string
	kimi                                                    bool
}

var (
	kimiFormat = &tokenFormat{sectionBegin: kimiSectionBegin, sectionEnd: "<|tool_calls_section_end|>",
		callBegin: "<|tool_call_begin|>", argsBegin: "<|tool_call_argument_begin|>", callEnd: "<|tool_call_end|>", kimi: true}
	dsv31Format = &tokenFormat{sectionBegin: dsCallsBegin, sectionEnd: dsCallsEnd, callBegin: dsCallBegin,
		argsBegin: dsSep, callEnd: dsCallEnd}
)

// tokenMarks are a tokenFormat's marker sets, built once.
type tokenMarks struct {
	content, section, header, args *markerSet
}

var tokenMarkSets = map[*tokenFormat]*tokenMarks{}

func init() {
	for _, f := range []*tokenFormat{kimiFormat, dsv31Format} {
		tokenMarkSets[f] = &tokenMarks{
			content: newMarkerSet(f.sectionBegin),
			section: newMarkerSet(f.callBegin, f.sectionEnd),
			header:  newMarkerSet(f.argsBegin, f.callBegin, f.callEnd, f.sectionEnd),
			args:    newMarkerSet(f.callEnd, f.callBegin, f.sectionEnd),
		}
	}
}

const (
	tText uint8 = iota
	tSection
	tHeader
	tArgs
	tAfter
)

func (t *toolStage) stepToken(e *emitter, b []byte, eof bool) int {
	f, ms := t.tokFmt, tokenMarkSets[t.tokFmt]
	switch t.st {
	case tText:
		n, m := ms.content.next(b, eof)
		if m == 0 {
			t.st = tSection
			return len(f.sectionBegin)
		}
		e.addContent(b[:n])
		return n
	case tSection, tAfter:
		if n := skipSpace(b); n > 0 {
			return n
		}
		if t.st == tSection {
			n, m := ms.section.next(b, eof)
			switch {
			case m == 0:
				t.region = append(t.region[:0], f.callBegin...)
				t.name = t.name[:0]
				t.st = tHeader
				return len(f.callBegin)
			case m == 1:
				t.st = tAfter
				return len(f.sectionEnd)
			case n == 0:
				return 0
			}
		}
		t.st = tText
		return 0
	case tHeader:
		n, m := ms.header.next(b, eof)
		switch {
		case m == 0:
			return t.tokenCommit(e)
		case m > 0:
			return t.headerToContent(e, tSection)
		case n == 0:
			return 0
		}
		return t.holdHeader(e, b[:n], ms.header, &t.name, tSection)
	case tArgs:
		return t.tokenArgs(e, b, eof)
	}
	return 0
}

// tokenCommit reads a finished header and commits its call, or makes a malformed one content.
func (t *toolStage) tokenCommit(e *emitter) int {
	f := t.tokFmt
	h := string(t.name)
	var name, id string
	if f.kimi {
		h = strings.TrimSpace(h)
		i := strings.LastIndexByte(h, ':')
		if i <= 0 || i == len(h)-1 || strings.IndexFunc(h[i+1:], func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
			return t.headerToContent(e, tSection)
		}
		name, id = strings.TrimPrefix(h[:i], "functions."), h
	} else {
		name = h
	}
	if name == "" {
		return t.headerToContent(e, tSection)
	}
	t.call.idx = e.startCallID(name, id)
	t.region, t.name = t.region[:0], t.name[:0]
	t.ws, t.wsFlush, t.argsStarted = t.ws[:0], false, false
	t.st = tArgs
	return len(f.argsBegin)
}

// tokenArgs passes raw arguments on up to the call's end; kimi holds back whitespace (dropped
// at both ends of the arguments), at most MaxCallBytes of it: a longer run is sent.
func (t *toolStage) tokenArgs(e *emitter, b []byte, eof bool) int {
	ms := tokenMarkSets[t.tokFmt]
	n, m := ms.args.next(b, eof)
	if m >= 0 {
		t.ws = t.ws[:0]
		t.st = tSection
		if m == 0 {
			return len(t.tokFmt.callEnd)
		}
		return 0 // a call or the section's end: read again in the section
	}
	text := b[:n]
	if !t.tokFmt.kimi {
		e.addArgs(t.call.idx, text)
		return n
	}
	for len(text) > 0 {
		k := 0
		for k < len(text) && isJSONSpace(text[k]) {
			k++
		}
		if k > 0 {
			if t.argsStarted {
				t.ws = append(t.ws, text[:k]...)
				if t.wsFlush || len(t.ws) > t.limit {
					e.addArgs(t.call.idx, t.ws)
					t.ws, t.wsFlush = t.ws[:0], true
				}
			}
			text = text[k:]
			continue
		}
		j := bytes.IndexFunc(text, func(r rune) bool { return r < 0x80 && isJSONSpace(byte(r)) })
		if j < 0 {
			j = len(text)
		}
		e.addArgs(t.call.idx, t.ws)
		e.addArgs(t.call.idx, text[:j])
		t.ws, t.wsFlush, t.argsStarted = t.ws[:0], false, true
		text = text[j:]
	}
	return n
}

// finishToken resolves the end of output: a header cut off is content.
func (t *toolStage) finishToken(e *emitter) {
	if t.st == tHeader {
		t.headerToContent(e, tSection)
	}
}
