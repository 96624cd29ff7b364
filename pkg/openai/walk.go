package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Walking the nested values of a validated body (chat messages, content parts, tools): the
// readers below trust that scanBody validated the JSON.

// jsonString decodes a raw JSON string value (false for anything else). Bodies were
// validated by the scanner, so a string without escapes is its bytes between the quotes.
func jsonString(v []byte) (string, bool) {
	v = bytes.TrimSpace(v)
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// firstByte is the first non-space byte of a raw value (0 for an empty one).
func firstByte(v []byte) byte {
	if i := skipWS(v, 0); i < len(v) {
		return v[i]
	}
	return 0
}

func isTrue(v []byte) bool { return string(bytes.TrimSpace(v)) == "true" }

func isEmptyObject(v []byte) bool {
	v = bytes.TrimSpace(v)
	return len(v) >= 2 && v[0] == '{' && skipWS(v, 1) == len(v)-1
}

var errStop = fmt.Errorf("stop")

// eachElem calls fn with each element of the validated JSON array v until fn returns
// false; it then returns errStop.
func eachElem(v []byte, fn func(elem []byte) bool) error {
	i := skipWS(v, 0)
	if i >= len(v) || v[i] != '[' {
		return errJSON
	}
	i = skipWS(v, i+1)
	if i < len(v) && v[i] == ']' {
		return nil
	}
	for {
		if i >= len(v) {
			return errJSON
		}
		end := skipTrusted(v, i)
		if !fn(v[i:end]) {
			return errStop
		}
		i = skipWS(v, end)
		if i >= len(v) {
			return errJSON
		}
		if v[i] == ']' {
			return nil
		}
		if v[i] != ',' {
			return errJSON
		}
		i = skipWS(v, i+1)
	}
}

// countElems counts the elements of a JSON array, to size slices.
func countElems(v []byte) int {
	n := 0
	_ = eachElem(v, func([]byte) bool { n++; return true })
	return n
}

// jsonDepth is the deepest nesting of arrays and objects in b (strings skipped). It does
// not validate.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = skipString(b, i) - 1
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// The chat parser walks nested values of a body that scanBody has already validated, often
// several levels deep (body → messages → message → content parts), so nested values are
// skipped with the trusted scanners below, which only find where a value ends: strings are
// crossed with bytes.IndexByte instead of byte by byte. They must only see validated JSON.

// skipString returns the end of the string starting at b[i] (after its closing quote), or
// len(b) when it is not terminated.
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipTrusted returns the end of the validated JSON value starting at b[i].
func skipTrusted(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

// eachMember calls fn with each key (unescaped) and raw value of the validated JSON object v.
func eachMember(v []byte, fn func(key string, val []byte)) {
	i := skipWS(v, 0)
	if i >= len(v) || v[i] != '{' {
		return
	}
	i = skipWS(v, i+1)
	for i < len(v) && v[i] == '"' {
		kend := skipString(v, i)
		key, _ := jsonString(v[i:kend])
		i = skipWS(v, kend)
		if i >= len(v) || v[i] != ':' {
			return
		}
		i = skipWS(v, i+1)
		if i >= len(v) {
			return
		}
		vend := skipTrusted(v, i)
		fn(key, v[i:vend])
		i = skipWS(v, vend)
		if i >= len(v) || v[i] != ',' {
			return
		}
		i = skipWS(v, i+1)
	}
}
