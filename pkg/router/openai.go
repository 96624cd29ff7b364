package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Limits of the OpenAI request handling that are not user-configurable.
const (
	// maxStops is the largest number of stop strings accepted.
	maxStops = 16
	// maxTokensLimit is the largest max_tokens accepted: anything above is a typo or abuse, far
	// beyond any engine's context window.
	maxTokensLimit = 1 << 20
	// defaultMaxTokens is OpenAI's (and vLLM's) /v1/completions default, used for gRPC workers
	// when the request does not say.
	defaultMaxTokens = 16
)

// prompt is one prompt of a completion request: text, or token ids when isTokens.
type prompt struct {
	text     string
	tokens   []uint32
	isTokens bool
}

// completionRequest is a validated POST /v1/completions body. raw keeps every top-level field
// as sent so that http:// workers receive the client's request with only model (and, with
// --forward-token-ids, prompt) replaced.
type completionRequest struct {
	Model        string
	Prompts      []prompt
	MaxTokens    int // 0: not given
	Temperature  *float64
	TopP         *float64
	N            int
	Stream       bool
	IncludeUsage bool
	Stop         []string
	Seed         *int64
	User         string
	IgnoreEOS    bool
	StopTokenIDs []uint32

	raw     map[string]json.RawMessage
	bodyLen int // size of the client's body, to size the upstream one
}

// requestLimits are the checks of parseCompletion that depend on configuration.
type requestLimits struct {
	MaxN int
}

// parseCompletion decodes and validates a completion body. Every failure is an *apiError with
// status 400 naming the offending parameter.
func parseCompletion(body []byte, lim requestLimits) (*completionRequest, *apiError) {
	// JSON text is UTF-8 (RFC 8259 §8.1) and engines reject anything else (vLLM's json.loads
	// fails on it); encoding/json and scanObject would silently turn bad bytes into U+FFFD and
	// route a prompt the engine never sees.
	if !utf8.Valid(body) {
		return nil, badRequest("", "request body is not valid UTF-8")
	}
	raw := make(map[string]json.RawMessage, 8)
	if err := scanObject(body, func(k string, v []byte) { raw[k] = v }); err != nil {
		// Let encoding/json describe what is wrong (it is the slow path only for bad bodies).
		var probe map[string]json.RawMessage
		if jerr := json.Unmarshal(body, &probe); jerr != nil {
			return nil, badRequest("", "invalid JSON body: "+jsonErrText(jerr))
		}
		return nil, badRequest("", "request body must be a JSON object")
	}
	req := &completionRequest{raw: raw, N: 1, bodyLen: len(body)}
	if v, ok := raw["model"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &req.Model); err != nil {
			return nil, badRequest("model", "model must be a string")
		}
	}
	pv, ok := raw["prompt"]
	if !ok || isNull(pv) {
		return nil, badRequest("prompt", "prompt is required")
	}
	var perr *apiError
	if req.Prompts, perr = parsePrompt(pv); perr != nil {
		return nil, perr
	}
	if v, ok := raw["max_tokens"]; ok && !isNull(v) {
		n, err := parseInt(v)
		switch {
		case err != nil:
			return nil, badRequest("max_tokens", "max_tokens must be an integer")
		case n < 1:
			return nil, badRequest("max_tokens", fmt.Sprintf("max_tokens must be at least 1, got %d", n))
		case n > maxTokensLimit:
			return nil, badRequest("max_tokens", fmt.Sprintf("max_tokens must be at most %d, got %d", maxTokensLimit, n))
		}
		req.MaxTokens = int(n)
	}
	if v, ok := raw["n"]; ok && !isNull(v) {
		n, err := parseInt(v)
		switch {
		case err != nil:
			return nil, badRequest("n", "n must be an integer")
		case n < 1:
			return nil, badRequest("n", "n must be at least 1")
		case lim.MaxN > 0 && n > int64(lim.MaxN):
			return nil, badRequest("n", fmt.Sprintf("n must be at most %d, got %d", lim.MaxN, n))
		}
		req.N = int(n)
	}
	if v, ok := raw["temperature"]; ok && !isNull(v) {
		f, err := parseFloat(v)
		if err != nil || f < 0 || f > 2 {
			return nil, badRequest("temperature", "temperature must be a number between 0 and 2")
		}
		req.Temperature = &f
	}
	if v, ok := raw["top_p"]; ok && !isNull(v) {
		f, err := parseFloat(v)
		if err != nil || f <= 0 || f > 1 {
			return nil, badRequest("top_p", "top_p must be a number in (0, 1]")
		}
		req.TopP = &f
	}
	if v, ok := raw["seed"]; ok && !isNull(v) {
		n, err := parseInt(v)
		if err != nil {
			return nil, badRequest("seed", "seed must be an integer")
		}
		req.Seed = &n
	}
	if v, ok := raw["stream"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &req.Stream); err != nil {
			return nil, badRequest("stream", "stream must be a boolean")
		}
	}
	if v, ok := raw["stream_options"]; ok && !isNull(v) {
		if !req.Stream {
			return nil, badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(v, &so); err != nil {
			return nil, badRequest("stream_options", "stream_options must be an object with a boolean include_usage")
		}
		req.IncludeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	}
	if v, ok := raw["stop"]; ok && !isNull(v) {
		var one string
		if err := json.Unmarshal(v, &one); err == nil {
			req.Stop = []string{one}
		} else if err := json.Unmarshal(v, &req.Stop); err != nil {
			return nil, badRequest("stop", "stop must be a string or a list of strings")
		}
		if len(req.Stop) > maxStops {
			return nil, badRequest("stop", fmt.Sprintf("at most %d stop sequences are allowed", maxStops))
		}
		if slices.Contains(req.Stop, "") {
			return nil, badRequest("stop", "stop sequences must not be empty")
		}
	}
	if v, ok := raw["user"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &req.User); err != nil {
			return nil, badRequest("user", "user must be a string")
		}
	}
	// vLLM extensions that the gRPC path maps onto sampling parameters.
	if v, ok := raw["ignore_eos"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &req.IgnoreEOS); err != nil {
			return nil, badRequest("ignore_eos", "ignore_eos must be a boolean")
		}
	}
	if v, ok := raw["stop_token_ids"]; ok && !isNull(v) {
		ids, err := parseTokenArray(v)
		if err != nil {
			return nil, badRequest("stop_token_ids", "stop_token_ids must be a list of token ids")
		}
		req.StopTokenIDs = ids
	}
	return req, nil
}

