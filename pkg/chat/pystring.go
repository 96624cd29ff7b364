package chat

import (
	"strings"
	"unicode"
)

// Python string helpers.

// pyIsSpace is Python's str.isspace for one code point: Unicode White_Space plus the
// separators U+001C–U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyStrip is Python's str.strip() without arguments.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pyRStrip is Python's str.rstrip() without arguments.
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }
