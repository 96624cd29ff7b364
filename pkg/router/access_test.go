package router

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestAccessLog checks the access log's line for a routed request, its follow-up (whose
// cached tokens come from what the first one left in the approximate tree: the fake worker has
// no event stream), the client's own request id and a request refused at parse.
func TestAccessLog(t *testing.T) {
	fw := newFakeWorker(t, "test-model")
	core, logs := observer.New(zapcore.InfoLevel)
	g := newTestGateway(t, testConfig{AccessLog: zap.New(core)}, fw.url())
	prompt := strings.Repeat("cached prefix ", 8) // 112 byte tokens: 7 blocks of 16

	resp, body := g.post(t, `{"prompt":"`+prompt+`","max_tokens":1}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d %s", resp.StatusCode, body)
	}
	id := resp.Header.Get(HeaderRequestID)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id) {
		t.Errorf("drawn request id %q, want 16 hex digits", id)
	}
	req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"`+prompt+`","max_tokens":1}`))
	req.Header.Set(HeaderRequestID, "client-id-1")
	resp2, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if got := resp2.Header.Get(HeaderRequestID); got != "client-id-1" {
		t.Errorf("answer's request id %q, want the client's", got)
	}
	g.post(t, `{"prompt":""}`)

	lines := logs.FilterMessage("request").All()
	if len(lines) != 3 {
		t.Fatalf("%d access lines, want 3: %v", len(lines), lines)
	}
	first, second, bad := lines[0].ContextMap(), lines[1].ContextMap(), lines[2].ContextMap()
	want := map[string]any{"request_id": id, "method": "POST", "route": "/v1/completions", "model": "test-model", "worker": fw.url(),
		"attempts": int64(1), "prompt_tokens": int64(len(prompt)), "cached_tokens": int64(0), "status": int64(200)}
	for k, v := range want {
		if first[k] != v {
			t.Errorf("first line %s = %v, want %v (line %v)", k, first[k], v, first)
		}
	}
	if ttft, dur := first["ttft_ms"].(float64), first["duration_ms"].(float64); ttft <= 0 || dur < ttft {
		t.Errorf("first line ttft_ms %v duration_ms %v: want 0 < ttft <= duration", ttft, dur)
	}
	if second["request_id"] != "client-id-1" || second["cached_tokens"] != int64(7*16) || second["reason"] == "" {
		t.Errorf("second line %v: want the client's id and the 112 cached tokens the first request left", second)
	}
	if bad["status"] != int64(400) || bad["worker"] != "" || bad["model"] != "" || bad["ttft_ms"] != float64(0) {
		t.Errorf("refused line %v: want status 400, no model, worker or ttft", bad)
	}
}

// TestAccessLogOff checks that without an access log the answer carries no request id.
func TestAccessLogOff(t *testing.T) {
	fw := newFakeWorker(t, "test-model")
	g := newTestGateway(t, testConfig{}, fw.url())
	resp, body := g.post(t, `{"prompt":"hello","max_tokens":1}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderRequestID) != "" {
		t.Errorf("%d %s, X-Request-Id %q: want 200 and none", resp.StatusCode, body, resp.Header.Get(HeaderRequestID))
	}
}
