package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

func TestCompletionProxyNonStreaming(t *testing.T) {
	fw := newFakeWorker(t, "engine-name")
	g := newTestGateway(t, testConfig{}, fw.url())
	req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"model":"test-model","prompt":"hi there","max_tokens":5,"temperature":0.5,"logprobs":null,"user":"u1"}`))
	req.Header.Set("X-Request-Id", "req-7")
	req.Header.Set("Authorization", "Bearer client-key")
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(bb)
	h := <-fw.headers
	if h.Get("X-Request-Id") != "req-7" || h.Get("Authorization") != "" {
		t.Errorf("forwarded headers: got request id %q, authorization %q; want req-7 and none", h.Get("X-Request-Id"), h.Get("Authorization"))
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status: got %d, want 200 (body %s)", resp.StatusCode, body)
	}
	got := fw.nextReq(t)
	// The worker receives the client's fields with the model renamed to the worker's own name.
	want := map[string]any{"model": "engine-name", "prompt": "hi there", "max_tokens": 5.0, "temperature": 0.5, "logprobs": nil, "user": "u1"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("upstream body (-want +got):\n%s", d)
	}
	if got, want := resp.Header.Get(pipeline.HeaderWorker), fw.url(); got != want {
		t.Errorf("%s: got %q, want %q", pipeline.HeaderWorker, got, want)
	}
	if got := resp.Header.Get(pipeline.HeaderMatchedBlocks); got != "0" {
		t.Errorf("%s: got %q, want 0", pipeline.HeaderMatchedBlocks, got)
	}
	var out openai.Completion
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Choices) != 1 || out.Choices[0].Text != "hello" || out.Usage.PromptTokensDetails.CachedTokens != 2 {
		t.Errorf("response: got %+v", out)
	}
}

func TestCompletionForwardTokenIDs(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{ForwardTokenIDs: true}, fw.url())
	tests := []struct {
		name, body string
		want       any
	}{
		{"text", `{"prompt":"ab"}`, []any{97.0, 98.0}},
		{"token ids", `{"prompt":[5,6,7]}`, []any{5.0, 6.0, 7.0}},
		{"list of strings", `{"prompt":["a","bc"]}`, []any{[]any{97.0}, []any{98.0, 99.0}}},
		{"list of token lists", `{"prompt":[[1],[2,3]]}`, []any{[]any{1.0}, []any{2.0, 3.0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := g.post(t, tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d, want 200 (%s)", resp.StatusCode, body)
			}
			got := fw.nextReq(t)
			if d := cmp.Diff(tt.want, got["prompt"]); d != "" {
				t.Errorf("forwarded prompt (-want +got):\n%s", d)
			}
		})
	}
}

// sseHandler streams n chunks, waiting on gate before each one after the first (when set).
func sseHandler(n int, gate chan struct{}) func(w http.ResponseWriter, r *http.Request, body map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for i := 0; i < n; i++ {
			if i > 0 && gate != nil {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\",\"finish_reason\":null}]}\n\n", i)
			rc.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
		rc.Flush()
	}
}

func TestCompletionStreamingFlushesEachChunk(t *testing.T) {
	fw := newFakeWorker(t, "m")
	gate := make(chan struct{})
	fw.handle = sseHandler(3, gate)
	g := newTestGateway(t, testConfig{}, fw.url())
	req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","stream":true,"stream_options":{"include_usage":true}}`))
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type: got %q, want text/event-stream", ct)
	}
	br := bufio.NewReader(resp.Body)
	var got []string
	for i := 0; i < 3; i++ {
		// Each chunk must arrive before the worker is allowed to send the next one.
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		got = append(got, strings.TrimSpace(line))
		if _, err := br.ReadString('\n'); err != nil { // blank line
			t.Fatal(err)
		}
		if i < 2 {
			gate <- struct{}{}
		}
	}
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "data: [DONE]") {
		t.Errorf("stream end: got %q, want data: [DONE]", rest)
	}
	if !strings.Contains(got[2], `"t2"`) {
		t.Errorf("third chunk: got %q", got[2])
	}
	if body := fw.nextReq(t); body["stream"] != true {
		t.Errorf("upstream stream flag: got %v", body["stream"])
	}
}

