package openai

import (
	"encoding/binary"
	"testing"
)

// TestSpecialJSONByte checks the eight-bytes-at-a-time test against the byte-by-byte one for
// every byte value at every position, among plain bytes and beside other special ones.
func TestSpecialJSONByte(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	for _, fill := range []byte{'a', ' ', '~', 0x21, 0x5b, 0x7f, 0x00, 0xff, '"'} {
		for pos := range 8 {
			for c := range 256 {
				w := make([]byte, 8)
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				want := false
				for _, x := range w {
					want = want || special(x)
				}
				if got := specialJSONByte(binary.LittleEndian.Uint64(w)); got != want {
					t.Fatalf("specialJSONByte(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
}
