package chat

import (
	"testing"
)

// TestDecodeJSON checks json.loads's rules on nested containers (whose members and items
// share the decoder's stacks), repeated keys, common and escaped strings, and numbers, by
// printing the values as tojson does.
func TestDecodeJSON(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"a": [{"b": [1, {"c": []}], "d": {}}, [[], [{"e": "f"}]], "type"], "g": {"h": [null]}}`,
			`{"a": [{"b": [1, {"c": []}], "d": {}}, [[], [{"e": "f"}]], "type"], "g": {"h": [null]}}`},
		{`{"k":1,"j":[2,3],"k":{"x":"string","x":"integer"}}`, `{"k": {"x": "integer"}, "j": [2, 3]}`},
		{`["type", "typ\u0065", "\u00e9\n", "", "object"]`, `["type", "type", "é\n", "", "object"]`},
		// Python's json.dumps(json.loads(in)): integers beyond int64 stay exact.
		{` [1, -0, 2.50, 1e2, -1E-7, 9223372036854775807, 9223372036854775808, -9223372036854775809, 123456789012345678901234567890] `,
			`[1, 0, 2.5, 100.0, -1e-07, 9223372036854775807, 9223372036854775808, -9223372036854775809, 123456789012345678901234567890]`},
		{`{"type": {"type": "type"}}`, `{"type": {"type": "type"}}`},
	} {
		v, err := decodeJSON([]byte(tt.in))
		if err != nil {
			t.Errorf("decodeJSON(%s): %v", tt.in, err)
			continue
		}
		var anc ancestors
		got, err := appendTojson(nil, v, &anc)
		if err != nil || string(got) != tt.want {
			t.Errorf("decodeJSON(%s): got %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{`{"a":1,}`, `[1,]`, `{"a" 1}`, `[1 2]`, `{"a":[}`, `"\x01"`, `01`, `{"a":1}x`} {
		if _, err := decodeJSON([]byte(in)); err == nil {
			t.Errorf("decodeJSON(%s): no error", in)
		}
	}
	// The decoder's stacks are reused: a failed decode leaves nothing behind.
	if v, err := decodeJSON([]byte(`[[1, 2], {"a": 3}]`)); err != nil || v.String() != "[[1, 2], {'a': 3}]" {
		t.Errorf("after errors: got %v, %v", v, err)
	}
}
