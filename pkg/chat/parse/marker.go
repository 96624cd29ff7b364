package parse

import "bytes"

// Marker matching shared by the stages. Every stage keeps its undecided input in a buffer
// and looks at it with markerAt (or, for text it passes on between markers, a markerSet's
// next): a full marker is consumed, a proper prefix of a marker at the end of the buffer is
// held until more text (or the end of output) decides it, and anything else is ordinary text.
// Holding only such prefixes is what keeps a half-received marker out of content.

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

// markerSet is the markers a stage stops at in text it otherwise passes on (content, raw
// arguments, a call header), each step reading the head of its buffer with next. The markers
// start with at most two distinct bytes, so the text between them is found with one scan.
type markerSet struct {
	ms     []string
	c1, c2 byte // the bytes the markers start with (equal when they share one)
}

// newMarkerSet returns the set of ms; it panics when they start with more than two bytes.
func newMarkerSet(ms ...string) *markerSet {
	s := &markerSet{ms: ms, c1: ms[0][0], c2: ms[0][0]}
	for _, m := range ms[1:] {
		switch {
		case m[0] == s.c1 || m[0] == s.c2:
		case s.c1 == s.c2:
			s.c2 = m[0]
		default:
			panic("parse: a markerSet's markers start with more than two bytes")
		}
	}
	return s
}

// next reads the head of b (not empty) and answers one of:
//   - marker >= 0: b starts with ms[marker] (text is 0);
//   - text > 0: b[:text] is ordinary text, either a run up to the next byte a marker starts
//     with (b[0] is then none of them) or that one byte alone when it starts no marker, or
//     only a prefix of one at the end of output;
//   - text == 0, marker < 0: b is a proper prefix of a marker and more input decides it
//     (never with eof).
func (s *markerSet) next(b []byte, eof bool) (text, marker int) {
	j := indexAny2(b, s.c1, s.c2)
	if j < 0 {
		return len(b), -1
	}
	if j > 0 {
		return j, -1
	}
	full, part := anyMarkerAt(b, s.ms)
	switch {
	case full >= 0:
		return 0, full
	case part && !eof:
		return 0, -1
	}
	return 1, -1
}

// starts reports whether c is a byte one of the markers starts with: for a head of text that
// next found, whether it is a lone such byte rather than a run.
func (s *markerSet) starts(c byte) bool { return c == s.c1 || c == s.c2 }

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
