package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// twoClassServer answers completions as a gateway under overload would: interactive requests
// (band 0) stream; batch requests (band 10) are refused 429, refused 503, fail 500 or stream,
// in turn. Its /metrics counts 1 hit of 4 queried tokens per request served.
type twoClassServer struct {
	mu sync.Mutex // guards the fields below
	// bands counts the requests by the body's priority field (-1: absent) and max_tokens.
	bands        map[[2]int]int
	batch        int
	served       int
	sawKVHeaders bool
}

func (s *twoClassServer) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Priority  *int `json:"priority"`
			MaxTokens int  `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		band := -1
		if b.Priority != nil {
			band = *b.Priority
		}
		s.mu.Lock()
		s.bands[[2]int{band, b.MaxTokens}]++
		s.sawKVHeaders = s.sawKVHeaders || r.Header.Get("x-kvgate-priority") != ""
		mode := 3
		if band == 10 {
			mode = s.batch % 4
			s.batch++
		}
		if mode == 3 {
			s.served++
		}
		s.mu.Unlock()
		switch mode {
		case 0:
			http.Error(w, `{"error":{"message":"queue full","type":"rate_limit_exceeded"}}`, http.StatusTooManyRequests)
			return
		case 1:
			http.Error(w, `{"error":{"message":"queue timeout"}}`, http.StatusServiceUnavailable)
			return
		case 2:
			http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range b.MaxTokens {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" x\"}]}\n\n")
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", b.MaxTokens)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		n := s.served
		s.mu.Unlock()
		fmt.Fprintf(w, "vllm:prefix_cache_queries_total %d\nvllm:prefix_cache_hits_total %d\n", 4*n, n)
	})
	return mux
}

// TestTwoClass: each class is sent at its band in the body's priority field and reported
// apart; refusals (429, 503) are counted apart from the other errors, and all three are lost.
func TestTwoClass(t *testing.T) {
	s := &twoClassServer{bands: map[[2]int]int{}}
	srv := httptest.NewServer(s.handler(t))
	defer srv.Close()
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	stdout, stderr, err := runLoadgen(t, "--url", srv.URL, "--model", "m", "--token-ids", "--workload", "two_class",
		"--arrival-time", "2s", "--time-scale", "0.01", "--seed", "3",
		"--interactive-rate", "20", "--interactive-output-tokens", "2", "--interactive-prefix-tokens", "8", "--interactive-suffix-tokens", "4",
		"--batch-rate", "20", "--batch-output-tokens", "3", "--batch-prefix-tokens", "16", "--batch-suffix-tokens", "4", "--batch-prefixes", "2",
		"--worker-metrics", srv.URL+"/metrics", "--json", jsonPath)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	rep := readReport(t, jsonPath)
	in, ba := rep.Classes[classInteractive], rep.Classes[classBatch]
	if in == nil || ba == nil {
		t.Fatalf("classes: got %v, want interactive and batch", rep.Classes)
	}
	if in.Requests < 10 || ba.Requests < 10 {
		t.Fatalf("requests: got %d interactive and %d batch, want about 40 of each (rate 20 over 2 s)", in.Requests, ba.Requests)
	}
	s.mu.Lock()
	bands, sawHeader := s.bands, s.sawKVHeaders
	s.mu.Unlock()
	if want := map[[2]int]int{{0, 2}: in.Requests, {10, 3}: ba.Requests}; !cmp.Equal(bands, want) {
		t.Errorf("requests by (priority field, max_tokens): got %v, want %v", bands, want)
	}
	if sawHeader {
		t.Errorf("x-kvgate-priority sent: want the band in the body's priority field only")
	}
	if in.Completed != in.Requests || in.lost() != 0 {
		t.Errorf("interactive: got %d completed and %d lost of %d, want all completed", in.Completed, in.lost(), in.Requests)
	}
	// Batch requests go 429, 503, 500, served, in turn.
	n := ba.Requests
	want := classReport{Requests: n, Sent: n, Refused429: (n + 3) / 4, Refused503: (n + 2) / 4, Errors: (n + 1) / 4, Completed: n / 4}
	got := classReport{Requests: ba.Requests, Sent: ba.Sent, Refused429: ba.Refused429, Refused503: ba.Refused503, Errors: ba.Errors, Completed: ba.Completed}
	if got != want {
		t.Errorf("batch outcomes: got %+v, want %+v", got, want)
	}
	if ba.OutputTokens != int64(3*ba.Completed) || in.OutputTokens != int64(2*in.Completed) {
		t.Errorf("output tokens: got interactive %d and batch %d, want 2 and 3 per completed request", in.OutputTokens, ba.OutputTokens)
	}
	if !(ba.RequestsPerS > 0) || !(in.TTFTms.P95 > 0) || in.TTFTms.P95 < in.TTFTms.P50 {
		t.Errorf("batch req/s %v, interactive TTFT p50 %v p95 %v: want positive and ordered", ba.RequestsPerS, in.TTFTms.P50, in.TTFTms.P95)
	}
	if rep.Errors != ba.lost() || rep.Completed != in.Completed+ba.Completed {
		t.Errorf("run: got %d errors and %d completed, want the classes' %d and %d", rep.Errors, rep.Completed, ba.lost(), in.Completed+ba.Completed)
	}
	if rep.HitRate == nil || *rep.HitRate != 0.25 {
		t.Errorf("fleet hit rate: got %v, want 0.25", rep.HitRate)
	}
	if rep.IdealHitRate == nil || *rep.IdealHitRate <= 0 {
		t.Errorf("ideal hit rate: got %v, want > 0 (shared prefixes)", rep.IdealHitRate)
	}
	if !strings.Contains(stdout, "interactive  0 ") || !strings.Contains(stdout, "batch        10 ") {
		t.Errorf("stdout lacks the class table:\n%s", stdout)
	}
}

// TestTwoClassFlags: the two_class flags are checked before anything is sent.
func TestTwoClassFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--interactive-rate", "0", "--batch-rate", "0"},
		{"--arrival-time", "0s"},
		{"--batch-prefixes", "0"},
		{"--interactive-output-tokens", "0"},
		{"--batch-rate", "1e9", "--arrival-time", "1h"},
	} {
		_, _, err := runLoadgen(t, append([]string{"--url", "http://127.0.0.1:1", "--model", "m", "--token-ids", "--workload", "two_class"}, args...)...)
		if err == nil {
			t.Errorf("%q: got nil error, want one", args)
		}
	}
}
