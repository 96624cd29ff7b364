package parse

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

var (
	dsContentEnd     = newMarkerSet(dsCallsBegin)
	dsSectionMarkers = newMarkerSet(dsCallBegin, dsCallsEnd)
	dsTypeEnd        = newMarkerSet(dsSep, "\n") // a type runs to the separator; a newline first is malformed
	dsNameEnd        = newMarkerSet("\n")
	dsArgsEnds       = newMarkerSet(dsArgsEnd, dsCallEnd)
)

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

// holdHeader keeps text, ordinary text at the head of the buffer (what ends.next found), as
// call-header text: in region, to give back as content should the call turn out malformed,
// and in part (the type or the name). A run is capped so that the header overflows
// MaxCallBytes on the same byte however the text was split (a lone marker byte is taken whole);
// a header that is full becomes content and the stage goes on in state full. It returns the
// bytes consumed.
func (t *toolStage) holdHeader(e *emitter, text []byte, ends *markerSet, part *[]byte, full uint8) int {
	n := len(text)
	if !ends.starts(text[0]) {
		if n = t.capRegion(n); n == 0 {
			return t.headerToContent(e, full)
		}
	}
	t.region = append(t.region, text[:n]...)
	*part = append(*part, text[:n]...)
	return n
}

// headerToContent turns the held header of a call that turned out malformed (or was cut off by
// the end of output) into content, goes on in state st and returns 0 (nothing more consumed).
func (t *toolStage) headerToContent(e *emitter, st uint8) int {
	e.addContent(t.region)
	t.region, t.name, t.typ = t.region[:0], t.name[:0], t.typ[:0]
	t.st = st
	return 0
}

func (t *toolStage) stepDeepSeek(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case dText:
		n, m := dsContentEnd.next(b, eof)
		switch {
		case m == 0:
			t.st = dSection
			return len(dsCallsBegin)
		case n > 0:
			e.addContent(b[:n])
		}
		return n
	case dSection, dAfter:
		if n := skipSpace(b); n > 0 {
			return n
		}
		if t.st == dSection {
			n, m := dsSectionMarkers.next(b, eof)
			switch {
			case m == 0:
				t.region = append(t.region[:0], dsCallBegin...)
				t.st = dType
				return len(dsCallBegin)
			case m == 1:
				t.st = dAfter
				return len(dsCallsEnd)
			case n == 0:
				return 0
			}
		}
		t.st = dText
		return 0
	case dType:
		n, m := dsTypeEnd.next(b, eof)
		switch {
		case m == 0:
			t.region = append(t.region, dsSep...)
			t.name = t.name[:0]
			t.st = dName
			return len(dsSep)
		case m == 1:
			return t.headerToContent(e, dSection)
		case n == 0:
			return 0
		}
		return t.holdHeader(e, b[:n], dsTypeEnd, &t.typ, dSection)
	case dName:
		if n, m := dsNameEnd.next(b, eof); m < 0 {
			return t.holdHeader(e, b[:n], dsNameEnd, &t.name, dSection)
		}
		t.region = append(t.region, '\n')
		t.st = dFence
		return 1
	case dFence:
		switch markerAt(b, dsFence) {
		case fullMatch:
			if string(t.typ) != "function" {
				return t.headerToContent(e, dSection)
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
		return t.headerToContent(e, dSection)
	case dArgs:
		n, m := dsArgsEnds.next(b, eof)
		switch {
		case m >= 0:
			t.st = dSection
			return len(dsArgsEnds.ms[m])
		case n > 0:
			e.addArgs(t.call.idx, b[:n])
		}
		return n
	}
	return 0
}