// jsonErrText shortens encoding/json errors to something safe and useful for a client.
func jsonErrText(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at offset %d", e.Offset)
	case *json.UnmarshalTypeError:
		return "body must be a JSON object"
	}
	return "malformed"
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// parseInt accepts a JSON integer (an integral float like 5.0 is accepted, as Python's JSON
// stack used by the engines does not distinguish either).
func parseInt(v json.RawMessage) (int64, error) {
	s := string(bytes.TrimSpace(v))
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not an integer")
	}
	return int64(f), nil
}

func parseFloat(v json.RawMessage) (float64, error) {
	s := bytes.TrimSpace(v)
	if len(s) == 0 || s[0] == '"' {
		return 0, fmt.Errorf("not a number")
	}
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number")
	}
	return f, nil
}

// parsePrompt accepts a string, a list of strings, a list of token ids or a list of lists of
// token ids (the four OpenAI forms). Token-id arrays take a hand-written fast path: a
// 1000-token prompt is the common case the gateway's latency budget is measured on.
func parsePrompt(v json.RawMessage) ([]prompt, *apiError) {
	v = bytes.TrimSpace(v)
	empty := badRequest("prompt", "prompt must not be empty")
	wrong := badRequest("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, wrong
		}
		if s == "" {
			return nil, empty
		}
		return []prompt{{text: s}}, nil
	case '[':
	default:
		return nil, wrong
	}
	first := firstElem(v)
	switch {
	case first == 0:
		return nil, empty
	case first == '"':
		var ss []string
		if err := json.Unmarshal(v, &ss); err != nil {
			return nil, wrong
		}
		ps := make([]prompt, len(ss))
		for i, s := range ss {
			if s == "" {
				return nil, empty
			}
			ps[i] = prompt{text: s}
		}
		return ps, nil
	case first == '[':
		var lists []json.RawMessage
		if err := json.Unmarshal(v, &lists); err != nil {
			return nil, wrong
		}
		ps := make([]prompt, len(lists))
		for i, l := range lists {
			ids, err := parseTokenArray(l)
			if err != nil {
				return nil, badRequest("prompt", "prompt token ids must be non-negative 32-bit integers")
			}
			if len(ids) == 0 {
				return nil, empty
			}
			ps[i] = prompt{tokens: ids, isTokens: true}
		}
		return ps, nil
	case first == '-' || (first >= '0' && first <= '9'):
		ids, err := parseTokenArray(v)
		if err != nil {
			return nil, badRequest("prompt", "prompt token ids must be non-negative 32-bit integers")
		}
		return []prompt{{tokens: ids, isTokens: true}}, nil
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

// parseTokenArray parses a JSON array of non-negative integers that fit in uint32. It allocates
// only the result.
func parseTokenArray(v []byte) ([]uint32, error) {
	v = bytes.TrimSpace(v)
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return nil, fmt.Errorf("not an array")
	}
	body := v[1 : len(v)-1]
	ids := make([]uint32, 0, len(body)/4+1)
	i, n := 0, len(body)
	skip := func() {
		for i < n && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n') {
			i++
		}
	}
	skip()
	if i == n {
		return ids, nil
	}
	for {
		skip()
		start := i
		var x uint64
		for i < n && body[i] >= '0' && body[i] <= '9' {
			x = x*10 + uint64(body[i]-'0')
			if x > math.MaxUint32 {
				return nil, fmt.Errorf("token id out of range")
			}
			i++
		}
		if i == start || (i-start > 1 && body[start] == '0') {
			return nil, fmt.Errorf("not a token id")
		}
		ids = append(ids, uint32(x))
		skip()
		if i == n {
			return ids, nil
		}
		if body[i] != ',' {
			return nil, fmt.Errorf("not a token id")
		}
		i++
	}
}

