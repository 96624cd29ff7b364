package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Limits of request handling that are not user-configurable.
const (
	// MaxStops is the largest number of stop strings accepted.
	MaxStops = 16
	// MaxTokensLimit is the largest max_tokens accepted: anything above is a typo or abuse, far
	// beyond any engine's context window.
	MaxTokensLimit = 1 << 20
	// DefaultCompletionMaxTokens is OpenAI's (and vLLM's) /v1/completions default, used for
	// gRPC workers when the request does not say.
	DefaultCompletionMaxTokens = 16
)

// Limits are the request checks that depend on configuration.
type Limits struct {
	// MaxN is the largest n accepted (0: no limit).
	MaxN int
	// MaxMessages bounds the messages of a chat request (0: DefaultMaxMessages).
	MaxMessages int
	// MaxJSONDepth bounds the nesting of a chat body (0: DefaultMaxJSONDepth).
	MaxJSONDepth int
}

// Prompt is one prompt of a completion request: Text, or token ids when IsTokens.
type Prompt struct {
	Text     string
	Tokens   []uint32
	IsTokens bool
}

// Sampling holds the generation parameters completions and chat completions share, as the
// client sent them. Zero values mean "not given" except N (default 1).
type Sampling struct {
	MaxTokens    int // 0: not given
	Temperature  *float64
	TopP         *float64
	N            int
	Stream       bool
	IncludeUsage bool
	Stop         []string
	Seed         *int64
	User         string
	// vLLM extensions the gRPC path maps onto sampling parameters.
	IgnoreEOS    bool
	StopTokenIDs []uint32
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

// scanBody splits a request body into its top-level fields. JSON text is UTF-8 (RFC 8259 §8.1)
// and engines reject anything else (vLLM's json.loads fails on it); decoding would silently
// turn bad bytes into U+FFFD and route a prompt the engine never sees, so invalid UTF-8 is a
// 400.
func scanBody(body []byte) (map[string]json.RawMessage, *Error) {
	if !utf8.Valid(body) {
		return nil, BadRequest("", "request body is not valid UTF-8")
	}
	raw := make(map[string]json.RawMessage, 8)
	if err := scanObject(body, func(k string, v []byte) { raw[k] = v }); err != nil {
		// Let encoding/json describe what is wrong (the slow path only for bad bodies).
		var probe map[string]json.RawMessage
		if jerr := json.Unmarshal(body, &probe); jerr != nil {
			return nil, BadRequest("", "invalid JSON body: "+jsonErrText(jerr))
		}
		return nil, BadRequest("", "request body must be a JSON object")
	}
	return raw, nil
}

func parseModel(raw map[string]json.RawMessage) (string, *Error) {
	var m string
	if v, ok := raw["model"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &m); err != nil {
			return "", BadRequest("model", "model must be a string")
		}
	}
	return m, nil
}

// samplingFields parse the Sampling fields in this order (stream before stream_options, which
// depends on it); the first invalid one is reported.
var samplingFields = []struct {
	name  string
	parse func(s *Sampling, v []byte, lim Limits) *Error
}{
	{"max_tokens", (*Sampling).parseMaxTokens},
	{"n", (*Sampling).parseN},
	{"temperature", (*Sampling).parseTemperature},
	{"top_p", (*Sampling).parseTopP},
	{"seed", (*Sampling).parseSeed},
	{"stream", (*Sampling).parseStream},
	{"stream_options", (*Sampling).parseStreamOptions},
	{"stop", (*Sampling).parseStop},
	{"user", (*Sampling).parseUser},
	{"ignore_eos", (*Sampling).parseIgnoreEOS},
	{"stop_token_ids", (*Sampling).parseStopTokenIDs},
}

// parse fills s from the raw fields; absent and null fields keep their defaults.
func (s *Sampling) parse(raw map[string]json.RawMessage, lim Limits) *Error {
	return s.parseExcept(raw, lim, "")
}

