package conversation

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/openai"
)

// Stream turns a turn's chat.completion.chunk stream into the Responses API's events, with
// increasing sequence numbers: response.created and response.in_progress first (Begin); then,
// as deltas arrive, for each output item in order its output_item.added, for a message or a
// reasoning item its content_part.added, its deltas (output_text.delta, reasoning_text.delta,
// function_call_arguments.delta), and when the next item starts or the stream ends its .done
// events, content_part.done and output_item.done (Feed, End); then the terminal event
// (response.completed, .incomplete or .failed) with the stored response (Terminal). A Stream is
// used by one goroutine.
type Stream struct {
	t    *Turn
	seq  int
	rest []byte // a line cut by the end of a piece
	done bool   // [DONE] seen
	// items are the output items so far; open is the index of the one still receiving deltas
	// (-1: none), with its text (or arguments) in text.
	items    []openai.Item
	open     int
	text     strings.Builder
	logprobs []byte // the open message's logprob entries, a JSON array without brackets
	// calls maps a chat tool-call index to its item.
	calls     map[int]int
	finish    string
	usage     *chatUsage
	reasoning strings.Builder
	chunk     chatChunk
	// closeStatus is the status the next closed item gets ("": completed).
	closeStatus string
}

// chatChunk is what the conversion reads of a chat.completion.chunk.
type chatChunk struct {
	Choices []struct {
		Delta struct {
			Content          *string        `json:"content"`
			Reasoning        *string        `json:"reasoning"`
			ReasoningContent *string        `json:"reasoning_content"`
			ToolCalls        []chatToolCall `json:"tool_calls"`
		} `json:"delta"`
		Logprobs *struct {
			Content json.RawMessage `json:"content"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// NewStream returns the event writer of t.
func (t *Turn) NewStream() *Stream { return &Stream{t: t, open: -1, calls: map[int]int{}} }

func (s *Stream) start(dst []byte, typ string) []byte {
	dst = openai.AppendEventStart(dst, typ, s.seq)
	s.seq++
	return dst
}

// Begin appends response.created and response.in_progress.
func (s *Stream) Begin(dst []byte) []byte {
	resp := s.t.AppendResponse(nil, nil)
	for _, typ := range []string{"response.created", "response.in_progress"} {
		dst = s.start(dst, typ)
		dst = append(dst, `,"response":`...)
		dst = append(dst, resp...)
		dst = openai.AppendEventEnd(dst)
	}
	return dst
}

// Feed appends the events of a piece of the worker's chat stream. A worker's error event
// ends the stream with that error.
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
	s.chunk = chatChunk{}
	if err := json.Unmarshal(data, &s.chunk); err != nil {
		return dst, errMalformed("a chunk is not JSON")
	}
	if s.chunk.Error != nil {
		if e := upstreamError(data); e != nil {
			return dst, e
		}
	}
	if s.chunk.Usage != nil {
		s.usage = s.chunk.Usage
	}
	for i := range s.chunk.Choices {
		ch := &s.chunk.Choices[i]
		d := &ch.Delta
		r := d.Reasoning
		if r == nil {
			r = d.ReasoningContent
		}
		if r != nil && *r != "" {
			dst = s.reasoningDelta(dst, *r)
		}
		if d.Content != nil && *d.Content != "" {
			var lp json.RawMessage
			if ch.Logprobs != nil && string(ch.Logprobs.Content) != "null" {
				lp = ch.Logprobs.Content
			}
			dst = s.textDelta(dst, *d.Content, lp)
		}
		for j := range d.ToolCalls {
			dst = s.callDelta(dst, &d.ToolCalls[j])
		}
		if ch.FinishReason != nil {
			s.finish = *ch.FinishReason
		}
	}
	return dst, nil
}

// openItem closes the open item and opens it: output_item.added and, for a message or
// reasoning, content_part.added.
func (s *Stream) openItem(dst []byte, it openai.Item) []byte {
	dst = s.closeOpen(dst)
	s.items = append(s.items, it)
	s.open = len(s.items) - 1
	s.text.Reset()
	s.logprobs = s.logprobs[:0]
	dst = s.start(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(s.open), 10)
	dst = append(dst, `,"item":`...)
	dst = openai.AppendItem(dst, &it)
	dst = openai.AppendEventEnd(dst)
	switch it.Type {
	case openai.ItemMessage:
		dst = s.partEvent(dst, "response.content_part.added", `{"type":"output_text","text":"","annotations":[],"logprobs":[]}`)
	case openai.ItemReasoning:
		dst = s.partEvent(dst, "response.content_part.added", `{"type":"reasoning_text","text":""}`)
	}
	return dst
}

// itemHead appends the members every event of the open item carries.
func (s *Stream) itemHead(dst []byte, typ string, withContent bool) []byte {
	dst = s.start(dst, typ)
	dst = append(dst, `,"item_id":`...)
	dst = openai.AppendString(dst, s.items[s.open].ID)
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(s.open), 10)
	if withContent {
		dst = append(dst, `,"content_index":0`...)
	}
	return dst
}

func (s *Stream) partEvent(dst []byte, typ, part string) []byte {
	dst = s.itemHead(dst, typ, true)
	dst = append(dst, `,"part":`...)
	dst = append(dst, part...)
	return openai.AppendEventEnd(dst)
}

func (s *Stream) openType() string {
	if s.open < 0 {
		return ""
	}
	return s.items[s.open].Type
}

func (s *Stream) reasoningDelta(dst []byte, text string) []byte {
	if s.openType() != openai.ItemReasoning {
		dst = s.openItem(dst, s.t.reasoningItem("", openai.StatusInProgress))
		s.items[s.open].Content = []string{}
	}
	s.text.WriteString(text)
	s.reasoning.WriteString(text)
	dst = s.itemHead(dst, "response.reasoning_text.delta", true)
	dst = append(dst, `,"delta":`...)
	dst = openai.AppendString(dst, text)
	return openai.AppendEventEnd(dst)
}

func (s *Stream) textDelta(dst []byte, text string, logprobs json.RawMessage) []byte {
	if s.openType() != openai.ItemMessage {
		it := s.t.messageItem(openai.StatusInProgress)
		it.Parts = nil
		dst = s.openItem(dst, it)
	}
	s.text.WriteString(text)
	dst = s.itemHead(dst, "response.output_text.delta", true)
	dst = append(dst, `,"delta":`...)
	dst = openai.AppendString(dst, text)
	dst = append(dst, `,"logprobs":`...)
	if lp := bytes.TrimSpace(logprobs); len(lp) > 2 && lp[0] == '[' {
		dst = append(dst, lp...)
		if len(s.logprobs) > 0 {
			s.logprobs = append(s.logprobs, ',')
		}
		s.logprobs = append(s.logprobs, lp[1:len(lp)-1]...)
	} else {
		dst = append(dst, "[]"...)
	}
	return openai.AppendEventEnd(dst)
}

func (s *Stream) callDelta(dst []byte, tc *chatToolCall) []byte {
	i, known := s.calls[tc.Index]
	if !known {
		dst = s.openItem(dst, s.t.callItem(tc.ID, tc.Function.Name, "", openai.StatusInProgress))
		s.calls[tc.Index] = s.open
		i = s.open
	}
	if i != s.open || tc.Function.Arguments == "" {
		return dst // arguments of a call already closed are not expected from chat streams
	}
	s.text.WriteString(tc.Function.Arguments)
	dst = s.itemHead(dst, "response.function_call_arguments.delta", false)
	dst = append(dst, `,"delta":`...)
	dst = openai.AppendString(dst, tc.Function.Arguments)
	return openai.AppendEventEnd(dst)
}

// closeOpen appends the .done events of the open item and completes it.
func (s *Stream) closeOpen(dst []byte) []byte {
	if s.open < 0 {
		return dst
	}
	it := &s.items[s.open]
	text := s.text.String()
	it.Status = openai.StatusCompleted
	if s.closeStatus != "" {
		it.Status = s.closeStatus
	}
	switch it.Type {
	case openai.ItemReasoning:
		it.Content = []string{text}
		dst = s.itemHead(dst, "response.reasoning_text.done", true)
		dst = append(dst, `,"text":`...)
		dst = openai.AppendString(dst, text)
		dst = openai.AppendEventEnd(dst)
		dst = s.partEvent(dst, "response.content_part.done", string(openai.AppendItemPart(nil, &openai.ItemPart{Type: "reasoning_text", Text: text})))
	case openai.ItemMessage:
		part := openai.ItemPart{Type: openai.PartOutputText, Text: text}
		if len(s.logprobs) > 0 {
			part.Logprobs = append(append([]byte{'['}, s.logprobs...), ']')
		}
		it.Parts = []openai.ItemPart{part}
		dst = s.itemHead(dst, "response.output_text.done", true)
		dst = append(dst, `,"text":`...)
		dst = openai.AppendString(dst, text)
		dst = append(dst, `,"logprobs":`...)
		if part.Logprobs != nil {
			dst = append(dst, part.Logprobs...)
		} else {
			dst = append(dst, "[]"...)
		}
		dst = openai.AppendEventEnd(dst)
		dst = s.partEvent(dst, "response.content_part.done", string(openai.AppendItemPart(nil, &part)))
	case openai.ItemFunctionCall:
		it.Arguments = text
		dst = s.itemHead(dst, "response.function_call_arguments.done", false)
		dst = append(dst, `,"name":`...)
		dst = openai.AppendString(dst, it.Name)
		dst = append(dst, `,"arguments":`...)
		dst = openai.AppendString(dst, text)
		dst = openai.AppendEventEnd(dst)
	}
	return s.itemDone(dst, s.open)
}

func (s *Stream) itemDone(dst []byte, i int) []byte {
	s.open = -1
	dst = s.start(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = openai.AppendItem(dst, &s.items[i])
	return openai.AppendEventEnd(dst)
}

// End closes the open item and returns the turn's result (an item cut by the finish reason
// is done as incomplete).
func (s *Stream) End(dst []byte, countTokens func(string) int) ([]byte, *Result) {
	if s.finish == "length" || s.finish == "content_filter" {
		s.closeStatus = openai.StatusIncomplete
	}
	dst = s.closeOpen(dst)
	res := &Result{Items: s.items}
	var r *string
	if s.reasoning.Len() > 0 {
		rs := s.reasoning.String()
		r = &rs
	}
	s.t.finishResult(res, s.finish, s.usage, r, countTokens)
	return dst, res
}

// Terminal appends the event that ends the stream: response.completed, .incomplete or .failed
// with the response object resp.
func (s *Stream) Terminal(dst []byte, status string, resp []byte) []byte {
	typ := "response.completed"
	switch status {
	case openai.ResponseIncomplete:
		typ = "response.incomplete"
	case openai.ResponseFailed:
		typ = "response.failed"
	}
	dst = s.start(dst, typ)
	dst = append(dst, `,"response":`...)
	dst = append(dst, resp...)
	return openai.AppendEventEnd(dst)
}

// Error appends the stream's error event for e (after which the stream ends).
func (s *Stream) Error(dst []byte, e *openai.Error) []byte {
	dst = openai.AppendResponsesError(dst, e, s.seq)
	s.seq++
	return dst
}
