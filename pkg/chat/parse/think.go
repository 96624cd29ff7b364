package parse

// The marker-delimited reasoning parsers (vllm/reasoning/: basic_parsers.py and the parsers
// built on it, qwen3, deepseek_r1, deepseek_v3, glm4_moe/glm47_moe, kimi_k2, minimax_m2,
// step3, seedoss, mistral). They differ only in their markers and in four rules, so one
// machine runs them all from a thinkSpec:
//   - inside: the output starts inside reasoning whether or not it repeats the start marker
//     (the template opened it in the prompt). Text up to the first end marker is reasoning;
//     the end marker ends it and everything after it is content (tool parsing applies there);
//     no end marker at all: everything is reasoning, content null (output truncated).
//     Without inside (mistral), text before the first start marker is content, an end marker
//     there is dropped (vLLM's extract_reasoning drops a [/THINK] without [THINK]), and the
//     start marker opens reasoning.
//   - dropStart: every start marker inside reasoning is dropped (qwen3, deepseek_r1 and most);
//     step3 keeps it as reasoning text (its parser looks only for </think>).
//   - implicit: a marker that ends reasoning and starts the content itself (qwen3: a
//     "<tool_call>" followed by "<function"; kimi_k2: "<|tool_calls_section_begin|>").
//   - leading (granite): the start marker counts only as the very first bytes of the output;
//     output that does not begin with it is all content. Granite's markers are plain text
//     ("Here is my thought process:" ... "Here is my response:"), each with a second spelling
//     ("Here's ..."), start2/end2.
//   - RequestInfo.ReasoningEnded (the prompt already closed reasoning, e.g. enable_thinking=
//     false) or a thinking switch that is off: no reasoning stage at all, everything is content.

const (
	thinkStart   = "<think>"
	thinkEnd     = "</think>"
	toolCallOpen = "<tool_call>"
)

// maxImplicitSpace bounds the whitespace looked at between "<tool_call>" and "<function".
const maxImplicitSpace = 64

// thinkSpec is one reasoning parser's markers and rules (see above).
type thinkSpec struct {
	start, end string
	// start2, end2 are second spellings of the markers ("" for none); each starts with the
	// same byte as its first spelling.
	start2, end2 string
	inside       bool
	dropStart    bool
	leading      bool
	// implicit reports whether b starts with a marker that ends reasoning implicitly
	// (fullMatch), could still become one (partMatch), or not; nil for none.
	implicit func(b []byte, eof bool) int
}

var (
	specThink    = thinkSpec{start: thinkStart, end: thinkEnd, inside: true, dropStart: true}
	specQwen3    = thinkSpec{start: thinkStart, end: thinkEnd, inside: true, dropStart: true, implicit: implicitEnd}
	specKimi     = thinkSpec{start: thinkStart, end: thinkEnd, inside: true, dropStart: true, implicit: kimiImplicitEnd}
	specStep3    = thinkSpec{start: thinkStart, end: thinkEnd, inside: true}
	specSeedOSS  = thinkSpec{start: "<seed:think>", end: "</seed:think>", inside: true, dropStart: true}
	specMistralR = thinkSpec{start: "[THINK]", end: "[/THINK]"}
	// specGranite: vllm/reasoning/granite_reasoning_parser.py.
	specGranite = thinkSpec{start: "Here is my thought process:", start2: "Here's my thought process:",
		end: "Here is my response:", end2: "Here's my response:", leading: true}
)

type thinkStage struct {
	spec    *thinkSpec
	started bool // inside reasoning (always with spec.inside)
	done    bool
	buf     []byte
}

func newThinkStage(spec *thinkSpec) *thinkStage {
	return &thinkStage{spec: spec, started: spec.inside}
}

func (t *thinkStage) run(s *Stream, text string, eof bool) {
	if t.done {
		if text != "" {
			s.tools.run(&s.out, text, false)
		}
		return
	}
	t.buf = append(t.buf, text...)
	if t.spec.leading && !t.started && !t.leadingStart(s, eof) {
		return
	}
	b := t.buf
	start, i := 0, 0
	c1, c2 := t.spec.start[0], t.spec.end[0]
	for i < len(b) {
		j := indexAny2(b[i:], c1, c2) // implicit markers start with '<', as their start markers do
		if j < 0 {
			i = len(b)
			break
		}
		i += j
		n, held := t.marker(s, b, start, i, eof)
		if t.done {
			t.buf = t.buf[:0]
			return
		}
		if n > 0 {
			i += n
			start = i
			continue
		}
		if held && !eof {
			break
		}
		i++
	}
	t.emit(s, b[start:i])
	n := copy(t.buf, b[i:])
	t.buf = t.buf[:n]
}

