package engine

import (
	"strings"
	"testing"
)

func TestModelRewriter(t *testing.T) {
	rw := newModelRewriter("eng/7b", "gw")
	tests := []struct {
		name, in, want string
	}{
		{"compact", `{"id":"c","model":"eng/7b","choices":[]}`, `{"id":"c","model":"gw","choices":[]}`},
		{"spaces", `{"id": "c", "model" : "eng/7b", "choices": []}`, `{"id": "c", "model" : "gw", "choices": []}`},
		{"first key", `{"model":"eng/7b"}`, `{"model":"gw"}`},
		{"sse data line", "data: {\"model\":\"eng/7b\",\"choices\":[]}\n", "data: {\"model\":\"gw\",\"choices\":[]}\n"},
		{"inside a string first", `{"choices":[{"text":"{\"model\":\"eng/7b\"}"}],"model":"eng/7b"}`, `{"choices":[{"text":"{\"model\":\"eng/7b\"}"}],"model":"gw"}`},
		{"key ending in model", `{"a\"model":"eng/7b","model":"eng/7b"}`, `{"a\"model":"eng/7b","model":"gw"}`},
		{"prefix of a longer name", `{"model":"eng/7b-chat"}`, `{"model":"eng/7b-chat"}`},
		{"other name", `{"model":"other"}`, `{"model":"other"}`},
		{"no model", `{"id":"x"}`, `{"id":"x"}`},
		{"only the first", `{"model":"eng/7b","x":{"model":"eng/7b"}}`, `{"model":"gw","x":{"model":"eng/7b"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(rw.appendRewritten([]byte("pre|"), []byte(tt.in)))
			if want := "pre|" + tt.want; got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
	if newModelRewriter("same", "same") != nil || newModelRewriter("", "x") != nil {
		t.Error("a rewriter for equal or unknown names: got non-nil, want nil")
	}
	q := newModelRewriter(`e"q<`, "é")
	if got, want := string(q.appendRewritten(nil, []byte(`{"model":"e\"q<"}`))), `{"model":"é"}`; got != want {
		t.Errorf("escaped name: got %s, want %s", got, want)
	}
}

// TestSSERewriterAnySplit: however the stream is cut into reads, the output is the same.
func TestSSERewriterAnySplit(t *testing.T) {
	rw := newModelRewriter("eng", "gw")
	in := "data: {\"id\":\"1\",\"model\":\"eng\",\"choices\":[{\"text\":\"a\"}]}\n\n: comment model\n" +
		"data: {\"id\":\"2\",\"model\":\"eng\"}\n\ndata: [DONE]\n\n"
	want := strings.ReplaceAll(in, `"model":"eng"`, `"model":"gw"`)
	for i := 0; i <= len(in); i++ {
		for _, j := range []int{i, (i + len(in)) / 2} {
			s := &sseRewriter{r: rw}
			var got []byte
			got = append(got, s.feed([]byte(in[:i]))...)
			got = append(got, s.feed([]byte(in[i:j]))...)
			got = append(got, s.feed([]byte(in[j:]))...)
			got = append(got, s.rest()...)
			if string(got) != want {
				t.Fatalf("split at %d,%d: got %q, want %q", i, j, got, want)
			}
		}
	}
	// A partial last line (no newline) is rewritten by rest.
	s := &sseRewriter{r: rw}
	if got := s.feed([]byte(`data: {"model":"eng"}`)); len(got) != 0 {
		t.Errorf("partial line written early: %q", got)
	}
	if got, want := string(s.rest()), `data: {"model":"gw"}`; got != want {
		t.Errorf("rest: got %q, want %q", got, want)
	}
}
