package anthropic

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Stream turns an engine's chat.completion.chunk stream into the Messages API's events, in
// the order Anthropic sends them: message_start and a ping first; then, as deltas arrive, each
// content block (thinking, text, tool_use) as content_block_start, its deltas
// (thinking_delta, text_delta, input_json_delta) and, when the next block starts or the stream
// ends, content_block_stop (a thinking block's signature_delta just before it); then
// message_delta with the stop_reason and the usage, and message_stop (End). Each event is
// "event: TYPE\ndata: JSON\n\n". A Stream is used by one goroutine.
type Stream struct {
	o       *Output
	started bool
	rest    []byte // a line cut by the end of a piece
	done    bool   // [DONE] seen
	// index is the open block's index (-1: none yet); open its type ("": none open).
	index int
	open  string
	// call is the chat tool-call index of the open tool_use block.
	call       int
	finish     string
	stopReason json.RawMessage
	usage      *chatUsage
	chunk      streamChunk
}

// streamChunk is what the conversion reads of a chat.completion.chunk.
type streamChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Delta struct {
			Content          *string        `json:"content"`
			Reasoning        *string        `json:"reasoning"`
			ReasoningContent *string        `json:"reasoning_content"`
			ToolCalls        []chatToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// NewStream returns the event writer of one streamed answer.
func (o *Output) NewStream() *Stream { return &Stream{o: o, index: -1, call: -1} }

// Feed appends the events of a piece of the engine's chat stream. A worker's error event
// ends the stream with that error (the caller sends AppendErrorEvent).
func (s *Stream) Feed(dst, piece []byte) ([]byte, *openai.Error) {
	for len(piece) > 0 {
		i := bytes.IndexByte(piece, '\n')
		if i < 0 {
			s.rest = append(s.rest, piece...)
			return dst, nil
		}
		line := piece[:i]
		if len(s.rest) > 0 {
			s.rest = append(s.rest, line...)
			line = s.rest
		}
		piece = piece[i+1:]
		var err *openai.Error
		dst, err = s.line(dst, bytes.TrimRight(line, "\r"))
		s.rest = s.rest[:0]
		if err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// line handles one line of the chat stream.
func (s *Stream) line(dst, line []byte) ([]byte, *openai.Error) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || s.done {
		return dst, nil
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		s.done = true
		return dst, nil
	}
	s.chunk = streamChunk{}
	if err := json.Unmarshal(data, &s.chunk); err != nil {
		return dst, errMalformed("a chunk is not JSON")
	}
	if s.chunk.Error != nil {
		return dst, upstreamError(s.chunk.Error)
	}
	dst = s.begin(dst, s.chunk.ID)
	if s.chunk.Usage != nil {
		s.usage = s.chunk.Usage
	}
	for i := range s.chunk.Choices {
		ch := &s.chunk.Choices[i]
		d := &ch.Delta
		if r := reasoningOf(d.Reasoning, d.ReasoningContent); r != "" {
			dst = s.delta(s.ensure(dst, "thinking"), `{"type":"thinking_delta","thinking":`, r)
		}
		if d.Content != nil && *d.Content != "" {
			dst = s.delta(s.ensure(dst, "text"), `{"type":"text_delta","text":`, *d.Content)
		}
		for j := range d.ToolCalls {
			dst = s.callDelta(dst, &d.ToolCalls[j])
		}
		if ch.FinishReason != nil {
			s.finish = *ch.FinishReason
			s.stopReason = append(s.stopReason[:0], ch.StopReason...)
		}
	}
	return dst, nil
}

// upstreamError is the error a worker's stream carried ({"error":{"message",...}}).
func upstreamError(raw json.RawMessage) *openai.Error {
	var e struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	}
	_ = json.Unmarshal(raw, &e)
	if e.Message == "" {
		e.Message = "the worker's stream failed"
	}
	return &openai.Error{Status: 502, Type: openai.TypeUpstream, Message: e.Message}
}

// begin appends message_start and a ping before the first event.
func (s *Stream) begin(dst []byte, id string) []byte {
	if s.started {
		return dst
	}
	s.started = true
	dst = append(dst, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
	dst = openai.AppendString(dst, MessageID(id))
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = openai.AppendString(dst, s.o.Model)
	dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	dst = s.o.appendUsage(dst, nil)
	dst = append(dst, "}}\n\n"...)
	return append(dst, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
}

// ensure opens a block of typ (thinking or text) unless one is open.
func (s *Stream) ensure(dst []byte, typ string) []byte {
	if s.open == typ {
		return dst
	}
	dst = s.stop(dst)
	block := `{"type":"text","text":""}`
	if typ == "thinking" {
		block = `{"type":"thinking","thinking":"","signature":""}`
	}
	return s.start(dst, typ, []byte(block))
}

// start opens the next block.
func (s *Stream) start(dst []byte, typ string, block []byte) []byte {
	s.index++
	s.open = typ
	dst = append(dst, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	dst = append(dst, `,"content_block":`...)
	dst = append(dst, block...)
	return append(dst, "}\n\n"...)
}

// delta appends a content_block_delta of the open block: head is the delta object up to its
// string member's value.
func (s *Stream) delta(dst []byte, head, v string) []byte {
	dst = append(dst, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	dst = append(dst, `,"delta":`...)
	dst = append(dst, head...)
	dst = openai.AppendString(dst, v)
	return append(dst, "}}\n\n"...)
}

// stop closes the open block, if any (a thinking block gets its signature first).
func (s *Stream) stop(dst []byte) []byte {
	if s.open == "" {
		return dst
	}
	if s.open == "thinking" {
		dst = s.delta(dst, `{"type":"signature_delta","signature":`, newSignature())
	}
	s.open, s.call = "", -1
	dst = append(dst, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	return append(dst, "}\n\n"...)
}

// callDelta appends the events of a tool-call delta: a call with a new index and its name
// opens a tool_use block; argument pieces of the open call are input_json_delta events.
func (s *Stream) callDelta(dst []byte, tc *chatToolCall) []byte {
	if s.open != "tool_use" || s.call != tc.Index {
		if tc.Function.Name == nil {
			return dst // arguments of a call that never opened: nothing to attach them to
		}
		dst = s.stop(dst)
		block := append([]byte(`{"type":"tool_use","id":`), openai.AppendString(nil, ToolUseID(deref(tc.ID)))...)
		block = append(block, `,"name":`...)
		block = openai.AppendString(block, *tc.Function.Name)
		block = append(block, `,"input":{}}`...)
		dst = s.start(dst, "tool_use", block)
		s.call = tc.Index
	}
	if tc.Function.Arguments != "" {
		dst = s.delta(dst, `{"type":"input_json_delta","partial_json":`, tc.Function.Arguments)
	}
	return dst
}

// End appends the events that end the stream: the open block's stop, message_delta with the
// stop_reason, stop_sequence and usage, and message_stop.
func (s *Stream) End(dst []byte) []byte {
	dst = s.begin(dst, "")
	dst = s.stop(dst)
	dst = append(dst, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{"...)
	dst = s.o.appendStopMembers(dst, s.finish, s.stopReason)
	dst = append(dst, `},"usage":`...)
	dst = s.o.appendUsage(dst, s.usage)
	dst = append(dst, "}\n\n"...)
	return append(dst, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}
