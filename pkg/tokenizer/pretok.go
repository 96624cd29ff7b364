package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Pre-tokenizer split patterns, implemented by hand. Each matcher answers "does the pattern match
// at byte offset i of s, and where does that match end" (-1: no match at i), with the leftmost-first
// alternation and backtracking semantics of Oniguruma, which Hugging Face tokenizers uses for
// Split and ByteLevel pre-tokenizers. The scan loop (splitIsolated) turns that into onig's
// find_iter: non-matching stretches between matches become pieces of their own ("Isolated").
//
// Every matcher only ever looks at s, never past it: in a Sequence of pre-tokenizers each Split
// runs on the pieces of the previous one, so `(?!\S)` sees the end of the piece.

// Known patterns, exactly as they appear in tokenizer.json (after JSON decoding).
const (
	// Qwen2 / Qwen2.5 / Qwen3.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3 / 3.1 / 3.2 / 3.3 (and the OpenAI cl100k pattern it copies).
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// o200k (gpt-oss, GPT-4o).
	patternO200K = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-2: what the ByteLevel pre-tokenizer uses with use_regex=true.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// DeepSeek V3 / R1 / V2: three Splits in a Sequence.
	patternDigits3 = `\p{N}{1,3}`
	patternDSCJK   = "[一-龥぀-ゟ゠-ヿ]+"
	patternDSMain  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	// The same DeepSeek pattern with \r and \n written as regex escapes rather than raw characters.
	patternDSMainEsc = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)

// matcher reports the end of the pattern's match starting at s[i], or -1.
type matcher func(s string, i int) int

// finder reports the first match at or after from as [start, end), or start -1. Patterns whose
// matches are rare in ordinary text have one, so the scan can skip over text quickly instead of
// trying the matcher at every rune.
type finder func(s string, from int) (start, end int)

// knownFinders maps a Split regex to a fast finder, when it has one.
var knownFinders = map[string]finder{
	patternDigits3: findDigits3,
	patternDSCJK:   findDSCJK,
}

// findDigits3 is the finder of `\p{N}{1,3}`.
func findDigits3(s string, from int) (int, int) {
	for i := from; i < len(s); {
		b := s[i]
		if b < 0x80 {
			if b >= '0' && b <= '9' {
				return i, matchDigits3(s, i)
			}
			i++
			continue
		}
		c, n := classAt(s, i)
		if c&cNumber != 0 {
			return i, matchDigits3(s, i)
		}
		i += n
	}
	return -1, 0
}

// findDSCJK is the finder of patternDSCJK: every code point of it is encoded as E3..E9 xx xx.
func findDSCJK(s string, from int) (int, int) {
	for i := from; i < len(s); i++ {
		if b := s[i]; b >= 0xE3 && b <= 0xE9 {
			if e := matchDSCJK(s, i); e > i {
				return i, e
			}
		}
	}
	return -1, 0
}

// knownPatterns maps a Split regex to its hand-written matcher.
var knownPatterns = map[string]matcher{
	patternQwen2:     matchQwen2,
	patternLlama3:    matchLlama3,
	patternGPT2:      matchGPT2,
	patternO200K:     matchO200K,
	patternDigits3:   matchDigits3,
	patternDSCJK:     matchDSCJK,
	patternDSMain:    matchDSMain,
	patternDSMainEsc: matchDSMain,
}

// runOf returns the end of the run of runes starting at s[i] whose class has any bit of mask.
func runOf(s string, i int, mask class) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClass[b]&mask == 0 {
				break
			}
			i++
			continue
		}
		c, n := classAtMultibyte(s, i)
		if c&mask == 0 {
			break
		}
		i += n
	}
	return i
}

// runNot returns the end of the run of runes starting at s[i] whose class has no bit of mask.
func runNot(s string, i int, mask class) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClass[b]&mask != 0 {
				break
			}
			i++
			continue
		}
		c, n := classAtMultibyte(s, i)
		if c&mask != 0 {
			break
		}
		i += n
	}
	return i
}

// crlfRun skips `[\r\n]*`.
func crlfRun(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at s[i-1]. With fold (the
// (?i:...) form), letters match under Unicode simple case folding as Oniguruma does it: either
// ASCII case, and U+017F LATIN SMALL LETTER LONG S for 's' (it folds to "s"; no other code point
// folds to a letter of these suffixes). Checked against the reference by the "'ſ" golden cases.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) {
		return -1
	}
	if fold && strings.HasPrefix(s[i:], "\u017f") {
		return i + 2
	}
	lower := func(b byte) byte {
		if fold && b >= 'A' && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && lower(s[i+1]) == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && lower(s[i+1]) == 'l' {
			return i + 2
		}
	}
	return -1
}

