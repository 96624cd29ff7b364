package openai

import (
	"encoding/json"
	"fmt"
)

// PassRequest is a JSON request the gateway forwards to an HTTP worker as the client sent it,
// with only its model renamed: vLLM's pooling endpoints (embeddings, pooling, classify, score,
// rerank), whose answers gain nothing from the prefix cache and whose bodies the gateway need
// not understand. Only model and stream are read. The request refers into the body it was
// parsed from.
type PassRequest struct {
	// Path is the endpoint's path, the same on the worker.
	Path   string
	Model  string
	Stream bool
	raw    map[string]json.RawMessage
	n      int
}

// ParsePass reads a JSON object body for path: model, when present, must be a string; the rest
// is forwarded unread (the engine validates it). Failures are 400 *Errors.
func ParsePass(body []byte, path string, lim Limits) (*PassRequest, *Error) {
	maxDepth := lim.MaxJSONDepth
	if maxDepth <= 0 {
		maxDepth = DefaultMaxJSONDepth
	}
	if d := jsonDepth(body); d > maxDepth {
		return nil, BadRequest("", fmt.Sprintf("request body nests %d levels deep, more than the %d allowed", d, maxDepth))
	}
	raw, err := scanBody(body)
	if err != nil {
		return nil, err
	}
	r := &PassRequest{Path: path, raw: raw, n: len(body)}
	if r.Model, err = parseModel(raw); err != nil {
		return nil, err
	}
	r.Stream = isTrue(raw["stream"])
	return r, nil
}

// AppendUpstream appends the body for an http:// worker: every member as sent, model set to
// the worker's name.
func (r *PassRequest) AppendUpstream(dst []byte, model string) []byte {
	return appendFields(dst, r.raw, model, func(dst []byte, _ string) ([]byte, bool) { return dst, false })
}

// BodyLen returns the size of the client's body.
func (r *PassRequest) BodyLen() int { return r.n }
