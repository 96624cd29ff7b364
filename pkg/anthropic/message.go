package anthropic

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The output side: the engine's chat answer as a Messages answer, as vLLM's
// messages_full_converter and message_stream_converter build it: the reasoning as a thinking
// block (with a signature, opaque to clients), the content as a text block, each tool call as
// a tool_use block whose input is the parsed arguments. finish_reason maps to stop_reason:
// stop → end_turn (stop_sequence when the engine's stop_reason names one of the request's
// stop_sequences), length → max_tokens, tool_calls → tool_use. Usage follows Anthropic's
// accounting, where the prompt is input_tokens + cache_read_input_tokens: input_tokens are
// the prompt tokens the engine did not find cached, cache_read_input_tokens its cached tokens
// (usage.prompt_tokens_details.cached_tokens).

// Output says what the conversion needs of the request.
type Output struct {
	// Model is the model name the answer carries (the one the client asked for).
	Model string
	// StopSequences are the request's stop_sequences.
	StopSequences []string
	// PromptTokens is the gateway's count of the prompt, used when the engine reports none.
	PromptTokens int
}

// chatUsage is a chat usage object.
type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// chatToolCall is a tool call of a chat message or delta.
type chatToolCall struct {
	Index    int     `json:"index"`
	ID       *string `json:"id"`
	Function struct {
		Name      *string `json:"name"`
		Arguments string  `json:"arguments"`
	} `json:"function"`
}