// appendTokenArray appends ids as a JSON array.
func appendTokenArray(b []byte, ids []uint32) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}

// upstreamBody re-encodes the client's body for an http:// worker: every field as sent, with
// model set to the worker's name and, when tokens is non-nil, prompt replaced by the gateway's
// token ids (one list per prompt). Keys are written in sorted order.
func (r *completionRequest) upstreamBody(dst []byte, model string, tokens [][]uint32) []byte {
	keys := make([]string, 0, len(r.raw)+1)
	for k := range r.raw {
		keys = append(keys, k)
	}
	if _, ok := r.raw["model"]; !ok {
		keys = append(keys, "model")
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		switch {
		case k == "model":
			mb, _ := json.Marshal(model)
			dst = append(dst, mb...)
		case k == "prompt" && tokens != nil:
			if len(tokens) == 1 {
				dst = appendTokenArray(dst, tokens[0])
			} else {
				dst = append(dst, '[')
				for j, t := range tokens {
					if j > 0 {
						dst = append(dst, ',')
					}
					dst = appendTokenArray(dst, t)
				}
				dst = append(dst, ']')
			}
		default:
			dst = append(dst, r.raw[k]...)
		}
	}
	return append(dst, '}')
}

// bodyPool recycles request-body buffers; buffers that grew past maxPooledBody are dropped.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 1 << 20

// readBody reads at most limit bytes of r's body; a larger body is a 413. The body is valid until
// release is called (release is never nil).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), aerr *apiError) {
	release = func() {}
	tooLarge := &apiError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body larger than %d bytes", limit), Type: typeInvalidRequest, Code: "request_too_large"}
	if r.ContentLength > limit {
		return nil, release, tooLarge
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead + 1) // ReadFrom wants MinRead spare bytes
	}
	release = func() {
		if buf.Cap() <= maxPooledBody {
			bodyPool.Put(buf)
		}
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, release, tooLarge
		}
		return nil, release, badRequest("", "could not read request body")
	}
	return buf.Bytes(), release, nil
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
