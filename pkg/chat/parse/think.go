package parse

import "bytes"

// The <think> reasoning parsers, qwen3 and deepseek_r1 (vllm/reasoning/qwen3_reasoning_parser.py,
// deepseek_r1_reasoning_parser.py, basic_parsers.py). Both templates may open <think> in the
// prompt, so the output starts inside reasoning whether or not it repeats <think>:
//   - text up to the first "</think>" is reasoning, every "<think>" in it is dropped;
//   - "</think>" ends reasoning and everything after it is content (tool parsing applies there);
//   - no "</think>" at all: everything is reasoning, content null (output truncated);
//   - RequestInfo.ReasoningEnded (enable_thinking=false: the prompt ends with
//     "<think>\n\n</think>\n\n"): no reasoning stage at all, everything is content;
//   - qwen3 only: a "<tool_call>" followed (after whitespace) by "<function=" or "<function "
//     ends reasoning implicitly, and the content starts at that "<tool_call>" (Qwen3.5 XML
//     calls opened inside an unclosed think block).

const (
	thinkStart   = "<think>"
	thinkEnd     = "</think>"
	toolCallOpen = "<tool_call>"
)

// maxImplicitSpace bounds the whitespace looked at between "<tool_call>" and "<function".
const maxImplicitSpace = 64

type thinkStage struct {
	qwen bool
	done bool
	buf  []byte
}

func (t *thinkStage) run(s *Stream, text string, eof bool) {
	if t.done {
		if text != "" {
			s.tools.run(&s.out, text, false)
		}
		return
	}
	t.buf = append(t.buf, text...)
	b := t.buf
	start, i := 0, 0
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '<')
		if j < 0 {
			i = len(b)
			break
		}
		i += j
		rest := b[i:]
		if markerAt(rest, thinkEnd) == fullMatch {
			s.out.addReasoning(b[start:i])
			t.done = true
			s.content(b[i+len(thinkEnd):])
			t.buf = t.buf[:0]
			return
		}
		if markerAt(rest, thinkStart) == fullMatch {
			s.out.addReasoning(b[start:i])
			i += len(thinkStart)
			start = i
			continue
		}
		held := markerAt(rest, thinkEnd) == partMatch || markerAt(rest, thinkStart) == partMatch
		if t.qwen {
			switch implicitEnd(rest, eof) {
			case fullMatch:
				s.out.addReasoning(b[start:i])
				t.done = true
				s.content(rest)
				t.buf = t.buf[:0]
				return
			case partMatch:
				held = true
			}
		}
		if held && !eof {
			break
		}
		i++
	}
	s.out.addReasoning(b[start:i])
	n := copy(t.buf, b[i:])
	t.buf = t.buf[:n]
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
