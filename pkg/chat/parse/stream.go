package parse

import "strings"

// Stream is the parsing state of one response choice. Feed and Finish return increments;
// FinishReason answers after Finish. The zero value is not usable: use Parsers.NewStream.
type Stream struct {
	p        *Parsers
	mode     toolMode
	strip    *stripStage
	think    *thinkStage
	tools    *toolStage
	harmony  *harmonyStage
	out      emitter
	finished bool
	// appendThink: "<think>" is still to be sent as the content's first bytes
	// (minimax_m2_append_think, whose reasoning stays in the content).
	appendThink bool
}

// Feed consumes text decoded since the last call and returns what can be sent now.
func (s *Stream) Feed(text string) Delta {
	if s.finished || text == "" {
		return Delta{}
	}
	s.push(text, false)
	return s.out.take()
}

// Finish ends the stream: text held back (marker prefixes, an unterminated call) is resolved
// as end of output. Later Feed calls are ignored.
func (s *Stream) Finish() Delta {
	if s.finished {
		return Delta{}
	}
	s.push("", true)
	s.finished = true
	return s.out.take()
}

func (s *Stream) push(text string, eof bool) {
	if s.strip != nil {
		text = s.strip.run(text, eof)
		if text == "" && !eof {
			return
		}
	}
	if s.harmony != nil {
		s.harmony.run(&s.out, text, eof)
		return
	}
	if s.appendThink {
		s.appendThink = false
		s.tools.run(&s.out, thinkStart, false)
	}
	if s.think != nil {
		s.think.run(s, text, eof)
		if eof {
			s.tools.run(&s.out, "", true)
		}
		return
	}
	s.tools.run(&s.out, text, eof)
}

// content is where the reasoning stage sends the text after reasoning.
func (s *Stream) content(b []byte) {
	if len(b) > 0 {
		s.tools.runBytes(&s.out, b)
	}
}

// FinishReason maps the engine's finish reason ("stop", "length", ...; "" counts as "stop") to
// the one to send: "tool_calls" when at least one call was made for tool_choice auto or
// required and the engine stopped normally, as vLLM's streaming path does (a named tool choice
// keeps "stop").
func (s *Stream) FinishReason(engine string) string {
	if engine == "" {
		engine = "stop"
	}
	if engine == "stop" && s.out.ncalls > 0 && (s.mode == toolsAuto || s.mode == toolsRequired) {
		return "tool_calls"
	}
	return engine
}

// held returns how many bytes of input the stream holds undecided (for the bounded-buffer
// property).
func (s *Stream) held() int {
	n := 0
	if s.strip != nil {
		n += len(s.strip.buf)
	}
	if s.think != nil {
		n += len(s.think.buf)
	}
	if s.tools != nil {
		n += s.tools.held()
	}
	if s.harmony != nil {
		n += s.harmony.held()
	}
	return n
}

// accumulator builds a Message from the deltas of one Stream, as a client concatenates them
// (ParseFinish is built on it, and the tests compare streams with it). The zero value is ready.
type accumulator struct {
	reasoning, content strings.Builder
	hasR, hasC         bool
	calls              []ToolCall
	args               []strings.Builder
}

// Add appends one delta.
func (a *accumulator) Add(d Delta) {
	if d.Reasoning != "" {
		a.reasoning.WriteString(d.Reasoning)
		a.hasR = true
	}
	if d.Content != "" {
		a.content.WriteString(d.Content)
		a.hasC = true
	}
	for _, tc := range d.ToolCalls {
		for tc.Index >= len(a.calls) {
			a.calls = append(a.calls, ToolCall{})
			a.args = append(a.args, strings.Builder{})
		}
		c := &a.calls[tc.Index]
		if tc.ID != "" {
			c.ID = tc.ID
		}
		if tc.Name != "" {
			c.Name = tc.Name
		}
		a.args[tc.Index].WriteString(tc.Arguments)
	}
}

// Message returns the accumulated message. s (may be nil) supplies the request-level rule that
// a named or required tool_choice answers content "" rather than null, as vLLM does.
func (a *accumulator) Message(s *Stream) Message {
	var m Message
	if a.hasR {
		r := a.reasoning.String()
		m.Reasoning = &r
	}
	if a.hasC {
		c := a.content.String()
		m.Content = &c
	} else if s != nil && (s.mode == toolsNamed || s.mode == toolsRequired) {
		c := ""
		m.Content = &c
	}
	for i := range a.calls {
		c := a.calls[i]
		c.Arguments = a.args[i].String()
		m.ToolCalls = append(m.ToolCalls, c)
	}
	return m
}
