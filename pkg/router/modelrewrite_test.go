package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// TestResponseModelIsTheRequestedName: the worker calls the model "engine-7b", the gateway
// serves it as "test-model"; clients get "test-model" back, streaming or not.
func TestResponseModelIsTheRequestedName(t *testing.T) {
	fw := newFakeWorker(t, "engine-7b")
	g := newTestGateway(t, Config{}, fw.url())
	g.waitFor(t, "model discovered", func() bool { return g.rt.Workers()[0].ReportedModel() == "engine-7b" })

	t.Run("json", func(t *testing.T) {
		resp, body := g.post(t, `{"model":"test-model","prompt":"hi"}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %s", resp.StatusCode, body)
		}
		if got := fw.nextReq(t)["model"]; got != "engine-7b" {
			t.Errorf("upstream model: got %v, want engine-7b", got)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if out["model"] != "test-model" {
			t.Errorf("response model: got %v, want test-model", out["model"])
		}
		if got, want := resp.Header.Get("Content-Length"), strconv.Itoa(len(body)); got != want {
			t.Errorf("Content-Length: got %s, want %s", got, want)
		}
	})

	t.Run("sse", func(t *testing.T) {
		fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			for i := 0; i < 3; i++ {
				ev := fmt.Sprintf("data: {\"id\":\"c\",\"object\":\"text_completion\",\"model\":%q,\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", body["model"], i)
				// Cut each event inside the model value so the gateway must join reads.
				cut := strings.Index(ev, "engine") + 3
				io.WriteString(w, ev[:cut])
				rc.Flush()
				io.WriteString(w, ev[cut:])
				rc.Flush()
			}
			io.WriteString(w, "data: [DONE]\n\n")
		}
		defer func() { fw.handle = nil }()
		resp, body := g.post(t, `{"prompt":"hi","stream":true}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %s", resp.StatusCode, body)
		}
		data := sseData(body)
		var models []any
		for _, d := range data[:len(data)-1] {
			var ev map[string]any
			if err := json.Unmarshal([]byte(d), &ev); err != nil {
				t.Fatalf("chunk %q: %v", d, err)
			}
			models = append(models, ev["model"])
		}
		if d := cmp.Diff([]any{"test-model", "test-model", "test-model"}, models); d != "" {
			t.Errorf("chunk models (-want +got):\n%s", d)
		}
		if got := data[len(data)-1]; got != "[DONE]" {
			t.Errorf("last event: got %q, want [DONE]", got)
		}
	})
}
