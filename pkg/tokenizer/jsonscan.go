package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// A minimal JSON scanner for the large parts of tokenizer.json (the model's vocab and merges,
// hundreds of thousands of entries). It is kept over encoding/json because the library is about
// twice as slow on the real files even when it is spared the merges (BenchmarkParseTokenizerJSON,
// median of 3 on the 2-core CI machine: Qwen3's 11 MB file 50 ms vs 105 ms, Gemma 3's 33 MB
// file 141 ms vs 275 ms, with similar allocations), and tokenizers are loaded at every gateway
// start and many times over by the golden tests. Everything small is still decoded with
// encoding/json, from the spans this scanner finds. It validates what it reads and reports
// errors with byte offsets.

type jscan struct {
	data []byte
	pos  int
}

var errJSONEnd = errors.New("unexpected end of JSON")

func (s *jscan) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: offset %d: %s", ErrMalformed, s.pos, fmt.Sprintf(format, args...))
}

func (s *jscan) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte without consuming it (0 at the end).
func (s *jscan) peek() byte {
	s.ws()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *jscan) expect(b byte) error {
	if s.peek() != b {
		if s.pos >= len(s.data) {
			return s.errorf("%v, want %q", errJSONEnd, b)
		}
		return s.errorf("found %q, want %q", s.data[s.pos], b)
	}
	s.pos++
	return nil
}

// str reads a string value.
func (s *jscan) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.pos
	plain := true
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			raw := s.data[start:s.pos]
			s.pos++
			if plain && utf8.Valid(raw) {
				return string(raw), nil
			}
			var out string
			if err := json.Unmarshal(s.data[start-1:s.pos], &out); err != nil {
				return "", fmt.Errorf("%w: offset %d: %w", ErrMalformed, start, err)
			}
			return out, nil
		case c == '\\':
			plain = false
			s.pos += 2
		case c < 0x20:
			return "", s.errorf("control character in string")
		default:
			s.pos++
		}
	}
	return "", s.errorf("%v in string", errJSONEnd)
}

// uint reads a non-negative integer that fits in 32 bits.
func (s *jscan) uint() (uint32, error) {
	s.ws()
	start := s.pos
	var v uint64
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		v = v*10 + uint64(s.data[s.pos]-'0')
		if v > 1<<32-1 {
			return 0, s.errorf("number out of range")
		}
		s.pos++
	}
	if s.pos == start {
		return 0, s.errorf("want a non-negative integer")
	}
	if s.pos < len(s.data) {
		if c := s.data[s.pos]; c == '.' || c == 'e' || c == 'E' {
			return 0, s.errorf("want an integer")
		}
	}
	return uint32(v), nil
}

// maxDepth bounds the nesting of skipped values (recursion).
const maxDepth = 512

// skip consumes one value of any kind and returns its span.
func (s *jscan) skip() ([]byte, error) {
	s.ws()
	start := s.pos
	err := s.skipValue(0)
	return s.data[start:s.pos], err
}

func (s *jscan) skipValue(depth int) error {
	if depth > maxDepth {
		return s.errorf("nesting deeper than %d", maxDepth)
	}
	switch s.peek() {
	case '"':
		_, err := s.str()
		return err
	case '{':
		return s.object(func(string) error { return s.skipValue(depth + 1) })
	case '[':
		return s.array(func() error { return s.skipValue(depth + 1) })
	case 0:
		return s.errorf("%v", errJSONEnd)
	}
	start := s.pos
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			goto end
		}
		s.pos++
	}
end:
	if !json.Valid(s.data[start:s.pos]) {
		return s.errorf("invalid value %q", s.data[start:s.pos])
	}
	return nil
}

// object calls field for each key of an object; field must consume the value.
func (s *jscan) object(field func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array calls elem for each element of an array; elem must consume the element.
func (s *jscan) array(elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// parseTokenizerJSON splits tokenizer.json into its top-level fields, decoding the model's vocab
// and merges with the scanner and everything else with encoding/json.
func parseTokenizerJSON(data []byte) (*fileJSON, *modelJSON, error) {
	s := &jscan{data: data}
	var f fileJSON
	var m *modelJSON
	err := s.object(func(key string) error {
		if key == "model" {
			if s.peek() == 'n' {
				_, err := s.skip()
				return err
			}
			var err error
			m, err = s.model()
			return err
		}
		span, err := s.skip()
		if err != nil {
			return err
		}
		var dst any
		switch key {
		case "added_tokens":
			dst = &f.AddedTokens
		case "normalizer":
			dst = &f.Normalizer
		case "pre_tokenizer":
			dst = &f.PreTokenizer
		case "post_processor":
			dst = &f.PostProcessor
		case "decoder":
			dst = &f.Decoder
		default:
			return nil
		}
		if err := json.Unmarshal(span, dst); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrMalformed, key, err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if s.peek() != 0 {
		return nil, nil, s.errorf("data after the top-level object")
	}
	return &f, m, nil
}

// merges reads the model's merges: "a b" strings (older files) or ["a", "b"] pairs.
func (s *jscan) merges(m *modelJSON) error {
	return s.array(func() error {
		if s.peek() == '"' { // "a b"
			line, err := s.str()
			if err != nil {
				return err
			}
			m.mergeLines = append(m.mergeLines, line)
			return nil
		}
		var pair [2]string
		n := 0
		err := s.array(func() error {
			if n == 2 {
				return s.errorf("merge with more than two tokens")
			}
			var err error
			pair[n], err = s.str()
			n++
			return err
		})
		if err == nil && n != 2 {
			err = s.errorf("merge with %d tokens", n)
		}
		m.mergePairs = append(m.mergePairs, pair)
		return err
	})
}

func (s *jscan) model() (*modelJSON, error) {
	m := &modelJSON{}
	err := s.object(func(key string) error {
		switch key {
		case "vocab":
			if s.peek() != '{' {
				// Unigram models have a list here; keep it for the type check.
				span, err := s.skip()
				m.rawVocab = span
				return err
			}
			m.Vocab = make(map[string]uint32, 1<<16)
			return s.object(func(tok string) error {
				id, err := s.uint()
				if err != nil {
					return err
				}
				m.Vocab[tok] = id
				return nil
			})
		case "merges":
			m.hasMerges = true
			return s.merges(m)
		}
		span, err := s.skip()
		if err != nil {
			return err
		}
		var dst any
		switch key {
		case "type":
			dst = &m.Type
		case "dropout":
			dst = &m.Dropout
		case "continuing_subword_prefix":
			dst = &m.ContinuingSubwordPrefix
		case "end_of_word_suffix":
			dst = &m.EndOfWordSuffix
		case "byte_fallback":
			dst = &m.ByteFallback
		case "fuse_unk":
			dst = &m.FuseUnk
		case "unk_token":
			dst = &m.UnkToken
		case "ignore_merges":
			dst = &m.IgnoreMerges
		default:
			return nil
		}
		if err := json.Unmarshal(span, dst); err != nil {
			return fmt.Errorf("%w: model.%s: %w", ErrMalformed, key, err)
		}
		return nil
	})
	return m, err
}
