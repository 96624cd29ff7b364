package parse

import "github.com/kvgate/kvgate/pkg/openai"

// toolStage parses the text after reasoning into content and tool calls. One format per
// stream (the tool parser, or the request's named / required tool_choice); each format is a
// state machine whose step consumes a prefix of the buffered input it can decide.
type toolStage struct {
	limit int
	mode  toolMode
	fmt   toolFormat
	named string
	buf   []byte
	st    uint8
	call  callDriver
	// region is the raw text of a format's call header not yet committed (deepseek_v3, mistral
	// name form), kept to turn a malformed call back into content.
	region []byte
	name   []byte
	typ    []byte
	// tools are the request's tools (their schemas type XML parameter values); xml is the
	// call being built by an XML format.
	tools []openai.ChatTool
	xml   xmlCall
	// tokFmt is the token format (kimi_k2, deepseek_v31); ws is kimi's held whitespace inside
	// arguments (wsFlush: the run outgrew the limit and is sent), argsStarted whether a
	// non-space byte of them was sent.
	qf          *qwenFormat
	llama4      bool // llama4_pythonic: <|python_start|> tags
	tokFmt      *tokenFormat
	ws          []byte
	wsFlush     bool
	argsStarted bool
	s3          step3Call
	ds          dsmlCall
}

type toolFormat uint8

const (
	fmtContent toolFormat = iota
	fmtHermes
	fmtLlama
	fmtMistral
	fmtDeepSeek
	fmtNamed
	fmtRequired
	fmtQwenXML
	fmtGLM
	fmtToken
	fmtMiniMax
	fmtGranite
	fmtPythonic
	fmtStep3
	fmtDSML
)

func newToolStage(p *Parsers, mode toolMode, req RequestInfo) *toolStage {
	t := &toolStage{limit: p.maxCall, mode: mode, named: req.NamedTool, tools: req.Tools}
	t.call.m.limit = p.maxCall
	t.call.m.raw = p.rawArgs
	switch mode {
	case toolsNamed:
		t.fmt = fmtNamed
	case toolsRequired:
		t.fmt = fmtRequired
		t.call.m.envDepth = 2
		t.call.m.argKeys = []string{"parameters"}
	case toolsAuto:
		switch p.tool {
		case ToolHermes:
			t.fmt = fmtHermes
			t.call.m.envDepth = 1
			t.call.m.argKeys = []string{"arguments"}
		case ToolLlama3JSON:
			t.fmt = fmtLlama
			t.call.m.envDepth = 1
			t.call.m.argKeys = []string{"arguments", "parameters"}
		case ToolMistral:
			t.fmt = fmtMistral
			t.call.m.envDepth = 2
			t.call.m.argKeys = []string{"arguments"}
			t.call.argsDefault = "{}"
		case ToolDeepSeekV3:
			t.fmt = fmtDeepSeek
		case ToolQwen3Coder, ToolQwen3XML:
			t.fmt, t.qf = fmtQwenXML, qwenXML
		case ToolSeedOSS:
			t.fmt, t.qf = fmtQwenXML, seedXML
			t.xml.seed = true
		case ToolGLM45, ToolGLM47:
			t.fmt = fmtGLM
			t.xml.glm = true
		case ToolMiniMaxM2:
			t.fmt = fmtMiniMax
		case ToolPythonic, ToolLlama4Pythonic:
			t.fmt, t.llama4 = fmtPythonic, p.tool == ToolLlama4Pythonic
		case ToolStep3:
			t.fmt = fmtStep3
		case ToolDeepSeekV32:
			t.fmt = fmtDSML
		case ToolGranite:
			t.fmt = fmtGranite
			t.call.m.envDepth = 2
			t.call.m.argKeys = []string{"arguments"}
		case ToolKimiK2:
			t.fmt, t.tokFmt = fmtToken, kimiFormat
		case ToolDeepSeekV31:
			t.fmt, t.tokFmt = fmtToken, dsv31Format
		}
	}
	return t
}

func (t *toolStage) held() int {
	return len(t.buf) + t.call.held() + len(t.region) + len(t.name) + len(t.typ) + t.xml.held() + len(t.ws) + len(t.ds.val)
}

func (t *toolStage) run(e *emitter, text string, eof bool) {
	if t.fmt == fmtContent {
		e.addContentString(text)
		return
	}
	t.buf = append(t.buf, text...)
	t.process(e, eof)
}

func (t *toolStage) runBytes(e *emitter, b []byte) {
	if t.fmt == fmtContent {
		e.addContent(b)
		return
	}
	t.buf = append(t.buf, b...)
	t.process(e, false)
}

func (t *toolStage) process(e *emitter, eof bool) {
	b := t.buf
	for len(b) > 0 {
		st := t.st
		var n int
		switch t.fmt {
		case fmtHermes:
			n = t.stepHermes(e, b, eof)
		case fmtLlama:
			n = t.stepLlama(e, b, eof)
		case fmtMistral:
			n = t.stepMistral(e, b, eof)
		case fmtDeepSeek:
			n = t.stepDeepSeek(e, b, eof)
		case fmtNamed:
			n = t.stepNamed(e, b, eof)
		case fmtRequired:
			n = t.stepRequired(e, b, eof)
		case fmtQwenXML:
			n = t.stepQwenXML(e, b, eof)
		case fmtGLM:
			n = t.stepGLM(e, b, eof)
		case fmtToken:
			n = t.stepToken(e, b, eof)
		case fmtMiniMax:
			n = t.stepMiniMax(e, b, eof)
		case fmtGranite:
			n = t.stepGranite(e, b, eof)
		case fmtPythonic:
			n = t.stepPythonic(e, b, eof)
		case fmtStep3:
			n = t.stepStep3(e, b, eof)
		case fmtDSML:
			n = t.stepDSML(e, b, eof)
		}
		b = b[n:]
		if n == 0 && st == t.st {
			break // needs more input
		}
	}
	k := copy(t.buf, b)
	t.buf = t.buf[:k]
	if eof {
		t.finish(e)
	}
}

