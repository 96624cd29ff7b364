package parse

import "bytes"

// deepseek_v32's recovery of calls written outside a block, as the later version of vLLM's
// classic parser streams them (_process_content_buffer):
//   - "<｜DSML｜tool_calls>" ... "</｜DSML｜tool_calls>" (another model's block) is content as
//     written, unless "<｜DSML｜function_calls>" starts in it, which opens a block there;
//   - `<｜DSML｜invoke name="NAME">` in the content, NAME one of the request's tools (an
//     "orphan" invoke), is a call read as in a block; after its "</｜DSML｜invoke>", whitespace
//     and one "</｜DSML｜function_calls>" are dropped; whitespace before the start of another
//     call or block is dropped too, other whitespace is content (at the end of output: dropped).
//     A "<｜DSML｜function_calls>" inside the name starts a block there instead; a name that is
//     not a tool's (or cannot grow into one) leaves the text content.

const (
	dsForeignStart = "<｜DSML｜tool_calls>"
	dsForeignEnd   = "</｜DSML｜tool_calls>"
	dsOrphan       = `<｜DSML｜invoke name="`
	dsmlNameEnd    = `">`
)

var (
	dsmlContentEnd    = newMarkerSet(dsFCStart, dsForeignStart)
	dsmlContentOrphan = newMarkerSet(dsFCStart, dsForeignStart, dsOrphan)
	dsmlForeignEnds   = newMarkerSet(dsForeignEnd, dsFCStart)
)

// dsmlContent reads content outside blocks.
func (t *toolStage) dsmlContent(e *emitter, b []byte, eof bool) int {
	ms := dsmlContentEnd
	if len(t.tools) > 0 {
		ms = dsmlContentOrphan
	}
	n, m := ms.next(b, eof)
	switch m {
	case 0:
		t.st = dvBlock
		return len(dsFCStart)
	case 1:
		e.addContentString(dsForeignStart)
		t.st = dvForeign
		return len(dsForeignStart)
	case 2:
		return t.dsmlOrphan(e, b, eof)
	}
	e.addContent(b[:n])
	return n
}

// dsmlForeign reads another model's block, content up to its end or a DSML block.
func (t *toolStage) dsmlForeign(e *emitter, b []byte, eof bool) int {
	n, m := dsmlForeignEnds.next(b, eof)
	switch m {
	case 0:
		e.addContentString(dsForeignEnd)
		t.st = dvText
		return len(dsForeignEnd)
	case 1:
		t.st = dvBlock
		return len(dsFCStart)
	}
	e.addContent(b[:n])
	return n
}

// dsmlOrphan decides an orphan invoke at the head of b.
func (t *toolStage) dsmlOrphan(e *emitter, b []byte, eof bool) int {
	rest := b[len(dsOrphan):]
	end := bytes.Index(rest, []byte(dsmlNameEnd))
	if native := bytes.Index(rest, []byte(dsFCStart)); native >= 0 && (end < 0 || native < end) {
		e.addContent(b[:len(dsOrphan)+native])
		return len(dsOrphan) + native
	}
	switch {
	case end < 0 && !eof && t.dsmlCanGrow(rest):
		return 0
	case end < 0 || !t.dsmlToolName(rest[:end]):
		e.addContent(b[:1])
		return 1
	}
	name := string(rest[:end])
	t.ds = dsmlCall{name: name, props: dsmlProps(t.tools, name), orphan: true, val: t.ds.val[:0]}
	t.ds.idx = e.startCall(name)
	t.st = dvCall
	return len(dsOrphan) + end + len(dsmlNameEnd)
}

// dsmlToolName reports whether name is one of the request's tools.
func (t *toolStage) dsmlToolName(name []byte) bool {
	for _, tl := range t.tools {
		if tl.Name == string(name) {
			return true
		}
	}
	return false
}

// dsmlCanGrow is _can_grow_into_allowed_name: the text after the prefix, less a trailing `"`,
// may still become a tool's name.
func (t *toolStage) dsmlCanGrow(rest []byte) bool {
	for _, tl := range t.tools {
		if bytes.HasPrefix([]byte(tl.Name), rest) ||
			bytes.HasSuffix(rest, []byte{'"'}) && bytes.HasPrefix([]byte(tl.Name), rest[:len(rest)-1]) {
			return true
		}
	}
	return false
}

// dsmlAfterOrphan reads what follows an orphan call (see above); a whitespace run is looked at
// up to MaxCallBytes.
func (t *toolStage) dsmlAfterOrphan(e *emitter, b []byte, eof bool) int {
	ws, wait := skipPySpace(b[:min(len(b), t.limit)], eof || len(b) >= t.limit)
	if wait {
		return 0
	}
	rest := b[ws:]
	switch {
	case ws >= t.limit:
	case len(rest) == 0 && eof:
		t.st = dvText
		return ws // trailing whitespace: dropped
	case len(rest) == 0:
		return 0
	case markerAt(rest, dsFCEnd) == fullMatch:
		t.st = dvText
		return ws + len(dsFCEnd)
	}
	if ws < t.limit {
		_, part := anyMarkerAt(rest, []string{dsFCEnd, dsFCStart, dsOrphan})
		full, _ := anyMarkerAt(rest, []string{dsFCStart, dsOrphan})
		switch {
		case full >= 0:
			t.st = dvText
			return ws
		case part && !eof:
			return 0
		}
	}
	e.addContent(b[:ws])
	t.st = dvText
	return ws
}
