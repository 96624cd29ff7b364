package parse

import (
	"bytes"
	"strings"
)

// gpt-oss Harmony, the openai_gptoss reasoning parser and the openai tool parser
// (vllm/reasoning/gptoss_reasoning_parser.py, vllm/tool_parsers/openai_tool_parser.py,
// vllm/entrypoints/openai/parser/harmony_utils.py parse_chat_output). vLLM parses the token
// ids with openai_harmony; here the same messages are read from text decoded with special
// tokens kept (the Harmony markers are special tokens in the gpt-oss tokenizer). The prompt
// ends with "<|start|>assistant", so the output starts with a header:
//
//	<|channel|>analysis<|message|>THINKING<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
//	<|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
//
// A header runs to "<|message|>"; the message body to "<|end|>", "<|call|>" or "<|return|>"
// (a "<|start|>" or "<|channel|>" also ends it). Messages on channel analysis are reasoning;
// final, and commentary without a recipient (preambles), are content; several messages of one
// kind are joined with "\n" as parse_chat_output does. A recipient "functions.NAME" is a tool
// call (when tools are parsed) whose arguments, for a JSON or absent content type, are
// json.dumps(json.loads(body)) with ensure_ascii=True; other recipients (built-in tools) are
// dropped. Text before any Harmony marker that never reaches "<|message|>" is content.

const (
	hmStart     = "<|start|>"
	hmChannel   = "<|channel|>"
	hmMessage   = "<|message|>"
	hmConstrain = "<|constrain|>"
	hmEnd       = "<|end|>"
	hmCall      = "<|call|>"
	hmReturn    = "<|return|>"
)

var (
	hmHeaderEnd = newMarkerSet(hmMessage)
	hmBodyEnds  = newMarkerSet(hmEnd, hmCall, hmReturn, hmStart, hmChannel)
)

const (
	hsHeader uint8 = iota
	hsBody
)

const (
	kDrop uint8 = iota
	kReasoning
	kContent
	kCall
)

type harmonyStage struct {
	tools  bool
	limit  int
	buf    []byte
	st     uint8
	header []byte
	kind   uint8
	wrote  bool
	count  [4]int
	call   callDriver
	// argument state of the current call message
	argsRaw  bool // content type is not JSON, or the JSON broke: pass the body verbatim
	argsDone bool // the JSON value ended; what follows is raw
}

func newHarmonyStage(p *Parsers, mode toolMode) *harmonyStage {
	h := &harmonyStage{tools: p.tool == ToolOpenAI && mode != toolsOff, limit: p.maxCall}
	h.call.m.ascii = true
	h.call.m.raw = p.rawArgs
	h.call.m.limit = p.maxCall
	return h
}

func (h *harmonyStage) held() int { return len(h.buf) + len(h.header) + h.call.held() }

func (h *harmonyStage) run(e *emitter, text string, eof bool) {
	h.buf = append(h.buf, text...)
	b := h.buf
	for len(b) > 0 {
		st := h.st
		var n int
		if st == hsHeader {
			n = h.stepHeader(e, b, eof)
		} else {
			n = h.stepBody(e, b, eof)
		}
		b = b[n:]
		if n == 0 && st == h.st {
			break // needs more input
		}
	}
	k := copy(h.buf, b)
	h.buf = h.buf[:k]
	if eof {
		if h.st == hsHeader {
			h.flushHeader(e)
		} else if h.kind == kCall {
			h.call.m.end()
			h.call.sync(e)
		}
	}
}

// flushHeader resolves a header that never reached "<|message|>": plain text is content,
// a partial Harmony header is dropped.
func (h *harmonyStage) flushHeader(e *emitter) {
	if bytes.Contains(h.header, []byte("<|")) {
		h.header = h.header[:0]
		return
	}
	h.kind, h.wrote = kContent, false
	h.write(e, kContent, h.header)
	h.header = h.header[:0]
}

func (h *harmonyStage) stepHeader(e *emitter, b []byte, eof bool) int {
	n, m := hmHeaderEnd.next(b, eof)
	switch {
	case m == 0:
		h.open(e)
		return len(hmMessage)
	case n == 0:
		return 0
	case b[0] != '<': // a run of the header; a lone '<' is taken whole
		n = min(n, h.limit+1-len(h.header)) // the header overflows on the same byte however split
	}
	h.header = append(h.header, b[:n]...)
	if len(h.header) > h.limit {
		h.flushHeader(e)
	}
	return n
}