// finish resolves the state at the end of output; every byte has been stepped by then.
func (t *toolStage) finish(e *emitter) {
	switch t.fmt {
	case fmtHermes:
		if t.st == hCall {
			t.call.endOfRegion(e)
		}
	case fmtLlama:
		if t.st == lCall {
			t.call.endOfRegion(e)
		}
	case fmtMistral:
		switch t.st {
		case mArray:
			t.call.endOfRegion(e)
		case mName:
			t.headerToContent(e, t.st)
		}
	case fmtDeepSeek:
		if t.st == dType || t.st == dName || t.st == dFence {
			t.headerToContent(e, t.st)
		}
	case fmtRequired:
		if t.st == rCall {
			t.call.endOfRegion(e)
		}
	case fmtQwenXML:
		t.finishQwenXML(e)
	case fmtGLM:
		t.finishGLM(e)
	case fmtToken:
		t.finishToken(e)
	case fmtMiniMax:
		t.finishMiniMax(e)
	case fmtGranite:
		t.finishGranite(e)
	case fmtPythonic:
		t.finishPythonic(e)
	case fmtStep3:
		t.finishStep3(e)
	case fmtDSML:
		t.finishDSML(e)
	}
}

// callDriver runs a jsonMachine over one JSON tool call (or an array of them) and turns its
// output into tool-call deltas. A call is committed, and its first delta sent, once its name
// is known and its arguments have started; until then its raw text is kept in region, so a
// call that breaks before the commit becomes content exactly as it was written. After the
// commit nothing can be taken back: a syntax error inside the arguments makes the rest of the
// call's text raw arguments, a truncated call keeps the arguments sent so far.
type callDriver struct {
	m           jsonMachine
	idx         int
	committed   bool
	region      []byte
	argsDefault string
}

func (c *callDriver) held() int { return len(c.region) + len(c.m.out) + len(c.m.num) + len(c.m.name) }

func (c *callDriver) begin(marker string) {
	c.m.reset()
	c.committed = false
	c.region = append(c.region[:0], marker...)
}

// feed gives b to the machine and returns how much it consumed and why it stopped. Before the
// commit it goes one byte at a time, so that the commit and the limit fall on the same byte
// however the text was split.
func (c *callDriver) feed(e *emitter, b []byte) (int, jevent) {
	done := 0
	for !c.committed && done < len(b) {
		n, ev := c.m.feed(b[done : done+1])
		c.region = append(c.region, b[done:done+n]...)
		done += n
		c.sync(e)
		if ev != jMore || c.overLimit(c.m.limit) {
			return done, ev
		}
	}
	if done == len(b) {
		return done, jMore
	}
	n, ev := c.m.feed(b[done:])
	c.sync(e)
	return done + n, ev
}

func (c *callDriver) sync(e *emitter) {
	if !c.committed && c.m.nameDone && !c.m.nameBad && c.m.argsSeen {
		c.commit(e)
	}
	if c.committed && len(c.m.out) > 0 {
		e.addArgs(c.idx, c.m.out)
		c.m.out = c.m.out[:0]
	}
}

func (c *callDriver) commit(e *emitter) {
	c.idx = e.startCall(string(c.m.name))
	c.committed = true
	c.region = c.region[:0]
}

// overLimit reports whether an uncommitted call holds more than limit bytes.
func (c *callDriver) overLimit(limit int) bool {
	return !c.committed && (len(c.region) > limit || len(c.m.out) > limit)
}

// endEnvelope is called when an envelope object closed; it reports whether it was a call.
func (c *callDriver) endEnvelope(e *emitter) bool {
	if !c.committed {
		if !c.m.nameDone || c.m.nameBad || (!c.m.argsSeen && c.argsDefault == "") {
			return false
		}
		c.commit(e)
		if !c.m.argsSeen {
			e.addArgs(c.idx, []byte(c.argsDefault))
		}
	}
	c.sync(e)
	return true
}

// nextEnvelope prepares for the next envelope of an array.
func (c *callDriver) nextEnvelope() {
	c.committed = false
	c.region = c.region[:0]
	c.m.resetEnvelope()
}

// fail turns an uncommitted call's text into content.
func (c *callDriver) fail(e *emitter) {
	e.addContent(c.region)
	c.region = c.region[:0]
	c.m.out = c.m.out[:0]
}

// endOfRegion resolves a call whose text ended (end marker or end of output) before its
// JSON did: a committed call keeps what it sent (the machine may still complete a number);
// an uncommitted one becomes content.
func (c *callDriver) endOfRegion(e *emitter) {
	if c.m.end() && !c.committed && c.endEnvelope(e) {
		return
	}
	if c.committed {
		c.sync(e)
		return
	}
	c.fail(e)
}
