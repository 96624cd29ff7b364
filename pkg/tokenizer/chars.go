package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Character classes used by the pre-tokenizer patterns. They follow Oniguruma (the regex engine
// of Hugging Face tokenizers) with UTF-8 encoding:
//   - \s is U+0009..U+000D, U+0085 and the categories Zs, Zl, Zp, which is the same set as Go's
//     unicode.IsSpace (the Unicode White_Space property);
//   - \p{L}, \p{N}, \p{M}, \p{P}, \p{S} are the Unicode general categories.
const (
	cLetter uint8 = 1 << iota
	cNumber
	cSpace
	cPunct
	cSymbol
	cMark
	cCRLF // '\r' or '\n'
)

// bmpClass holds the class bits of every code point of the Basic Multilingual Plane; code points
// above it are classified with the unicode tables on each call (rare in practice).
var (
	bmpClassOnce sync.Once
	bmpClass     *[0x10000]uint8
)

func initClasses() {
	bmpClassOnce.Do(func() {
		t := new([0x10000]uint8)
		for r := rune(0); r < 0x10000; r++ {
			t[r] = computeClass(r)
		}
		bmpClass = t
	})
}

func computeClass(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c |= cLetter
	case unicode.IsNumber(r):
		c |= cNumber
	case unicode.IsPunct(r):
		c |= cPunct
	case unicode.IsSymbol(r):
		c |= cSymbol
	case unicode.IsMark(r):
		c |= cMark
	}
	if unicode.IsSpace(r) {
		c |= cSpace
	}
	if r == '\r' || r == '\n' {
		c |= cCRLF
	}
	return c
}

// classAt returns the class bits and byte length of the rune starting at s[i]. s must be valid
// UTF-8 (Encode checks that before splitting).
func classAt(s string, i int) (uint8, int) {
	b := s[i]
	if b < utf8.RuneSelf {
		return bmpClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return bmpClass[r], n
	}
	return computeClass(r), n
}