// leadingStart decides a leading start marker (granite) at the head of the buffer: it reports
// whether reasoning started and the buffer is to be scanned. Otherwise the head is still a
// prefix of the marker (held), or the output did not begin with it and all of it is content.
func (t *thinkStage) leadingStart(s *Stream, eof bool) bool {
	m, n := markerAlt(t.buf, t.spec.start, t.spec.start2)
	switch {
	case m == fullMatch:
		t.started = true
		k := copy(t.buf, t.buf[n:])
		t.buf = t.buf[:k]
		return true
	case m == partMatch && !eof:
		return false
	}
	t.done = true
	s.content(t.buf)
	t.buf = t.buf[:0]
	return false
}

// markerAlt is markerAt for a marker with an optional second spelling alt: the match and, for
// a full one, the length of the spelling matched.
func markerAlt(b []byte, m, alt string) (int, int) {
	r := markerAt(b, m)
	if r == fullMatch {
		return fullMatch, len(m)
	}
	if alt != "" {
		switch markerAt(b, alt) {
		case fullMatch:
			return fullMatch, len(alt)
		case partMatch:
			r = partMatch
		}
	}
	return r, 0
}

// marker looks at b[i:], a possible marker, with b[start:i] the undecided text before it. It
// returns the marker's length when one was consumed (the text before it emitted), and whether
// b[i:] is a prefix of a marker that more input decides. When reasoning ended, t.done is set
// and the rest of b went on as content.
func (t *thinkStage) marker(s *Stream, b []byte, start, i int, eof bool) (int, bool) {
	rest, sp := b[i:], t.spec
	endM, endN := markerAlt(rest, sp.end, sp.end2)
	startM, startN := markerAlt(rest, sp.start, sp.start2)
	switch {
	case endM == fullMatch && t.started:
		s.out.addReasoning(b[start:i])
		t.done = true
		s.content(b[i+endN:])
		return endN, false
	case endM == fullMatch: // an end marker before any start marker is dropped
		t.emit(s, b[start:i])
		return endN, false
	case startM == fullMatch && !t.started:
		t.emit(s, b[start:i])
		t.started = true
		return startN, false
	case startM == fullMatch && sp.dropStart:
		s.out.addReasoning(b[start:i])
		return startN, false
	}
	held := endM == partMatch || startM == partMatch
	if sp.implicit != nil && t.started {
		switch sp.implicit(rest, eof) {
		case fullMatch:
			s.out.addReasoning(b[start:i])
			t.done = true
			s.content(rest)
			return len(rest), false
		case partMatch:
			held = true
		}
	}
	return 0, held
}

// emit sends text of the current side: reasoning once started, content before (mistral).
func (t *thinkStage) emit(s *Stream, b []byte) {
	if t.started {
		s.out.addReasoning(b)
	} else {
		s.content(b)
	}
}

// implicitEnd reports whether b starts with "<tool_call>", optional whitespace, then
// "<function" and a space or "=" (fullMatch), could still become that (partMatch), or not.
func implicitEnd(b []byte, eof bool) int {
	switch markerAt(b, toolCallOpen) {
	case noMatch:
		return noMatch
	case partMatch:
		if eof {
			return noMatch
		}
		return partMatch
	}
	rest := b[len(toolCallOpen):]
	ws := skipSpace(rest)
	if ws > maxImplicitSpace {
		return noMatch
	}
	rest = rest[ws:]
	const fn = "<function"
	switch markerAt(rest, fn) {
	case noMatch:
		return noMatch
	case partMatch:
		if eof {
			return noMatch
		}
		return partMatch
	}
	if len(rest) == len(fn) {
		if eof {
			return noMatch
		}
		return partMatch
	}
	if c := rest[len(fn)]; c == '=' || isJSONSpace(c) {
		return fullMatch
	}
	return noMatch
}

// kimiSectionBegin opens Kimi K2's tool-call section; it ends reasoning implicitly
// (vllm/reasoning/kimi_k2_reasoning_parser.py) and is where the content starts.
const kimiSectionBegin = "<|tool_calls_section_begin|>"

func kimiImplicitEnd(b []byte, eof bool) int {
	m := markerAt(b, kimiSectionBegin)
	if m == partMatch && eof {
		return noMatch
	}
	return m
}
