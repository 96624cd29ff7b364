package openai

import (
	"bytes"
	"encoding/json"
)

// DefaultCompletionMaxTokens is OpenAI's (and vLLM's) /v1/completions default, used for gRPC
// workers when the request does not say.
const DefaultCompletionMaxTokens = 16

// Prompt is one prompt of a completion request: Text, or token ids when IsTokens.
type Prompt struct {
	Text     string
	Tokens   []uint32
	IsTokens bool
}

// CompletionRequest is a validated POST /v1/completions body. It keeps every top-level field as
// sent, so that http:// workers receive the client's request with only model (and, with
// --forward-token-ids, prompt) replaced (AppendUpstream).
type CompletionRequest struct {
	Model   string
	Prompts []Prompt
	Sampling

	raw     map[string]json.RawMessage
	bodyLen int
}

// BodyLen returns the size of the client's body, to size buffers for the upstream one.
func (r *CompletionRequest) BodyLen() int { return r.bodyLen }

// Has reports whether the client's body has the top-level field key.
func (r *CompletionRequest) Has(key string) bool { _, ok := r.raw[key]; return ok }

// ParseCompletion decodes and validates a completion body. The request refers into body, which
// must stay unchanged while the request is in use. Every failure is a 400 *Error naming the
// offending parameter.
func ParseCompletion(body []byte, lim Limits) (*CompletionRequest, *Error) {
	raw, err := scanBody(body)
	if err != nil {
		return nil, err
	}
	req := &CompletionRequest{raw: raw, bodyLen: len(body)}
	if req.Model, err = parseModel(raw); err != nil {
		return nil, err
	}
	pv, ok := raw["prompt"]
	if !ok || isNull(pv) {
		return nil, BadRequest("prompt", "prompt is required")
	}
	if req.Prompts, err = parsePrompt(pv); err != nil {
		return nil, err
	}
	if err := req.Sampling.parse(raw, lim); err != nil {
		return nil, err
	}
	return req, nil
}

// parsePrompt accepts a string, a list of strings, a list of token ids or a list of lists of
// token ids (the four OpenAI forms).
func parsePrompt(v json.RawMessage) ([]Prompt, *Error) {
	v = bytes.TrimSpace(v)
	empty := BadRequest("prompt", "prompt must not be empty")
	wrong := BadRequest("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	badIDs := BadRequest("prompt", "prompt token ids must be non-negative 32-bit integers")
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, wrong
		}
		if s == "" {
			return nil, empty
		}
		return []Prompt{{Text: s}}, nil
	case '[':
	default:
		return nil, wrong
	}
	switch first := firstElem(v); {
	case first == 0:
		return nil, empty
	case first == '"':
		var ss []string
		if err := json.Unmarshal(v, &ss); err != nil {
			return nil, wrong
		}
		ps := make([]Prompt, len(ss))
		for i, s := range ss {
			if s == "" {
				return nil, empty
			}
			ps[i] = Prompt{Text: s}
		}
		return ps, nil
	case first == '[':
		var lists []json.RawMessage
		if err := json.Unmarshal(v, &lists); err != nil {
			return nil, wrong
		}
		ps := make([]Prompt, len(lists))
		for i, l := range lists {
			ids, err := parseTokenArray(l)
			if err != nil {
				return nil, badIDs
			}
			if len(ids) == 0 {
				return nil, empty
			}
			ps[i] = Prompt{Tokens: ids, IsTokens: true}
		}
		return ps, nil
	case first == '-' || (first >= '0' && first <= '9'):
		ids, err := parseTokenArray(v)
		if err != nil {
			return nil, badIDs
		}
		return []Prompt{{Tokens: ids, IsTokens: true}}, nil
	}
	return nil, wrong
}

// firstElem returns the first non-space byte after the opening '[' of v, or 0 for "[]".
func firstElem(v []byte) byte {
	for _, c := range v[1:] {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case ']':
			return 0
		}
		return c
	}
	return 0
}

// AppendUpstream appends the client's body re-encoded for an http:// worker: every field as
// sent, with model set to the worker's name and, when tokens is non-nil, prompt replaced by the
// gateway's token ids (one list per prompt), and edits applied. Keys are written in sorted
// order.
func (r *CompletionRequest) AppendUpstream(dst []byte, model string, tokens [][]uint32, edits Edits) []byte {
	return appendFields(dst, r.raw, model, edits, func(dst []byte, k string) ([]byte, bool) {
		if k != "prompt" || tokens == nil {
			return dst, false
		}
		if len(tokens) == 1 {
			return AppendTokenArray(dst, tokens[0]), true
		}
		dst = append(dst, '[')
		for j, t := range tokens {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = AppendTokenArray(dst, t)
		}
		return append(dst, ']'), true
	})
}
