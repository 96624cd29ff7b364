package parse

import "bytes"

// Marker matching shared by the stages. Every stage keeps its undecided input in a buffer
// and looks at it with markerAt: a full marker is consumed, a proper prefix of a marker at
// the end of the buffer is held until more text (or the end of output) decides it, and
// anything else is ordinary text. Holding only such prefixes is what keeps a half-received
// marker out of content.

const (
	noMatch = iota
	partMatch
	fullMatch
)

// markerAt reports whether b starts with m (fullMatch), is a proper prefix of m (partMatch),
// or neither.
func markerAt(b []byte, m string) int {
	if len(b) >= len(m) {
		if string(b[:len(m)]) == m {
			return fullMatch
		}
		return noMatch
	}
	if string(b) == m[:len(b)] {
		return partMatch
	}
	return noMatch
}

// anyMarkerAt returns the index of the marker fully at the start of b (or -1) and whether b
// is a proper prefix of one of them.
func anyMarkerAt(b []byte, ms []string) (full int, part bool) {
	full = -1
	for i, m := range ms {
		switch markerAt(b, m) {
		case fullMatch:
			return i, false
		case partMatch:
			part = true
		}
	}
	return full, part
}

// skipSpace returns the number of leading JSON/ASCII whitespace bytes of b.
func skipSpace(b []byte) int {
	i := 0
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// indexAny2 returns the index of the first byte of b that is c1 or c2, or -1.
func indexAny2(b []byte, c1, c2 byte) int {
	if c1 == c2 {
		return bytes.IndexByte(b, c1)
	}
	for i, c := range b {
		if c == c1 || c == c2 {
			return i
		}
	}
	return -1
}

// stripStage removes special-token strings that the engine's own detokenizer would not have
// shown (end-of-turn and EOS tokens) from text decoded with special tokens kept.
type stripStage struct {
	tokens []string
	first  [256]bool
	buf    []byte
	out    []byte
}

func newStripStage(tokens []string) *stripStage {
	s := &stripStage{}
	for _, t := range tokens {
		if t != "" {
			s.tokens = append(s.tokens, t)
			s.first[t[0]] = true
		}
	}
	return s
}

func (s *stripStage) hasCandidate(text string) bool {
	for i := 0; i < len(text); i++ {
		if s.first[text[i]] {
			return true
		}
	}
	return false
}

// run returns text with the tokens removed; a trailing prefix of a token is held back.
func (s *stripStage) run(text string, eof bool) string {
	if len(s.buf) == 0 && !s.hasCandidate(text) {
		return text
	}
	s.buf = append(s.buf, text...)
	s.out = s.out[:0]
	b := s.buf
	i := 0
	for i < len(b) {
		if !s.first[b[i]] {
			s.out = append(s.out, b[i])
			i++
			continue
		}
		full, part := anyMarkerAt(b[i:], s.tokens)
		if full >= 0 {
			i += len(s.tokens[full])
			continue
		}
		if part && !eof {
			break
		}
		s.out = append(s.out, b[i])
		i++
	}
	n := copy(s.buf, b[i:])
	s.buf = s.buf[:n]
	return string(s.out)
}
