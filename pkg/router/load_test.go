package router

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRequestLoadAccounting: a request holds its blocks on the chosen worker from the pick,
// as prefill still to do until the first piece of the response arrives and as active KV until
// it ends (policy cost weighs both), and releases everything when it ends.
func TestRequestLoadAccounting(t *testing.T) {
	fw := newFakeWorker(t, "m")
	first, rest := make(chan struct{}), make(chan struct{})
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		select { // hold the prefill until the test has looked
		case <-first:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-rest:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
	g := newTestGateway(t, testConfig{}, fw.url())
	w := g.rt.Fleet().Workers()[0]
	type counts struct{ InFlight, Prefill, Active int64 }
	read := func() counts { return counts{w.InFlight(), w.PendingPrefill(), w.ActiveBlocks()} }

	// 40 byte tokens: 2 full blocks of 16, none cached anywhere.
	done := make(chan string, 1)
	go func() {
		resp, err := g.srv.Client().Post(g.srv.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"`+strings.Repeat("x", 40)+`","stream":true}`))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	g.waitFor(t, "the request is in flight", func() bool { return read().InFlight == 1 })
	if diff := cmp.Diff(counts{1, 2, 2}, read()); diff != "" {
		t.Errorf("before the first token (-want +got):\n%s", diff)
	}
	close(first)
	g.waitFor(t, "the prefill released at the first token", func() bool { return read().Prefill == 0 })
	if diff := cmp.Diff(counts{1, 0, 2}, read()); diff != "" {
		t.Errorf("after the first token (-want +got):\n%s", diff)
	}
	close(rest)
	select {
	case body := <-done:
		if !strings.Contains(body, "[DONE]") {
			t.Errorf("got body %q, want a complete stream", body)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("the request did not end")
	}
	g.waitFor(t, "everything released", func() bool { return read() == counts{} })
}