// parseExcept is parse without the field named except (chat requests check stream_options
// with vLLM's own rule).
func (s *Sampling) parseExcept(raw map[string]json.RawMessage, lim Limits, except string) *Error {
	s.N = 1
	for _, f := range samplingFields {
		if f.name == except {
			continue
		}
		if v, ok := raw[f.name]; ok && !isNull(v) {
			if err := f.parse(s, v, lim); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Sampling) parseMaxTokens(v []byte, _ Limits) *Error {
	n, err := parseInt(v)
	switch {
	case err != nil:
		return BadRequest("max_tokens", "max_tokens must be an integer")
	case n < 1:
		return BadRequest("max_tokens", fmt.Sprintf("max_tokens must be at least 1, got %d", n))
	case n > MaxTokensLimit:
		return BadRequest("max_tokens", fmt.Sprintf("max_tokens must be at most %d, got %d", MaxTokensLimit, n))
	}
	s.MaxTokens = int(n)
	return nil
}

func (s *Sampling) parseN(v []byte, lim Limits) *Error {
	n, err := parseInt(v)
	switch {
	case err != nil:
		return BadRequest("n", "n must be an integer")
	case n < 1:
		return BadRequest("n", "n must be at least 1")
	case lim.MaxN > 0 && n > int64(lim.MaxN):
		return BadRequest("n", fmt.Sprintf("n must be at most %d, got %d", lim.MaxN, n))
	}
	s.N = int(n)
	return nil
}

func (s *Sampling) parseTemperature(v []byte, _ Limits) *Error {
	f, err := parseFloat(v)
	if err != nil || f < 0 || f > 2 {
		return BadRequest("temperature", "temperature must be a number between 0 and 2")
	}
	s.Temperature = &f
	return nil
}

func (s *Sampling) parseTopP(v []byte, _ Limits) *Error {
	f, err := parseFloat(v)
	if err != nil || f <= 0 || f > 1 {
		return BadRequest("top_p", "top_p must be a number in (0, 1]")
	}
	s.TopP = &f
	return nil
}

func (s *Sampling) parseSeed(v []byte, _ Limits) *Error {
	n, err := parseInt(v)
	if err != nil {
		return BadRequest("seed", "seed must be an integer")
	}
	s.Seed = &n
	return nil
}

func (s *Sampling) parseStream(v []byte, _ Limits) *Error {
	if err := json.Unmarshal(v, &s.Stream); err != nil {
		return BadRequest("stream", "stream must be a boolean")
	}
	return nil
}

func (s *Sampling) parseStreamOptions(v []byte, _ Limits) *Error {
	if !s.Stream {
		return BadRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	var so struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	if err := json.Unmarshal(v, &so); err != nil {
		return BadRequest("stream_options", "stream_options must be an object with a boolean include_usage")
	}
	s.IncludeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	return nil
}

func (s *Sampling) parseStop(v []byte, _ Limits) *Error {
	var one string
	if err := json.Unmarshal(v, &one); err == nil {
		s.Stop = []string{one}
	} else if err := json.Unmarshal(v, &s.Stop); err != nil {
		return BadRequest("stop", "stop must be a string or a list of strings")
	}
	if len(s.Stop) > MaxStops {
		return BadRequest("stop", fmt.Sprintf("at most %d stop sequences are allowed", MaxStops))
	}
	if slices.Contains(s.Stop, "") {
		return BadRequest("stop", "stop sequences must not be empty")
	}
	return nil
}

func (s *Sampling) parseUser(v []byte, _ Limits) *Error {
	if err := json.Unmarshal(v, &s.User); err != nil {
		return BadRequest("user", "user must be a string")
	}
	return nil
}

func (s *Sampling) parseIgnoreEOS(v []byte, _ Limits) *Error {
	if err := json.Unmarshal(v, &s.IgnoreEOS); err != nil {
		return BadRequest("ignore_eos", "ignore_eos must be a boolean")
	}
	return nil
}

func (s *Sampling) parseStopTokenIDs(v []byte, _ Limits) *Error {
	ids, err := ParseTokenArray(v)
	if err != nil {
		return BadRequest("stop_token_ids", "stop_token_ids must be a list of token ids")
	}
	s.StopTokenIDs = ids
	return nil
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
			ids, err := ParseTokenArray(l)
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
		ids, err := ParseTokenArray(v)
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
// gateway's token ids (one list per prompt). Keys are written in sorted order.
func (r *CompletionRequest) AppendUpstream(dst []byte, model string, tokens [][]uint32) []byte {
	return appendFields(dst, r.raw, model, func(dst []byte, k string) ([]byte, bool) {
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

// appendFields writes raw as a JSON object in sorted key order with "model" set to model (added
// when absent); replace may write another key's value itself (returning true).
func appendFields(dst []byte, raw map[string]json.RawMessage, model string, replace func(dst []byte, key string) ([]byte, bool)) []byte {
	keys := make([]string, 0, len(raw)+1)
	for k := range raw {
		keys = append(keys, k)
	}
	if _, ok := raw["model"]; !ok {
		keys = append(keys, "model")
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, k)
		dst = append(dst, ':')
		if k == "model" {
			dst = AppendString(dst, model)
			continue
		}
		var done bool
		if dst, done = replace(dst, k); !done {
			dst = append(dst, raw[k]...)
		}
	}
	return append(dst, '}')
}
