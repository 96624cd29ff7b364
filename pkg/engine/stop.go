package engine

import (
	"strings"
	"unicode/utf8"
)

// stopText applies a request's stop strings to text the gateway detokenized itself, as vLLM's
// incremental detokenizer does for its own output (vllm/v1/engine/detokenizer.py): the engine
// stops generating when a stop string appears, but the token ids it returns still spell the stop
// string, so the gateway cuts the text before it; while streaming it holds back the last
// (longest stop − 1) bytes, which might be the start of a stop string, until the next text or
// the end decides (vLLM holds back characters; the bytes held here end on a character boundary,
// so the text emitted is the same, only the chunking can differ). The zero value, with no
// stops, passes text through.
type stopText struct {
	stops   []string
	hold    int
	pending string
	stopped bool
}

func newStopText(stops []string) stopText {
	s := stopText{stops: stops}
	for _, st := range stops {
		s.hold = max(s.hold, len(st)-1)
	}
	return s
}

// add returns the part of the text so far that is final: before the first stop string, and
// short of a possible stop prefix at the end. After a stop string nothing more is returned.
func (s *stopText) add(text string) string {
	if s.stopped {
		return ""
	}
	if len(s.stops) == 0 {
		return text
	}
	s.pending += text
	if i := s.firstStop(); i >= 0 {
		out := s.pending[:i]
		s.pending, s.stopped = "", true
		return out
	}
	cut := len(s.pending) - s.hold
	for cut > 0 && cut < len(s.pending) && !utf8.RuneStart(s.pending[cut]) {
		cut--
	}
	if cut <= 0 {
		return ""
	}
	out := s.pending[:cut]
	s.pending = s.pending[cut:]
	return out
}

// flush returns what is held at the end of the generation.
func (s *stopText) flush() string {
	out := s.pending
	s.pending = ""
	return out
}

func (s *stopText) firstStop() int {
	first := -1
	for _, st := range s.stops {
		if i := strings.Index(s.pending, st); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	return first
}
