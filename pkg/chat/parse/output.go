package parse

import "github.com/kvgate/kvgate/pkg/openai"

// ReasoningFields says which fields of the API's chat shapes carry parsed reasoning text:
// reasoning (what current vLLM writes), reasoning_content (what SGLang, older vLLM and most
// clients read), or both. With neither set, reasoning is not written.
type ReasoningFields struct {
	Reasoning        bool
	ReasoningContent bool
}

// set writes text into the fields f names ("" writes nothing).
func (f ReasoningFields) set(reasoning, reasoningContent **string, text string) {
	if text == "" {
		return
	}
	if f.Reasoning {
		*reasoning = &text
	}
	if f.ReasoningContent {
		*reasoningContent = &text
	}
}

// Output turns the decoded text of one chat response's choices into the API's shapes, as
// vLLM's server does (vllm/entrypoints/openai/chat_completion/serving.py): streamed text through
// one Stream per choice into chat.completion.chunk deltas, a whole choice text through
// ParseFinish into a chat.completion choice. Without parsers all text is content. The gateway's
// gRPC path and the simulator's HTTP path both write their chat responses with it. An Output
// is not safe for concurrent use; one response uses one.
type Output struct {
	parsers *Parsers
	info    RequestInfo
	fields  ReasoningFields
	streams []*Stream // streaming: one per choice, made on first use
}

// NewOutput returns the output of one response whose request info is info, parsed by p (nil:
// all text is content), with reasoning written into fields.
func NewOutput(p *Parsers, info RequestInfo, fields ReasoningFields) *Output {
	return &Output{parsers: p, info: info, fields: fields}
}

// Delta feeds text, decoded since the last call, of choice i to its Stream, or with end (and
// text nil) flushes what the stream held back, and returns the delta to send, or nil when there
// is nothing to send.
func (o *Output) Delta(i int, text []byte, end bool) *openai.ChatDelta {
	if o.parsers == nil {
		if len(text) == 0 {
			return nil
		}
		s := string(text)
		return &openai.ChatDelta{Content: &s}
	}
	for len(o.streams) <= i {
		o.streams = append(o.streams, o.parsers.NewStream(o.info))
	}
	var d Delta
	if end {
		d = o.streams[i].Finish()
	} else {
		d = o.streams[i].Feed(string(text))
	}
	if d.Empty() {
		return nil
	}
	out := &openai.ChatDelta{}
	if d.Content != "" {
		out.Content = &d.Content
	}
	o.fields.set(&out.Reasoning, &out.ReasoningContent, d.Reasoning)
	for _, tc := range d.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, openai.ToolCallDelta{Index: tc.Index, ID: tc.ID, Type: tc.Type,
			Function: &openai.FunctionDelta{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return out
}

// FinishReason maps the engine's finish reason of streamed choice i, after its last Delta, as
// its Stream does ("tool_calls" after a parsed call); without parsers, or for a choice that was
// never fed, it is the engine's.
func (o *Output) FinishReason(i int, engine string) string {
	if i >= len(o.streams) {
		return engine
	}
	return o.streams[i].FinishReason(engine)
}

// Choice parses the whole text of choice i into its chat.completion choice: the message of
// role (ResponseRole) with its content, reasoning and tool calls, and the finish reason mapped
// from the engine's.
func (o *Output) Choice(i int, role, text, engine string) openai.ChatChoice {
	ch := openai.ChatChoice{Index: i, FinishReason: engine,
		Message: openai.ChatResponseMessage{Role: role, ToolCalls: []openai.ResponseToolCall{}}}
	if o.parsers == nil {
		ch.Message.Content = &text
		return ch
	}
	m, reason := o.parsers.ParseFinish(o.info, text, engine)
	ch.FinishReason, ch.Message.Content = reason, m.Content
	if m.Reasoning != nil {
		o.fields.set(&ch.Message.Reasoning, &ch.Message.ReasoningContent, *m.Reasoning)
	}
	for _, tc := range m.ToolCalls {
		ch.Message.ToolCalls = append(ch.Message.ToolCalls, openai.ResponseToolCall{ID: tc.ID, Type: "function",
			Function: openai.FunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return ch
}
