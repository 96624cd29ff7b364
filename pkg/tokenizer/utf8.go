package tokenizer

import "unicode/utf8"

func decodeRune(s string, i int) (rune, int) { return utf8.DecodeRuneInString(s[i:]) }

// invalidPrefix returns how many bytes at the start of b form one "maximal subpart" of an
// ill-formed UTF-8 sequence (Unicode §3.9, what Rust's String::from_utf8_lossy and Python's
// errors="replace" turn into one U+FFFD), given that b does not start with a complete valid rune.
// incomplete reports that b ends before the sequence could be decided: more bytes might complete
// it into a valid rune.
func invalidPrefix(b []byte) (n int, incomplete bool) {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the first continuation byte
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead >= 0xE1 && lead <= 0xEC, lead == 0xEE, lead == 0xEF:
		need = 2
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	case lead == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, false
	}
	i := 1
	for ; i <= need; i++ {
		if i >= len(b) {
			return i, true
		}
		c := b[i]
		if i == 1 {
			if c < lo || c > hi {
				return 1, false
			}
		} else if c < 0x80 || c > 0xBF {
			return i, false
		}
	}
	// A complete valid rune; callers only ask after utf8 rejected it, so this is unreachable.
	return i, false
}

// appendLossy appends src to dst as valid UTF-8, replacing each maximal ill-formed subpart with
// U+FFFD. When final is false, an incomplete sequence at the very end of src is left unconsumed
// (it may be completed by later bytes); consumed tells how many bytes of src were used.
func appendLossy(dst []byte, src []byte, final bool) (out []byte, consumed int) {
	i := 0
	for i < len(src) {
		// Copy the longest valid stretch at once.
		j := i
		for j < len(src) {
			if src[j] < utf8.RuneSelf {
				j++
				continue
			}
			r, n := utf8.DecodeRune(src[j:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			j += n
		}
		dst = append(dst, src[i:j]...)
		i = j
		if i == len(src) {
			break
		}
		n, incomplete := invalidPrefix(src[i:])
		if incomplete && !final {
			return dst, i
		}
		dst = append(dst, "\uFFFD"...)
		i += n
	}
	return dst, i
}
