package openai

import (
	"strconv"
)

// The response object of the Responses API and its stream framing: AppendResponse writes the
// object (the body of POST /v1/responses and GET /v1/responses/{id}, and the "response" of the
// stream's lifecycle events), AppendEventStart/AppendEventEnd frame one named event, and
// AppendResponsesError the stream's error event.

// Object names of the Responses and Conversations APIs.
const (
	ObjectResponse            = "response"
	ObjectConversation        = "conversation"
	ObjectConversationDeleted = "conversation.deleted"
	ObjectList                = "list"
)

// Response statuses (Response.Status).
const (
	ResponseInProgress = "in_progress"
	ResponseCompleted  = "completed"
	ResponseIncomplete = "incomplete"
	ResponseFailed     = "failed"
)

// ResponseUsage is the usage of a response.
type ResponseUsage struct {
	InputTokens     int
	CachedTokens    int
	OutputTokens    int
	ReasoningTokens int
}

// ResponseState is what a response object says beyond its request: identity, status and,
// once done, output and usage.
type ResponseState struct {
	ID        string
	CreatedAt int64
	// Model is the model name the client asked for (defaulted).
	Model  string
	Status string
	// IncompleteReason is incomplete_details.reason ("max_output_tokens", "content_filter")
	// when Status is incomplete.
	IncompleteReason string
	// Error is the error of a failed response (its Code and Message are written).
	Error *Error
	// Output is the output items as a JSON array in canonical form (nil: []).
	Output []byte
	// Usage is nil until the response is done.
	Usage *ResponseUsage
}

// AppendResponse appends the response object of r in state s, with the request's settings
// echoed as the OpenAI reference defines them (defaults written where the request gave none).
func (r *ResponsesRequest) AppendResponse(dst []byte, s *ResponseState) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendString(dst, s.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, s.CreatedAt, 10)
	dst = append(dst, `,"status":`...)
	dst = AppendString(dst, s.Status)
	dst = append(dst, `,"background":false,"error":`...)
	if s.Error != nil {
		dst = append(dst, `{"code":`...)
		dst = AppendString(dst, errorCode(s.Error))
		dst = appendField(dst, "message", s.Error.Message)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if s.IncompleteReason != "" {
		dst = append(dst, `{"reason":`...)
		dst = AppendString(dst, s.IncompleteReason)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = appendOptString(dst, "instructions", r.Instructions)
	dst = append(dst, `,"max_output_tokens":`...)
	dst = appendOptInt(dst, r.MaxOutputTokens)
	dst = appendField(dst, "model", s.Model)
	dst = append(dst, `,"output":`...)
	dst = appendRawOr(dst, s.Output, "[]")
	dst = append(dst, `,"parallel_tool_calls":`...)
	dst = strconv.AppendBool(dst, r.ParallelToolCalls == nil || *r.ParallelToolCalls)
	dst = appendOptString(dst, "previous_response_id", r.PreviousResponseID)
	dst = append(dst, `,"conversation":`...)
	if r.Conversation != "" {
		dst = append(dst, `{"id":`...)
		dst = AppendString(dst, r.Conversation)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = appendOptString(dst, "prompt_cache_key", r.PromptCacheKey)
	dst = append(dst, `,"reasoning":`...)
	dst = appendRawOr(dst, r.Reasoning, `{"effort":null,"summary":null}`)
	dst = append(dst, `,"store":`...)
	dst = strconv.AppendBool(dst, r.Store)
	dst = append(dst, `,"temperature":`...)
	dst = appendFloatOr(dst, r.Temperature, 1)
	dst = append(dst, `,"text":`...)
	dst = appendRawOr(dst, r.Text, `{"format":{"type":"text"}}`)
	dst = append(dst, `,"tool_choice":`...)
	dst = appendRawOr(dst, r.ToolChoiceRaw, `"auto"`)
	dst = append(dst, `,"tools":[`...)
	for i, t := range r.Tools {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, t.Raw...)
	}
	dst = append(dst, `],"top_logprobs":`...)
	dst = strconv.AppendInt(dst, int64(r.TopLogprobs), 10)
	dst = append(dst, `,"top_p":`...)
	dst = appendFloatOr(dst, r.TopP, 1)
	dst = appendField(dst, "truncation", r.Truncation)
	dst = append(dst, `,"usage":`...)
	dst = appendUsage(dst, s.Usage)
	dst = appendOptString(dst, "user", r.User)
	dst = append(dst, `,"metadata":`...)
	dst = appendRawOr(dst, r.Metadata, "{}")
	for _, m := range r.Echo {
		dst = append(dst, ',')
		dst = AppendString(dst, m.Key)
		dst = append(dst, ':')
		dst = append(dst, m.Value...)
	}
	return append(dst, '}')
}

func appendUsage(dst []byte, u *ResponseUsage) []byte {
	if u == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.InputTokens), 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.OutputTokens), 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.ReasoningTokens), 10)
	dst = append(dst, `},"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.InputTokens+u.OutputTokens), 10)
	return append(dst, '}')
}

// appendOptString appends ,"k":v, or ,"k":null for "".
func appendOptString(dst []byte, k, v string) []byte {
	if v != "" {
		return appendField(dst, k, v)
	}
	dst = append(dst, ',', '"')
	dst = append(dst, k...)
	return append(dst, `":null`...)
}

func appendOptInt(dst []byte, n int) []byte {
	if n == 0 {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, int64(n), 10)
}

func appendFloatOr(dst []byte, f *float64, def float64) []byte {
	v := def
	if f != nil {
		v = *f
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// errorCode is the code written for e: its Code, else its status.
func errorCode(e *Error) string {
	if e.Code != "" {
		return e.Code
	}
	return strconv.Itoa(e.Status)
}

// AppendEventStart appends the start of one named stream event of the Responses API,
// "event: TYPE\ndata: {"type":TYPE,"sequence_number":SEQ", to which the caller appends the
// event's other members (each starting with a comma) before AppendEventEnd.
func AppendEventStart(dst []byte, typ string, seq int) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":"...)
	dst = AppendString(dst, typ)
	dst = append(dst, `,"sequence_number":`...)
	return strconv.AppendInt(dst, int64(seq), 10)
}

// AppendEventEnd closes an event begun with AppendEventStart.
func AppendEventEnd(dst []byte) []byte { return append(dst, "}\n\n"...) }

// AppendResponsesError appends the Responses stream's error event for e:
// {"type":"error","sequence_number","code","message","param"}.
func AppendResponsesError(dst []byte, e *Error, seq int) []byte {
	dst = AppendEventStart(dst, "error", seq)
	dst = appendField(dst, "code", errorCode(e))
	dst = appendField(dst, "message", e.Message)
	dst = append(dst, `,"param":`...)
	if e.Param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendString(dst, e.Param)
	}
	return AppendEventEnd(dst)
}

// AppendList appends a list object {"object":"list","data":DATA,"first_id","last_id",
// "has_more"} around data, a JSON array whose first and last elements have the given ids.
func AppendList(dst, data []byte, firstID, lastID string, hasMore bool) []byte {
	dst = append(dst, `{"object":"list","data":`...)
	dst = append(dst, data...)
	dst = appendOptString(dst, "first_id", firstID)
	dst = appendOptString(dst, "last_id", lastID)
	dst = append(dst, `,"has_more":`...)
	dst = strconv.AppendBool(dst, hasMore)
	return append(dst, '}')
}