// chatCompletion is what the conversion reads of a chat.completion body.
type chatCompletion struct {
	ID      string `json:"id"`
	Choices []struct {
		Message struct {
			Content          *string        `json:"content"`
			Reasoning        *string        `json:"reasoning"`
			ReasoningContent *string        `json:"reasoning_content"`
			ToolCalls        []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string          `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// errMalformed is a worker's chat answer the conversion cannot read.
func errMalformed(what string) *openai.Error {
	return &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_malformed",
		Message: "the worker's chat answer could not be read as a message: " + what}
}

// Message converts a chat.completion body into the Messages response body.
func (o *Output) Message(body []byte) ([]byte, *openai.Error) {
	var cc chatCompletion
	if err := json.Unmarshal(body, &cc); err != nil {
		return nil, errMalformed(err.Error())
	}
	if len(cc.Choices) == 0 {
		return nil, errMalformed("no choices")
	}
	ch := &cc.Choices[0]
	m := &ch.Message
	dst := make([]byte, 0, 256+len(body))
	dst = append(dst, `{"id":`...)
	dst = openai.AppendString(dst, MessageID(cc.ID))
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = openai.AppendString(dst, o.Model)
	dst = append(dst, `,"content":[`...)
	n := 0
	sep := func() {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
	}
	if r := reasoningOf(m.Reasoning, m.ReasoningContent); r != "" {
		sep()
		dst = append(dst, `{"type":"thinking","thinking":`...)
		dst = openai.AppendString(dst, r)
		dst = append(dst, `,"signature":`...)
		dst = openai.AppendString(dst, newSignature())
		dst = append(dst, '}')
	}
	if m.Content != nil && *m.Content != "" {
		sep()
		dst = append(dst, `{"type":"text","text":`...)
		dst = openai.AppendString(dst, *m.Content)
		dst = append(dst, '}')
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		sep()
		dst = appendToolUse(dst, deref(tc.ID), deref(tc.Function.Name), []byte(tc.Function.Arguments))
	}
	dst = append(dst, ']')
	dst = o.appendStop(dst, ch.FinishReason, ch.StopReason)
	dst = append(dst, `,"usage":`...)
	dst = o.appendUsage(dst, cc.Usage)
	return append(dst, '}'), nil
}

// appendToolUse appends a tool_use block; arguments that are not a JSON object (a model's
// malformed call) become the input {}: a client cannot parse anything else as an input.
func appendToolUse(dst []byte, id, name string, args []byte) []byte {
	dst = append(dst, `{"type":"tool_use","id":`...)
	dst = openai.AppendString(dst, ToolUseID(id))
	dst = append(dst, `,"name":`...)
	dst = openai.AppendString(dst, name)
	dst = append(dst, `,"input":`...)
	args = bytes.TrimSpace(args)
	if len(args) > 0 && args[0] == '{' && json.Valid(args) {
		var c bytes.Buffer
		_ = json.Compact(&c, args)
		dst = append(dst, c.Bytes()...)
	} else {
		dst = append(dst, "{}"...)
	}
	return append(dst, '}')
}

// appendStop appends the members stop_reason and stop_sequence after others.
func (o *Output) appendStop(dst []byte, finish string, stopReason json.RawMessage) []byte {
	return o.appendStopMembers(append(dst, ','), finish, stopReason)
}

// appendStopMembers appends "stop_reason":…,"stop_sequence":….
func (o *Output) appendStopMembers(dst []byte, finish string, stopReason json.RawMessage) []byte {
	reason, seq := o.stopReason(finish, stopReason)
	dst = append(dst, `"stop_reason":`...)
	dst = openai.AppendString(dst, reason)
	dst = append(dst, `,"stop_sequence":`...)
	if seq == nil {
		return append(dst, "null"...)
	}
	return openai.AppendString(dst, *seq)
}

// stopReason maps a chat finish_reason (and the engine's stop_reason, the stop string that
// matched) to Anthropic's stop_reason and stop_sequence.
func (o *Output) stopReason(finish string, stopReason json.RawMessage) (string, *string) {
	switch finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls":
		return "tool_use", nil
	case "content_filter":
		return "refusal", nil
	}
	if len(stopReason) > 0 && stopReason[0] == '"' {
		var s string
		if json.Unmarshal(stopReason, &s) == nil {
			for i := range o.StopSequences {
				if o.StopSequences[i] == s {
					return "stop_sequence", &o.StopSequences[i]
				}
			}
		}
	}
	return "end_turn", nil
}

// appendUsage appends the usage object: input_tokens (not cached), output_tokens,
// cache_read_input_tokens and cache_creation_input_tokens (0: an engine reports no writes).
func (o *Output) appendUsage(dst []byte, u *chatUsage) []byte {
	prompt, cached, out := o.PromptTokens, 0, 0
	if u != nil {
		if u.PromptTokens > 0 {
			prompt = u.PromptTokens
		}
		out = u.CompletionTokens
		if u.PromptTokensDetails != nil {
			cached = min(u.PromptTokensDetails.CachedTokens, prompt)
		}
	}
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt-cached), 10)
	dst = append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(cached), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(out), 10)
	return append(dst, '}')
}

// MessageID is the message id of a chat completion id: "msg_" and the id without its
// chatcmpl- prefix, so the id an engine logs is still recognisable.
func MessageID(chatID string) string {
	if strings.HasPrefix(chatID, "msg_") {
		return chatID
	}
	if chatID == "" {
		return "msg_" + hex.EncodeToString(randomBytes(12))
	}
	return "msg_" + strings.TrimPrefix(chatID, "chatcmpl-")
}

// ToolUseID is the tool_use id of a chat tool call id: "toolu_" and the id without its
// engine prefix (vLLM's chatcmpl-tool-, OpenAI's call_). The client sends it back as the
// tool_result's tool_use_id and the next turn renders it, so it is a pure function of the
// engine's id: the same turn always renders the same.
func ToolUseID(callID string) string {
	if strings.HasPrefix(callID, "toolu_") {
		return callID
	}
	if callID == "" {
		return "toolu_" + hex.EncodeToString(randomBytes(12))
	}
	for _, p := range []string{"chatcmpl-tool-", "call_"} {
		if strings.HasPrefix(callID, p) {
			return "toolu_" + callID[len(p):]
		}
	}
	return "toolu_" + callID
}

// newSignature is a thinking block's signature: opaque to clients, who send it back unread.
func newSignature() string { return hex.EncodeToString(randomBytes(16)) }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func reasoningOf(r, rc *string) string {
	if r != nil && *r != "" {
		return *r
	}
	return deref(rc)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
