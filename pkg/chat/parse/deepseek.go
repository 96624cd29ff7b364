package parse

import "bytes"

// deepseek_v3: vllm/tool_parsers/deepseekv3_tool_parser.py.
//
//	content<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//	\n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// The type must be "function" (vLLM's ToolCall type is Literal["function"]), the name runs to
// the end of its line, the arguments are the raw text between "```json\n" and
// "\n```<｜tool▁call▁end｜>" (a bare "<｜tool▁call▁end｜>" also ends them), not re-serialised.
// Content is the text before "<｜tool▁calls▁begin｜>"; whitespace inside the calls block and after
// it is dropped, other text after it is content. A call whose header is malformed is content.

const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
	dsFence      = "```json\n"
	dsArgsEnd    = "\n```" + dsCallEnd
)

var dsSectionMarkers = []string{dsCallBegin, dsCallsEnd}

const (
	dText uint8 = iota
	dSection
	dType
	dName
	dFence
	dArgs
	dAfter
)

// capRegion limits a run of j header bytes so that the header overflows MaxCallBytes on the same
// byte however the text was split; 0 means it is full.
func (t *toolStage) capRegion(j int) int { return max(0, min(j, t.limit-len(t.region))) }

func (t *toolStage) dsFail(e *emitter) int {
	e.addContent(t.region)
	t.region, t.name, t.typ = t.region[:0], t.name[:0], t.typ[:0]
	t.st = dSection
	return 0
}

func (t *toolStage) stepDeepSeek(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case dText:
		j := bytes.IndexByte(b, '<')
		if j != 0 {
			if j < 0 {
				j = len(b)
			}
			e.addContent(b[:j])
			return j
		}
		switch markerAt(b, dsCallsBegin) {
		case fullMatch:
			t.st = dSection
			return len(dsCallsBegin)
		case partMatch:
			if !eof {
				return 0
			}
		}
		e.addContent(b[:1])
		return 1
	case dSection, dAfter:
		if n := skipSpace(b); n > 0 {
			return n
		}
		if t.st == dSection {
			full, part := anyMarkerAt(b, dsSectionMarkers)
			switch {
			case full == 0:
				t.region = append(t.region[:0], dsCallBegin...)
				t.st = dType
				return len(dsCallBegin)
			case full == 1:
				t.st = dAfter
				return len(dsCallsEnd)
			case part && !eof:
				return 0
			}
		}
		t.st = dText
		return 0
	case dType:
		j := indexAny2(b, '<', '\n')
		if j != 0 {
			if j < 0 {
				j = len(b)
			}
			j = t.capRegion(j)
			if j == 0 {
				return t.dsFail(e)
			}
			t.region = append(t.region, b[:j]...)
			t.typ = append(t.typ, b[:j]...)
			return j
		}
		if b[0] == '\n' {
			return t.dsFail(e)
		}
		switch markerAt(b, dsSep) {
		case fullMatch:
			t.region = append(t.region, dsSep...)
			t.name = t.name[:0]
			t.st = dName
			return len(dsSep)
		case partMatch:
			if !eof {
				return 0
			}
		}
		t.region = append(t.region, '<')
		t.typ = append(t.typ, '<')
		return 1
	case dName:
		j := bytes.IndexByte(b, '\n')
		if j < 0 {
			j = len(b)
		}
		if j = t.capRegion(j); j == 0 && b[0] != '\n' {
			return t.dsFail(e)
		}
		t.region = append(t.region, b[:j]...)
		t.name = append(t.name, b[:j]...)
		if j < len(b) && b[j] == '\n' {
			t.region = append(t.region, '\n')
			t.st = dFence
			return j + 1
		}
		return j
	case dFence:
		switch markerAt(b, dsFence) {
		case fullMatch:
			if string(t.typ) != "function" {
				return t.dsFail(e)
			}
			t.call.idx = e.startCall(string(t.name))
			t.region, t.name, t.typ = t.region[:0], t.name[:0], t.typ[:0]
			t.st = dArgs
			return len(dsFence)
		case partMatch:
			if !eof {
				return 0
			}
		}
		return t.dsFail(e)
	case dArgs:
		j := indexAny2(b, '\n', '<')
		if j != 0 {
			if j < 0 {
				j = len(b)
			}
			e.addArgs(t.call.idx, b[:j])
			return j
		}
		end := dsArgsEnd
		if b[0] == '<' {
			end = dsCallEnd
		}
		switch markerAt(b, end) {
		case fullMatch:
			t.st = dSection
			return len(end)
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
