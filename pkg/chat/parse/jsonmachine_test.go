package parse

import (
	"strings"
	"testing"
)

// canon runs the re-formatter over one JSON value fed byte by byte.
func canon(text string, ascii bool) (string, bool) {
	m := jsonMachine{ascii: ascii, limit: 1 << 20}
	m.reset()
	var out []byte
	for i := 0; i < len(text); i++ {
		n, ev := m.feed([]byte{text[i]})
		out = append(out, m.out...)
		m.out = m.out[:0]
		if ev == jErr {
			return string(out), false
		}
		if ev == jDone && n == 0 { // a number ended by this byte: the rest must be space
			if strings.TrimLeft(text[i:], " \t\r\n") != "" {
				return string(out), false
			}
			break
		}
		if ev == jDone {
			if strings.TrimLeft(text[i+1:], " \t\r\n") != "" {
				return string(out), false
			}
			break
		}
	}
	ok := m.end()
	out = append(out, m.out...)
	return string(out), ok
}

// The wanted texts are Python's: json.dumps(json.loads(text), ensure_ascii=...), run with
// CPython 3 when the table was written.
func TestJSONCanonPython(t *testing.T) {
	tests := []struct {
		in, want string
		ascii    bool
	}{
		{"0.1", "0.1", false},
		{"1e16", "1e+16", false},
		{"1e15", "1000000000000000.0", false},
		{"123456789.123", "123456789.123", false},
		{"1e-5", "1e-05", false},
		{"0.0001", "0.0001", false},
		{"5e-324", "5e-324", false},
		{"1.7976931348623157e308", "1.7976931348623157e+308", false},
		{"2.5e-7", "2.5e-07", false},
		{"100", "100", false},
		{"100.0", "100.0", false},
		{"1e22", "1e+22", false},
		{"12345678901234567.0", "1.2345678901234568e+16", false},
		{"-1.5e-10", "-1.5e-10", false},
		{"1e400", "Infinity", false},
		{"-1e400", "-Infinity", false},
		{"0.5e1", "5.0", false},
		{"9007199254740993.0", "9007199254740992.0", false},
		{"1.0000000000000002", "1.0000000000000002", false},
		{"-0.0", "-0.0", false},
		{"-0", "0", false},
		{"1E+2", "100.0", false},
		{"0.000123456", "0.000123456", false},
		{"123456789012345678901234567890", "123456789012345678901234567890", false},
		{"NaN", "NaN", false},
		{"-Infinity", "-Infinity", false},
		{`"\u007f\u2028<>&'\u0000\u001f"`, `"\u007f\u2028<>&'\u0000\u001f"`, true},
		{`"\u007f\u2028<>&'\u0000\u001f"`, "\"\x7f\u2028<>&'\\u0000\\u001f\"", false},
		{`"\ud83d\ude00\u00e9"`, `"\ud83d\ude00\u00e9"`, true},
		{`"\ud83d\ude00\u00e9"`, `"😀é"`, false},
		{`"😀é"`, `"\ud83d\ude00\u00e9"`, true},
		{`"\b\f\n\r\t\/\\\""`, `"\b\f\n\r\t/\\\""`, false},
		{`"\u0008\u000C"`, `"\b\f"`, false},
		{` { "a" : [ 1 , { } , [ ] ] , "b":null } `, `{"a": [1, {}, []], "b": null}`, false},
		{`{"a":1,"a":2}`, `{"a": 1, "a": 2}`, false}, // json.loads gives {"a": 2}: see vllmdiff.go
		{`"\ud800\ud800\udc00"`, `"\ud800\ud800\udc00"`, true},
		{`"\ud800x"`, `"\ud800x"`, false},
	}
	for _, tt := range tests {
		got, ok := canon(tt.in, tt.ascii)
		if !ok || got != tt.want {
			t.Errorf("canon(%s, ascii=%v) = %q, %v; want %q", tt.in, tt.ascii, got, ok, tt.want)
		}
	}
}

// Python's json.loads rejects all of these (strict strings, no trailing commas, no leading
// zeros, int() refuses more than 4300 digits).
func TestJSONCanonRejects(t *testing.T) {
	for _, in := range []string{
		"01", "1.", ".5", "+1", "1e", "1e+", "-", "[1,]", `{"a":1,}`, `{"a" 1}`, `"\x"`, "\"\t\"",
		"tru", "nan", "[1 2]", "{'a':1}", `{"a":}`, "[", `"abc`, `"\u12"`, "-infinity",
		strings.Repeat("7", 4301),
		strings.Repeat("[", maxJSONDepth+1),
	} {
		if got, ok := canon(in, false); ok {
			t.Errorf("canon(%.40q) accepted as %q, want rejected", in, got)
		}
	}
	if _, ok := canon(strings.Repeat("7", 4300), false); !ok {
		t.Errorf("4300-digit int rejected, want accepted")
	}
}
