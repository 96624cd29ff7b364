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