// matchSpaces implements `\s*[\r\n]+|\s+(?!\S)|\s+` at a whitespace rune s[i].
func matchSpaces(s string, i int) int {
	j, last, lastNL := i, i, -1
	for j < len(s) {
		c, n := classAt(s, j)
		if c&cSpace == 0 {
			break
		}
		if c&cCRLF != 0 {
			lastNL = j + n
		}
		last = j
		j += n
	}
	switch {
	case lastNL >= 0: // \s*[\r\n]+ : \s* backtracks to the last \r or \n of the run
		return lastNL
	case j == len(s): // \s+(?!\S) at the end of the piece
		return j
	case last > i: // \s+(?!\S) gives back one rune, which is whitespace
		return last
	default: // \s+
		return j
	}
}

// cl100kDigits maps the patterns matchCL100K implements to its maxDigits.
var cl100kDigits = map[string]int{patternQwen2: 1, patternLlama3: 3}

func matchQwen2(s string, i int) int  { return matchCL100K(s, i, 1) }
func matchLlama3(s string, i int) int { return matchCL100K(s, i, 3) }

// matchCL100K implements patternQwen2 (maxDigits 1) and patternLlama3 (maxDigits 3).
func matchCL100K(s string, i int, maxDigits int) int {
	b := s[i]
	// classAt by hand for ASCII (most pieces are ASCII words, and classAt is not inlined).
	c, n := asciiClass[b&(utf8.RuneSelf-1)], 1
	if b >= utf8.RuneSelf {
		c, n = classAtMultibyte(s, i)
	}
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if b == '\'' {
		if e := contraction(s, i+1, true); e >= 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&cLetter != 0 {
		return runOf(s, i+n, cLetter)
	}
	if c&(cCRLF|cNumber) == 0 && i+n < len(s) {
		b2 := s[i+n]
		c2, n2 := asciiClass[b2&(utf8.RuneSelf-1)], 1
		if b2 >= utf8.RuneSelf {
			c2, n2 = classAtMultibyte(s, i+n)
		}
		if c2&cLetter != 0 {
			return runOf(s, i+n+n2, cLetter)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c&cNumber != 0 {
		e := i + n
		for k := 1; k < maxDigits && e < len(s); k++ {
			c2, n2 := classAt(s, e)
			if c2&cNumber == 0 {
				break
			}
			e += n2
		}
		return e
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if b == ' ' {
		j++
	}
	if j < len(s) {
		if c2, n2 := classAt(s, j); c2&(cSpace|cLetter|cNumber) == 0 {
			return crlfRun(s, runNot(s, j+n2, cSpace|cLetter|cNumber))
		}
	}
	if c&cSpace != 0 {
		return matchSpaces(s, i)
	}
	return -1
}

// matchGPT2 implements patternGPT2.
func matchGPT2(s string, i int) int {
	b := s[i]
	if b == '\'' {
		if e := contraction(s, i+1, false); e >= 0 {
			return e
		}
	}
	j := i
	if b == ' ' {
		j++
	}
	if j < len(s) {
		c2, n2 := classAt(s, j)
		switch {
		case c2&cLetter != 0:
			return runOf(s, j+n2, cLetter)
		case c2&cNumber != 0:
			return runOf(s, j+n2, cNumber)
		case c2&cSpace == 0:
			return runNot(s, j+n2, cSpace|cLetter|cNumber)
		}
	}
	c, _ := classAt(s, i)
	if c&cSpace == 0 {
		return -1
	}
	// \s+(?!\S)|\s+
	k, last := i, i
	for k < len(s) {
		c, n := classAt(s, k)
		if c&cSpace == 0 {
			break
		}
		last = k
		k += n
	}
	if k < len(s) && last > i {
		return last
	}
	return k
}

// matchDigits3 implements `\p{N}{1,3}`.
func matchDigits3(s string, i int) int {
	e := i
	for k := 0; k < 3 && e < len(s); k++ {
		c, n := classAt(s, e)
		if c&cNumber == 0 {
			break
		}
		e += n
	}
	if e == i {
		return -1
	}
	return e
}

func isDSCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FA5) || (r >= 0x3040 && r <= 0x30FF)
}

// matchDSCJK implements `[一-龥぀-ゟ゠-ヿ]+` (U+4E00..U+9FA5, U+3040..U+309F, U+30A0..U+30FF).
func matchDSCJK(s string, i int) int {
	e := i
	for e < len(s) && s[e] >= 0xE3 && s[e] <= 0xE9 { // all of these ranges are 3-byte E3..E9 xx xx
		r, n := decodeRune(s, e)
		if !isDSCJK(r) {
			break
		}
		e += n
	}
	if e == i {
		return -1
	}
	return e
}

func isASCIIPunct(b byte) bool {
	return (b >= '!' && b <= '/') || (b >= ':' && b <= '@') || (b >= '[' && b <= '`') || (b >= '{' && b <= '~')
}

func isASCIILetter(b byte) bool { return (b|0x20) >= 'a' && (b|0x20) <= 'z' }

// matchDSMain implements patternDSMain.
func matchDSMain(s string, i int) int {
	b := s[i]
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if isASCIIPunct(b) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		e := i + 2
		for e < len(s) && isASCIILetter(s[e]) {
			e++
		}
		return e
	}
	c, n := classAt(s, i)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if c&(cCRLF|cLetter|cPunct|cSymbol) == 0 && i+n < len(s) {
		if c2, n2 := classAt(s, i+n); c2&(cLetter|cMark) != 0 {
			return runOf(s, i+n+n2, cLetter|cMark)
		}
	}
	if c&(cLetter|cMark) != 0 {
		return runOf(s, i+n, cLetter|cMark)
	}
	// ` ?[\p{P}\p{S}]+[\r\n]*`
	j := i
	if b == ' ' {
		j++
	}
	if j < len(s) {
		if c2, n2 := classAt(s, j); c2&(cPunct|cSymbol) != 0 {
			return crlfRun(s, runOf(s, j+n2, cPunct|cSymbol))
		}
	}
	if c&cSpace != 0 {
		return matchSpaces(s, i)
	}
	return -1
}

// o200kLower1 matches `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+` at s[j]:
// the greedy upper run backtracks to the last rune that can start the lower run.
func o200kLower1(s string, j int) int {
	u := runOf(s, j, cUpperish)
	if u < len(s) {
		if c, _ := classAt(s, u); c&cLowerish != 0 {
			return runOf(s, u, cLowerish)
		}
	}
	// Backtrack: the lower run starts at the last rune of [j, u) that is lower-ish, and cannot
	// extend past it (the runes after it up to u are not lower-ish, nor is s[u]).
	end := -1
	for k := j; k < u; {
		c, n := classAt(s, k)
		if c&cLowerish != 0 {
			end = k + n
		}
		k += n
	}
	return end
}

// o200kUpper matches `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*` at s[j].
func o200kUpper(s string, j int) int {
	u := runOf(s, j, cUpperish)
	if u == j {
		return -1
	}
	return runOf(s, u, cLowerish)
}

// optContraction matches `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` at s[e].
func optContraction(s string, e int) int {
	if e < len(s) && s[e] == '\'' {
		if c := contraction(s, e+1, true); c >= 0 {
			return c
		}
	}
	return e
}

// matchO200K implements patternO200K.
func matchO200K(s string, i int) int {
	c, n := classAt(s, i)
	optPrefix := c&(cLetter|cNumber|cCRLF) == 0 // [^\r\n\p{L}\p{N}]
	for _, word := range [2]func(string, int) int{o200kLower1, o200kUpper} {
		if optPrefix && i+n < len(s) {
			if e := word(s, i+n); e >= 0 {
				return optContraction(s, e)
			}
		}
		if e := word(s, i); e >= 0 {
			return optContraction(s, e)
		}
	}
	// \p{N}{1,3}
	if c&cNumber != 0 {
		return matchDigits3(s, i)
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
	j := i
	if s[i] == ' ' {
		j++
	}
	if j < len(s) {
		if c2, n2 := classAt(s, j); c2&(cSpace|cLetter|cNumber) == 0 {
			e := runNot(s, j+n2, cSpace|cLetter|cNumber)
			for e < len(s) && (s[e] == '\r' || s[e] == '\n' || s[e] == '/') {
				e++
			}
			return e
		}
	}
	if c&cSpace != 0 {
		return matchSpaces(s, i)
	}
	return -1
}
