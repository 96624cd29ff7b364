package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string literal exactly as encoding/json writes it with HTML
// escaping off (json.Encoder.SetEscapeHTML(false)), which is also how Python servers write
// non-ASCII text with ensure_ascii=False: '"' and '\\' escaped, \b \f \n \r \t in short form,
// other control characters as \u00XX, U+2028 and U+2029 as \u2028 and \u2029, each invalid UTF-8 byte as a raw U+FFFD (as
// encoding/json writes it since Go 1.27), everything else raw. It is the package's one JSON string writer (TestAppendString
// compares it with encoding/json).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight plain ASCII bytes at a time (no quote, backslash, control or non-ASCII byte):
		// prompt text is mostly that.
		for i+8 <= len(s) && !specialJSONByte(stringWord(s, i)) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// stringWord is the little-endian word of s[i:i+8] (the compiler makes it one load).
func stringWord(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// isNull reports whether a raw JSON value is null.
func isNull(v []byte) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

var errNotInt = errors.New("not an integer")

// parseInt accepts a JSON integer; an integral float like 5.0 is accepted too, as Python's JSON
// stack (which the engines use) does not tell them apart.
func parseInt(v []byte) (int64, error) {
	s := string(bytes.TrimSpace(v))
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, errNotInt
	}
	return int64(f), nil
}

var errNotNumber = errors.New("not a number")

// parseFloat accepts a finite JSON number.
func parseFloat(v []byte) (float64, error) {
	s := bytes.TrimSpace(v)
	if len(s) == 0 || s[0] == '"' {
		return 0, errNotNumber
	}
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errNotNumber
	}
	return f, nil
}

var errNotTokenID = errors.New("not a token id")

// parseTokenArray parses a JSON array of non-negative integers that fit in uint32 (token ids).
// It allocates only the result: a 1000-token prompt is the common case the gateway's latency
// budget is measured on.
func parseTokenArray(v []byte) ([]uint32, error) {
	v = bytes.TrimSpace(v)
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return nil, errNotTokenID
	}
	body := v[1 : len(v)-1]
	ids := make([]uint32, 0, len(body)/4+1)
	i := skipWS(body, 0)
	if i == len(body) {
		return ids, nil
	}
	for {
		i = skipWS(body, i)
		start := i
		var x uint64
		for i < len(body) && body[i] >= '0' && body[i] <= '9' {
			x = x*10 + uint64(body[i]-'0')
			if x > math.MaxUint32 {
				return nil, errNotTokenID
			}
			i++
		}
		if i == start || (i-start > 1 && body[start] == '0') {
			return nil, errNotTokenID
		}
		ids = append(ids, uint32(x))
		i = skipWS(body, i)
		if i == len(body) {
			return ids, nil
		}
		if body[i] != ',' {
			return nil, errNotTokenID
		}
		i++
	}
}

// AppendTokenArray appends ids as a JSON array.
func AppendTokenArray(b []byte, ids []uint32) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}

// Marshal encodes v as encoding/json does but without HTML escaping, as Python servers write
// their bodies (pydantic leaves '<', '>' and '&' raw): a model's "<tool_call>" stays readable
// and byte-comparable with the engine's own responses.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}
