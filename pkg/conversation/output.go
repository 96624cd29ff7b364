package conversation

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The conversion of a turn's chat output into response items, as vLLM builds them
// (responses/utils.py build_response_output_items): the reasoning, if any, as a reasoning item
// with one reasoning_text part; the content, if not empty, as an assistant message with one
// output_text part; each tool call as a function_call item whose call_id is the call's id. A
// chat finish_reason "length" makes the response incomplete (max_output_tokens),
// "content_filter" incomplete (content_filter); usage maps prompt, cached, completion tokens,
// and the reasoning's tokens are counted by tokenizing its text (Result.Usage).

// Result is a finished turn: its output items (ids assigned), status and usage.
type Result struct {
	Items            []openai.Item
	Status           string
	IncompleteReason string
	Error            *openai.Error
	Usage            openai.ResponseUsage
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
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatCompletion is what the conversion reads of a chat.completion body.
type chatCompletion struct {
	Choices []struct {
		Message struct {
			Content          *string        `json:"content"`
			Reasoning        *string        `json:"reasoning"`
			ReasoningContent *string        `json:"reasoning_content"`
			ToolCalls        []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		Logprobs *struct {
			Content json.RawMessage `json:"content"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// errMalformed is a worker's chat answer the conversion cannot read.
func errMalformed(what string) *openai.Error {
	return &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_malformed",
		Message: "the worker's chat answer could not be read as a response: " + what}
}

// FromCompletion converts a chat.completion body into the turn's result. countTokens, when
// not nil, counts the reasoning's tokens.
func (t *Turn) FromCompletion(body []byte, countTokens func(string) int) (*Result, *openai.Error) {
	var cc chatCompletion
	if err := json.Unmarshal(body, &cc); err != nil {
		return nil, errMalformed(err.Error())
	}
	if len(cc.Choices) == 0 {
		return nil, errMalformed("no choices")
	}
	ch := &cc.Choices[0]
	m := &ch.Message
	reasoning := m.Reasoning
	if reasoning == nil {
		reasoning = m.ReasoningContent
	}
	res := &Result{}
	if reasoning != nil && *reasoning != "" {
		res.Items = append(res.Items, t.reasoningItem(*reasoning, openai.StatusCompleted))
	}
	if m.Content != nil && *m.Content != "" {
		msg := t.messageItem(openai.StatusCompleted)
		msg.Parts[0].Text = *m.Content
		if ch.Logprobs != nil && ch.Logprobs.Content != nil && string(ch.Logprobs.Content) != "null" {
			msg.Parts[0].Logprobs = ch.Logprobs.Content
		}
		res.Items = append(res.Items, msg)
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		res.Items = append(res.Items, t.callItem(tc.ID, tc.Function.Name, tc.Function.Arguments, openai.StatusCompleted))
	}
	t.finishResult(res, ch.FinishReason, cc.Usage, reasoning, countTokens)
	return res, nil
}

// finishResult sets the result's status and usage.
func (t *Turn) finishResult(res *Result, finish string, u *chatUsage, reasoning *string, countTokens func(string) int) {
	res.Status = openai.ResponseCompleted
	switch finish {
	case "length":
		res.Status, res.IncompleteReason = openai.ResponseIncomplete, "max_output_tokens"
	case "content_filter":
		res.Status, res.IncompleteReason = openai.ResponseIncomplete, "content_filter"
	case "error":
		res.Status = openai.ResponseFailed
		res.Error = &openai.Error{Status: http.StatusBadGateway, Code: "server_error", Message: "the worker ended the generation with an error"}
	}
	if res.Status == openai.ResponseIncomplete {
		// The item the length cut is incomplete, as OpenAI marks it.
		if n := len(res.Items); n > 0 {
			res.Items[n-1].Status = openai.StatusIncomplete
		}
	}
	if u != nil {
		res.Usage.InputTokens, res.Usage.OutputTokens = u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			res.Usage.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	if reasoning != nil && *reasoning != "" && countTokens != nil {
		res.Usage.ReasoningTokens = countTokens(*reasoning)
		if res.Usage.OutputTokens > 0 {
			res.Usage.ReasoningTokens = min(res.Usage.ReasoningTokens, res.Usage.OutputTokens)
		}
	}
}

// reasoningItem, messageItem and callItem make the output items, each with the turn's next id.
func (t *Turn) reasoningItem(text, status string) openai.Item {
	it := openai.Item{Type: openai.ItemReasoning, ID: t.nextID(openai.ItemReasoning), Status: status, Summary: []string{}}
	it.Content = []string{text}
	return it
}

func (t *Turn) messageItem(status string) openai.Item {
	return openai.Item{Type: openai.ItemMessage, ID: t.nextID(openai.ItemMessage), Status: status, Role: "assistant",
		Parts: []openai.ItemPart{{Type: openai.PartOutputText}}}
}

func (t *Turn) callItem(callID, name, args, status string) openai.Item {
	if callID == "" {
		callID = "call_" + newHex()
	}
	return openai.Item{Type: openai.ItemFunctionCall, ID: t.nextID(openai.ItemFunctionCall), Status: status, CallID: callID, Name: name, Arguments: args}
}

// upstreamError reads a chat stream's error event ({"error":{...}}) into an *openai.Error.
func upstreamError(data []byte) *openai.Error {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error == nil {
		return nil
	}
	ae := &openai.Error{Status: http.StatusBadGateway, Type: e.Error.Type, Message: e.Error.Message}
	if e.Error.Code != nil {
		ae.Code = fmt.Sprint(e.Error.Code)
	}
	if ae.Type == "" {
		ae.Type = openai.TypeUpstream
	}
	return ae
}
