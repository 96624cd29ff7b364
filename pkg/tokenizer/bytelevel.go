package tokenizer

// The GPT-2 byte-level alphabet: every byte is shown as one printable rune so that byte strings
// can live in a JSON vocabulary. Printable Latin-1 bytes map to themselves; the other 68 bytes
// map to U+0100 onwards in byte order (bytes_to_unicode in GPT-2's encoder.py).
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode maps a token string from the byte-level alphabet back to raw bytes. ok is false
// when some rune is not in the alphabet; the Hugging Face ByteLevel decoder then uses the token's
// own UTF-8 bytes, and so do callers.
func byteLevelDecode(tok string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(tok))
	for _, r := range tok {
		b, found := runeToByte[r]
		if !found {
			return nil, false
		}
		raw = append(raw, b)
	}
	return raw, true
}

// byteLevelEncode maps raw bytes to the byte-level alphabet.
func byteLevelEncode(raw string) string {
	out := make([]rune, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		out = append(out, byteToRune[raw[i]])
	}
	return string(out)
}
