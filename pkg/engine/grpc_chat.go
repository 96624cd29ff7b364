package engine

import (
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/openai"
)

// chatOutput writes the /v1/chat/completions shapes for a gRPC worker, as vLLM's server does
// (vllm/entrypoints/openai/chat_completion/serving.py): streaming, a first chunk per choice with
// the role and empty content, then one chunk per parsed delta (content, reasoning, tool-call
// fragments), the choice's last chunk with its finish reason, the usage chunk with
// stream_options.include_usage, and [DONE]; not streaming, one chat.completion whose messages
// are the whole texts parsed in one go (parse.Parsers.ParseFinish: the same result the stream's
// deltas add up to).
type chatOutput struct {
	req     *openai.ChatRequest
	out     ChatOutput
	role    string
	streams []*parse.Stream // streaming with parsers: one per choice
	texts   [][]byte        // non-streaming: each choice's text
	engine  []string        // non-streaming: each choice's engine finish reason
}

func newChatOutput(req *openai.ChatRequest, out ChatOutput, choices int) *chatOutput {
	o := &chatOutput{req: req, out: out, role: parse.ResponseRole(req)}
	if req.Stream && out.Parsers != nil {
		o.streams = make([]*parse.Stream, choices)
		for i := range o.streams {
			o.streams[i] = out.Parsers.NewStream(out.Info)
		}
	}
	if !req.Stream {
		o.texts, o.engine = make([][]byte, choices), make([]string, choices)
	}
	return o
}

func (o *chatOutput) begin(b *grpcBody) {
	if !o.req.Stream {
		return
	}
	empty := ""
	for i := range b.choices {
		o.chunk(b, i, openai.ChatDelta{Role: o.role, Content: &empty}, nil)
	}
}

func (o *chatOutput) text(b *grpcBody, ci int, text []byte) {
	if !o.req.Stream {
		o.texts[ci] = append(o.texts[ci], text...)
		return
	}
	if d := o.parse(ci, text, false); d != nil {
		o.chunk(b, ci, *d, nil)
	}
}

func (o *chatOutput) finish(b *grpcBody, ci int, text []byte, engineFinish string) {
	if !o.req.Stream {
		o.texts[ci] = append(o.texts[ci], text...)
		o.engine[ci] = engineFinish
		return
	}
	if d := o.parse(ci, text, false); d != nil {
		o.chunk(b, ci, *d, nil)
	}
	last := o.parse(ci, nil, true)
	if last == nil {
		last = &openai.ChatDelta{}
	}
	reason := engineFinish
	if o.streams != nil {
		reason = o.streams[ci].FinishReason(engineFinish)
	}
	o.chunk(b, ci, *last, &reason)
}

// parse runs text through the choice's parser (end: flush it) and returns the delta to send,
// or nil when there is nothing.
func (o *chatOutput) parse(ci int, text []byte, end bool) *openai.ChatDelta {
	if o.streams == nil {
		if len(text) == 0 {
			return nil
		}
		s := string(text)
		return &openai.ChatDelta{Content: &s}
	}
	var d parse.Delta
	if end {
		d = o.streams[ci].Finish()
	} else {
		d = o.streams[ci].Feed(string(text))
	}
	if d.Empty() {
		return nil
	}
	out := &openai.ChatDelta{}
	if d.Content != "" {
		out.Content = &d.Content
	}
	o.setReasoning(&out.Reasoning, &out.ReasoningContent, d.Reasoning)
	for _, tc := range d.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, openai.ToolCallDelta{Index: tc.Index, ID: tc.ID, Type: tc.Type,
			Function: &openai.FunctionDelta{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return out
}

// setReasoning writes text into the reasoning fields --reasoning-field asks for ("" writes
// nothing).
func (o *chatOutput) setReasoning(reasoning, reasoningContent **string, text string) {
	if text == "" {
		return
	}
	switch o.out.ReasoningField {
	case ReasoningOnly:
		*reasoning = &text
	case ReasoningContentOnly:
		*reasoningContent = &text
	default:
		*reasoning, *reasoningContent = &text, &text
	}
}

func (o *chatOutput) chunk(b *grpcBody, ci int, d openai.ChatDelta, finish *string) {
	b.event(&openai.ChatChunk{ID: b.id, Object: openai.ObjectChatCompletionChunk, Created: b.created, Model: b.req.Model,
		Choices: []openai.ChatChunkChoice{{Index: ci, Delta: d, FinishReason: finish}}})
}

func (o *chatOutput) tail(b *grpcBody, u *openai.Usage) {
	if o.req.Stream {
		if o.req.IncludeUsage {
			b.event(&openai.ChatChunk{ID: b.id, Object: openai.ObjectChatCompletionChunk, Created: b.created, Model: b.req.Model,
				Choices: []openai.ChatChunkChoice{}, Usage: u})
		}
		b.out = openai.AppendDone(b.out)
		return
	}
	c := openai.ChatCompletion{ID: b.id, Object: openai.ObjectChatCompletion, Created: b.created, Model: b.req.Model,
		Choices: make([]openai.ChatChoice, len(b.choices)), Usage: u}
	for i := range c.Choices {
		c.Choices[i] = o.message(i)
	}
	b.out, _ = openai.Marshal(c)
}

// message parses choice i's whole text into its chat.completion choice.
func (o *chatOutput) message(i int) openai.ChatChoice {
	text := string(o.texts[i])
	ch := openai.ChatChoice{Index: i, FinishReason: o.engine[i],
		Message: openai.ChatResponseMessage{Role: o.role, ToolCalls: []openai.ResponseToolCall{}}}
	if o.out.Parsers == nil {
		ch.Message.Content = &text
		return ch
	}
	m, reason := o.out.Parsers.ParseFinish(o.out.Info, text, o.engine[i])
	ch.FinishReason = reason
	ch.Message.Content = m.Content
	if m.Reasoning != nil {
		o.setReasoning(&ch.Message.Reasoning, &ch.Message.ReasoningContent, *m.Reasoning)
	}
	for _, tc := range m.ToolCalls {
		ch.Message.ToolCalls = append(ch.Message.ToolCalls, openai.ResponseToolCall{ID: tc.ID, Type: "function",
			Function: openai.FunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return ch
}

var _ grpcOutput = (*chatOutput)(nil)