// open starts the body of the message whose header was read.
func (h *harmonyStage) open(e *emitter) {
	channel, recipient, ctype := parseHarmonyHeader(h.header)
	h.header = h.header[:0]
	h.st, h.wrote = hsBody, false
	switch {
	case recipient != "":
		h.kind = kDrop
		if name, ok := strings.CutPrefix(recipient, "functions."); ok && h.tools {
			h.kind = kCall
			h.call.m.reset()
			h.call.idx = e.startCall(name)
			h.call.committed = true
			h.argsRaw = ctype != "" && !strings.Contains(ctype, "json")
			h.argsDone = false
		}
	case channel == "analysis":
		h.kind = kReasoning
	case channel == "final" || channel == "commentary":
		h.kind = kContent
	default:
		h.kind = kDrop
	}
}

func (h *harmonyStage) stepBody(e *emitter, b []byte, eof bool) int {
	n, m := hmBodyEnds.next(b, eof)
	switch {
	case m >= 0:
		if h.kind == kCall {
			h.call.m.end()
			h.call.sync(e)
		}
		h.st = hsHeader
		if m >= 3 { // <|start|> or <|channel|> begins the next header
			return 0
		}
		return len(hmBodyEnds.ms[m])
	case n > 0:
		return h.body(e, b[:n])
	}
	return 0
}

// body routes message text by the message's kind and returns the bytes consumed.
func (h *harmonyStage) body(e *emitter, b []byte) int {
	switch h.kind {
	case kReasoning, kContent:
		h.write(e, h.kind, b)
	case kCall:
		if h.argsRaw || h.argsDone {
			if h.argsDone {
				if n := skipSpace(b); n == len(b) {
					return n
				}
				h.argsDone, h.argsRaw = false, true
			}
			e.addArgs(h.call.idx, b)
			return len(b)
		}
		n, ev := h.call.feed(e, b)
		switch ev {
		case jErr:
			h.argsRaw = true
		case jDone:
			h.argsDone = true
		}
		if n == 0 && ev == jErr {
			return h.body(e, b)
		}
		return n
	}
	return len(b)
}

func (h *harmonyStage) write(e *emitter, kind uint8, b []byte) {
	if len(b) == 0 {
		return
	}
	if !h.wrote || kind != h.kind {
		if h.count[kind] > 0 {
			if kind == kReasoning {
				e.addReasoning([]byte{'\n'})
			} else {
				e.addContent([]byte{'\n'})
			}
		}
		h.count[kind]++
		h.wrote = true
	}
	if kind == kReasoning {
		e.addReasoning(b)
	} else {
		e.addContent(b)
	}
}

// parseHarmonyHeader reads a message header: "<|start|>ROLE to=RECIPIENT<|channel|>CHANNEL
// to=RECIPIENT <|constrain|>TYPE" with every part optional.
func parseHarmonyHeader(h []byte) (channel, recipient, ctype string) {
	s := string(h)
	next := "" // what the next word is: "role", "channel", "ctype"
	for len(s) > 0 {
		switch {
		case strings.HasPrefix(s, hmStart):
			s, next = s[len(hmStart):], "role"
			continue
		case strings.HasPrefix(s, hmChannel):
			s, next = s[len(hmChannel):], "channel"
			continue
		case strings.HasPrefix(s, hmConstrain):
			s, next = s[len(hmConstrain):], "ctype"
			continue
		case s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r':
			s = s[1:]
			continue
		}
		end := strings.IndexAny(s, " \t\r\n<")
		if end == 0 { // a '<' that starts no marker
			end = 1
		}
		if end < 0 {
			end = len(s)
		}
		w := s[:end]
		s = s[end:]
		switch {
		case strings.HasPrefix(w, "to="):
			recipient = w[len("to="):]
		case next == "channel":
			channel = w
		case next == "ctype" || (next == "" && channel != "" && ctype == ""):
			ctype = w
		}
		next = ""
	}
	return channel, recipient, ctype
}