func TestCompletionMidStreamFailureSendsErrorEvent(t *testing.T) {
	fw := newFakeWorker(t, "m")
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\ndata: {\"choi")
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the worker dies mid-event
	}
	g := newTestGateway(t, testConfig{}, fw.url())
	resp, body := g.post(t, `{"prompt":"x","stream":true}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status: got %d, want 200", resp.StatusCode)
	}
	data := sseData(body)
	if len(data) < 2 {
		t.Fatalf("events: got %q, want a chunk then an error event", body)
	}
	last := data[len(data)-1]
	e := openAIError(t, last)
	if e.Type != openai.TypeUpstream {
		t.Errorf("error type: got %q, want %q", e.Type, openai.TypeUpstream)
	}
	if strings.Contains(body, "[DONE]") {
		t.Errorf("stream after failure: got [DONE], want the error event to end it")
	}
	if !strings.Contains(body, "\n\ndata: {\"error\"") {
		t.Errorf("error event is not on its own event boundary: %q", body)
	}
}

func TestCompletionRetryOnNextWorker(t *testing.T) {
	bad := newFakeWorker(t, "m")
	good := newFakeWorker(t, "m")
	p := &fixedPolicy{}
	// Health checks after the first one are an hour apart: the failure is the request's to find.
	g := newTestGateway(t, testConfig{Policy: p, HealthInterval: time.Hour}, bad.url(), good.url())
	// The first worker now refuses connections: the request must be retried on the second.
	bad.srv.Close()
	resp, body := g.post(t, `{"prompt":"hello"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status: got %d, want 200 (%s)", resp.StatusCode, body)
	}
	if got := resp.Header.Get(pipeline.HeaderWorker); got != good.url() {
		t.Errorf("worker: got %q, want %q", got, good.url())
	}
	if got := resp.Header.Get(pipeline.HeaderReason); got != "retry" {
		t.Errorf("reason: got %q, want retry", got)
	}
	good.nextReq(t)
	p.mu.Lock()
	calls := len(p.calls)
	retryCands := len(p.calls[calls-1])
	p.mu.Unlock()
	if calls != 2 || retryCands != 1 {
		t.Errorf("policy calls: got %d (last with %d candidates), want 2, the retry without the failed worker", calls, retryCands)
	}
	// The refused worker is marked down at once, so the next request goes straight to the good one.
	if g.rt.Fleet().Workers()[0].Healthy() {
		t.Errorf("refused worker still healthy")
	}
	resp, _ = g.post(t, `{"prompt":"hello"}`)
	if got := resp.Header.Get(pipeline.HeaderReason); got == "retry" {
		t.Errorf("second request: got reason retry, want a direct pick")
	}
}

func TestCompletionRetryOn5xxThenGiveUp(t *testing.T) {
	a := newFakeWorker(t, "m")
	b := newFakeWorker(t, "m")
	fail := func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		http.Error(w, "engine exploded", http.StatusInternalServerError)
	}
	a.handle, b.handle = fail, fail
	g := newTestGateway(t, testConfig{Policy: &fixedPolicy{}}, a.url(), b.url())
	resp, body := g.post(t, `{"prompt":"hello"}`)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status: got %d, want 502 (%s)", resp.StatusCode, body)
	}
	a.nextReq(t)
	b.nextReq(t) // retried exactly once on the other worker
	select {
	case <-a.reqs:
		t.Error("a third attempt was made")
	default:
	}
	if e := openAIError(t, body); !strings.Contains(e.Message, "500") {
		t.Errorf("message: got %q, want the upstream status", e.Message)
	}
}

func TestCompletionUpstream4xxPassesThrough(t *testing.T) {
	fw := newFakeWorker(t, "m")
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"engine says no","type":"invalid_request_error"}}`)
	}
	g := newTestGateway(t, testConfig{}, fw.url())
	resp, body := g.post(t, `{"prompt":"hello"}`)
	if resp.StatusCode != http.StatusBadRequest || openAIError(t, body).Message != "engine says no" {
		t.Errorf("got %d %s, want the engine's 400", resp.StatusCode, body)
	}
}

func TestCompletionClientDisconnectCancelsUpstream(t *testing.T) {
	fw := newFakeWorker(t, "m")
	upstreamDone := make(chan error, 1)
	started := make(chan struct{})
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: {}\n\n")
		http.NewResponseController(w).Flush()
		close(started)
		select {
		case <-r.Context().Done():
			upstreamDone <- r.Context().Err()
		case <-time.After(defaultTestTimeout):
			upstreamDone <- fmt.Errorf("upstream was never cancelled")
		}
	}
	g := newTestGateway(t, testConfig{}, fw.url())
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`))
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	select {
	case err := <-upstreamDone:
		if err != context.Canceled {
			t.Errorf("upstream context: got %v, want context.Canceled", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out")
	}
	g.waitFor(t, "in-flight back to 0", func() bool { return g.rt.Fleet().Workers()[0].InFlight() == 0 })
}
