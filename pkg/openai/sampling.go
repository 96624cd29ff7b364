package openai

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Limits of the sampling fields that are not user-configurable.
const (
	// MaxStops is the largest number of stop strings accepted.
	MaxStops = 16
	// MaxTokensLimit is the largest max_tokens accepted: anything above is a typo or abuse, far
	// beyond any engine's context window.
	MaxTokensLimit = 1 << 20
)

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
	// Priority is vLLM's priority (lower runs first; nil: not given), the gateway's admission
	// band when no x-kvgate-priority header names one.
	Priority *int64
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
	{"priority", (*Sampling).parsePriority},
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

func (s *Sampling) parsePriority(v []byte, _ Limits) *Error {
	n, err := parseInt(v)
	if err != nil {
		return BadRequest("priority", "priority must be an integer")
	}
	s.Priority = &n
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
	ids, err := parseTokenArray(v)
	if err != nil {
		return BadRequest("stop_token_ids", "stop_token_ids must be a list of token ids")
	}
	s.StopTokenIDs = ids
	return nil
}
