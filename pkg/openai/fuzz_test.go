package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func FuzzParseCompletion(f *testing.F) {
	for _, s := range []string{`{"prompt":"a"}`, `{"prompt":[1,2]}`, `{"prompt":[[1],[2]]}`, `{"prompt":["a","b"],"n":2,"stop":"x"}`, `{"prompt":[ 1 , 2 ]}`, `{"prompt":[01]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ParseCompletion(b, Limits{MaxN: 4})
		if err != nil {
			if err.Status != 400 {
				t.Fatalf("status %d for a parse error", err.Status)
			}
			return
		}
		if len(req.Prompts) == 0 {
			t.Fatalf("accepted a request without prompts: %q", b)
		}
		for _, p := range req.Prompts {
			if p.IsTokens && len(p.Tokens) == 0 || !p.IsTokens && p.Text == "" {
				t.Fatalf("accepted an empty prompt: %q", b)
			}
		}
		// Re-encoding for a worker always yields valid JSON.
		out := req.AppendUpstream(nil, "m\"x", nil, nil)
		if !json.Valid(out) {
			t.Fatalf("upstream body is not JSON: %q", out)
		}
	})
}

// FuzzScanObject checks that the hand-written scanner accepts exactly the JSON objects
// encoding/json accepts, with the same members.
func FuzzScanObject(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1} `, `{"a":[1,2,{"b":null}],"c":"\u00e9\n"}`, `{"a":-0.5e+3}`, `{"a":01}`, `{"a":"\x"}`,
		`{"a":1,}`, `[1]`, `{"a":tru}`, `{"\u0061":"dup","a":2}`, `{"a":"` + "\xff" + `"}`, `{"a":1}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := map[string]string{}
		err := scanObject(b, func(k string, v []byte) { got[k] = string(v) })
		var want map[string]json.RawMessage
		jerr := json.Unmarshal(b, &want)
		if jerr == nil && want == nil {
			jerr = errJSON // "null" is valid JSON but not an object
		}
		if (err == nil) != (jerr == nil) {
			t.Fatalf("%q: scanner err %v, encoding/json err %v", b, err, jerr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: got %d members, want %d", b, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != string(v) {
				t.Fatalf("%q: member %q: got %q, want %q", b, k, got[k], v)
			}
		}
	})
}

// encodingJSONString is what AppendString must match: encoding/json with HTML escaping off.
func encodingJSONString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return string(bytes.TrimSuffix(b.Bytes(), []byte{'\n'}))
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote\back`, "\b\f\n\r\t\x00\x1f\x7f", "<a>&'", "café 日本 🎉", "\u2028\u2029", "bad\xffutf8\xc3", "e\u0301"} {
		if got, want := string(AppendString(nil, s)), encodingJSONString(s); got != want {
			t.Errorf("AppendString(%q): got %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"a", "\"\\", "\u2028", "\xff", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(AppendString(nil, s)), encodingJSONString(s); got != want {
			t.Fatalf("AppendString(%q): got %s, want %s", s, got, want)
		}
	})
}

// TestMarshalKeepsHTMLRaw: bodies keep '<', '>' and '&' raw, as the engines write them, and
// otherwise match encoding/json.
func TestMarshalKeepsHTMLRaw(t *testing.T) {
	v := struct {
		Content string `json:"content"`
		N       int    `json:"n"`
	}{"<tool_call>a & b</tool_call>", 3}
	b, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"content":"<tool_call>a & b</tool_call>","n":3}`; string(b) != want {
		t.Errorf("Marshal: got %s, want %s", b, want)
	}
}

// FuzzParseForm: any upload is a 400 or a form whose upstream body parses back into the same
// parts, model set.
func FuzzParseForm(f *testing.F) {
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n\x00\x01\r\n--b--\r\n"))
	f.Add([]byte("--b\r\n\r\n--b--"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseForm(b, "multipart/form-data; boundary=b", "/v1/audio/transcriptions")
		if err != nil {
			if err.Status != 400 {
				t.Fatalf("status %d", err.Status)
			}
			return
		}
		back, err := ParseForm(r.AppendUpstream(nil, "w"), r.ContentType(), r.Path)
		if err != nil {
			t.Fatalf("upstream body does not parse: %v", err)
		}
		want := len(r.form)
		if r.Model == "" && !hasModel(r) {
			want++
		}
		if len(back.form) != want || back.Model != "w" {
			t.Fatalf("upstream parts %d model %q, want %d and w", len(back.form), back.Model, want)
		}
	})
}

func hasModel(r *PassRequest) bool {
	for _, p := range r.form {
		if p.name == "model" {
			return true
		}
	}
	return false
}

// BenchmarkAppendString writes 16 KB of prompt-like text (ASCII, a quote, a newline and a
// non-ASCII word in each 500 bytes), as a Responses turn's chat body does.
func BenchmarkAppendString(b *testing.B) {
	s := strings.Repeat(strings.Repeat("the night train to marseille saves a hotel ", 11)+"\"they said\"\n café ", 32)
	b.SetBytes(int64(len(s)))
	buf := make([]byte, 0, 2*len(s))
	for b.Loop() {
		buf = AppendString(buf[:0], s)
	}
}
