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
// are the whole texts parsed in one go (parse.Output.Choice: the same result the stream's
// deltas add up to).
type chatOutput struct {
	req    *openai.ChatRequest
	role   string
	out    *parse.Output
	texts  [][]byte // non-streaming: each choice's text
	engine []string // non-streaming: each choice's engine finish reason
}

func newChatOutput(req *openai.ChatRequest, out ChatOutput, choices int) *chatOutput {
	o := &chatOutput{req: req, role: parse.ResponseRole(req), out: parse.NewOutput(out.Parsers, out.Info, reasoningFields(out.ReasoningField))}
	if !req.Stream {
		o.texts, o.engine = make([][]byte, choices), make([]string, choices)
	}
	return o
}

// reasoningFields are the fields the --reasoning-field value f names ("" is ReasoningBoth).
func reasoningFields(f string) parse.ReasoningFields {
	switch f {
	case ReasoningOnly:
		return parse.ReasoningFields{Reasoning: true}
	case ReasoningContentOnly:
		return parse.ReasoningFields{ReasoningContent: true}
	}
	return parse.ReasoningFields{Reasoning: true, ReasoningContent: true}
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
	if d := o.out.Delta(ci, text, false); d != nil {
		o.chunk(b, ci, *d, nil)
	}
}

func (o *chatOutput) finish(b *grpcBody, ci int, text []byte, engineFinish string) {
	if !o.req.Stream {
		o.texts[ci] = append(o.texts[ci], text...)
		o.engine[ci] = engineFinish
		return
	}
	if d := o.out.Delta(ci, text, false); d != nil {
		o.chunk(b, ci, *d, nil)
	}
	last := o.out.Delta(ci, nil, true)
	if last == nil {
		last = &openai.ChatDelta{}
	}
	reason := o.out.FinishReason(ci, engineFinish)
	o.chunk(b, ci, *last, &reason)
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
		c.Choices[i] = o.out.Choice(i, o.role, string(o.texts[i]), o.engine[i])
	}
	b.out, _ = openai.Marshal(c)
}

var _ grpcOutput = (*chatOutput)(nil)
