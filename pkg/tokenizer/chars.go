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
type class uint16

const (
	cLetter class = 1 << iota
	cNumber
	cSpace
	cPunct
	cSymbol
	cMark
	cCRLF     // '\r' or '\n'
	cUpperish // Lu, Lt, Lm, Lo or M: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] of the o200k pattern
	cLowerish // Ll, Lm, Lo or M: [\p{Ll}\p{Lm}\p{Lo}\p{M}] of the o200k pattern
)

// bmpClass holds the class bits of every code point of the Basic Multilingual Plane; code points
// above it are classified with the unicode tables on each call (rare in practice).
var (
	bmpClassOnce sync.Once
	bmpClass     *[0x10000]class
	// asciiClass repeats the first 128 entries of bmpClass, for the ASCII fast paths of the
	// matchers' loops (classAt itself is just over the inlining budget).
	asciiClass [utf8.RuneSelf]class
)

func initClasses() {
	bmpClassOnce.Do(func() {
		t := new([0x10000]class)
		for r := rune(0); r < 0x10000; r++ {
			t[r] = computeClass(r)
		}
		copy(asciiClass[:], t[:utf8.RuneSelf])
		bmpClass = t
	})
}

func computeClass(r rune) class {
	var c class
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
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cUpperish
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cLowerish
	}
	return c
}

// classAt returns the class bits and byte length of the rune starting at s[i]. s must be valid
// UTF-8 (Encode checks that before splitting).
func classAt(s string, i int) (class, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	return classAtMultibyte(s, i)
}

// classAtMultibyte is classAt for a rune that is not ASCII.
func classAtMultibyte(s string, i int) (class, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return bmpClass[r], n
	}
	return computeClass(r), n
}
