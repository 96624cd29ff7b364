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

// TestResponseModelIsTheRequestedName: the worker calls the model "engine-7b", the gateway
// serves it as "test-model"; clients get "test-model" back, streaming or not.
func TestResponseModelIsTheRequestedName(t *testing.T) {
	fw := newFakeWorker(t, "engine-7b")
	g := newTestGateway(t, testConfig{}, fw.url())
	g.waitFor(t, "model discovered", func() bool { return g.rt.Fleet().Workers()[0].ReportedModel() == "engine-7b" })

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
