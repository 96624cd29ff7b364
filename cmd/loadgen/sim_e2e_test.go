package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/sim"
)

// exchange is one request to the simulator and its response, as the wire carried them.
type exchange struct {
	req  recvBody
	resp []byte
}

// recorder is a ResponseWriter that keeps a copy of what it writes; Unwrap lets
// http.ResponseController reach the real writer to flush.
type recorder struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.buf.Write(p)
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// chatSim is an in-process simulator of the Qwen3 model serving chat over HTTP with the
// model directory's template, replying with the start of a fixed English text, behind a
// recorder of every exchange.
type chatSim struct {
	srv *httptest.Server
	mu  sync.Mutex // guards log
	log []exchange
}

func newChatSim(t *testing.T, dir string, reply string) *chatSim {
	t.Helper()
	_, c := realTokenizer(t, "qwen3")
	replyFile := filepath.Join(t.TempDir(), "replies.jsonl")
	if err := os.WriteFile(replyFile, []byte(strconv.Quote(reply)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	replies, err := sim.LoadReplies(replyFile, c.encode)
	if err != nil {
		t.Fatal(err)
	}
	renderer, err := chat.New(dir, chat.Options{Tokenizer: c.t})
	if err != nil {
		t.Fatal(err)
	}
	core := sim.DefaultConfig()
	core.VocabSize = c.t.VocabSize()
	eng, err := sim.NewEngine(sim.EngineConfig{Core: core, TimeScale: 1e-3}, sim.SystemClock{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ranks := sim.Ranks{eng}
	m, err := sim.NewMetrics(reg, "sim-model", core, ranks)
	if err != nil {
		t.Fatal(err)
	}
	eng.SetObserver(m)
	s, err := sim.NewServer(sim.ServerConfig{Model: "sim-model", Codec: sim.NewTokenizerCodec(c.t), Chat: renderer, Replies: replies}, ranks, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = eng.Run(ctx) })
	cs := &chatSim{}
	h := s.Handler()
	cs.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		var ex exchange
		if err := json.Unmarshal(body, &ex.req); err != nil {
			t.Errorf("request body %s: %v", body, err)
		}
		ex.resp = rec.buf.Bytes()
		cs.mu.Lock()
		cs.log = append(cs.log, ex)
		cs.mu.Unlock()
	}))
	t.Cleanup(func() {
		cs.srv.Close()
		cancel()
		wg.Wait()
	})
	return cs
}

// streamedChat returns the usage of a streamed chat response and its content.
func streamedChat(t *testing.T, resp []byte) (openai.Usage, string) {
	t.Helper()
	var u *openai.Usage
	var content strings.Builder
	for _, line := range strings.Split(string(resp), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Usage != nil {
			u = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
		}
	}
	if u == nil || u.PromptTokensDetails == nil {
		t.Fatalf("no usage with prompt_tokens_details in %s", resp)
	}
	return *u, content.String()
}

// TestEndToEndChatOnSimulator runs the chat workload against a simulator that renders with
// the Qwen3 template: every later turn must hit the cache beyond the whole previous turn's
// prompt, i.e. into the answer the engine generated, which happens only when the request
// history carries that answer and the simulator renders it where the engine's output ids left
// it. A history without the answers (or a simulator that dropped them, or rendered them
// elsewhere) diverges right after the previous prompt's last user message and fails.
func TestEndToEndChatOnSimulator(t *testing.T) {
	path, _ := realTokenizer(t, "qwen3")
	dir := filepath.Dir(path)
	reply := strings.Repeat("The river runs past the old mill and on to the sea, where the boats wait for the tide. ", 4)
	s := newChatSim(t, dir, reply)
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	_, stderr, err := runLoadgen(t, "--url", s.srv.URL, "--tokenizer", dir, "--workload", "chat",
		"--num-requests", "6", "--turns", "3", "--system-tokens", "40", "--user-tokens", "12", "--output-tokens", "24",
		"--worker-metrics", s.srv.URL+"/metrics", "--json", jsonPath)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	s.srv.Close() // waits for the handlers, which log an exchange after its last byte went out
	s.mu.Lock()
	log := slices.Clone(s.log)
	s.mu.Unlock()
	if len(log) != 6 {
		t.Fatalf("simulator got %d chat requests, want 6", len(log))
	}
	later := 0
	for _, cur := range log {
		msgs := cur.req.Messages
		if len(msgs) <= 2 {
			continue
		}
		i := slices.IndexFunc(log, func(e exchange) bool { return cmp.Equal(e.req.Messages, msgs[:len(msgs)-2]) })
		if i < 0 {
			t.Fatalf("turn with %d messages resends no earlier turn's conversation", len(msgs))
		}
		prevUsage, prevContent := streamedChat(t, log[i].resp)
		u, _ := streamedChat(t, cur.resp)
		if got := msgs[len(msgs)-2]; got.Role != "assistant" || got.Content != prevContent || prevContent == "" {
			t.Errorf("turn with %d messages: history answer %+v, want the streamed answer %q", len(msgs), got, prevContent)
		}
		if u.PromptTokensDetails.CachedTokens <= prevUsage.PromptTokens {
			t.Errorf("turn with %d messages: %d cached tokens, want more than the previous turn's %d prompt tokens (a hit into its answer)",
				len(msgs), u.PromptTokensDetails.CachedTokens, prevUsage.PromptTokens)
		}
		later++
	}
	if later != 4 {
		t.Errorf("checked %d later turns, want 4", later)
	}
	rep := readReport(t, jsonPath)
	if rep.Completed != 6 || rep.Errors != 0 || rep.HitRate == nil || *rep.HitRate <= 0 || rep.UsageCachedRate == nil {
		t.Fatalf("report: completed %d errors %d hit rate %v usage cached %v", rep.Completed, rep.Errors, rep.HitRate, rep.UsageCachedRate)
	}
	// The ideal is an upper bound of what the cache could hit, on the same ids.
	if rep.IdealHitRate == nil || *rep.IdealHitRate+1e-9 < *rep.UsageCachedRate || *rep.IdealHitRate+1e-9 < *rep.HitRate {
		t.Errorf("ideal hit rate %v below the measured %v (usage) / %v (metrics)", rep.IdealHitRate, *rep.UsageCachedRate, *rep.HitRate)
	}
	if rep.TTFTms.P50 <= 0 {
		t.Errorf("TTFT not measured: %+v", rep.TTFTms)
	}
}
