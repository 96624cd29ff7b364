package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/internal/harness"
)

const defaultTestTimeout = 10 * time.Second

// recordingSink keeps every published step for inspection.
type recordingSink struct {
	mu      sync.Mutex
	batches [][]eventCopy
}

type eventCopy struct {
	Kind      string
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []uint32
	Extra     []uint64
}

func (s *recordingSink) PublishStep(_ int, _ time.Time, ev *StepEvents) error {
	var b []eventCopy
	for _, e := range ev.Events {
		b = append(b, eventCopy{Kind: e.Kind.String(), Hashes: append([]uint64(nil), e.Hashes...), Parent: e.Parent,
			HasParent: e.HasParent, Tokens: append([]uint32(nil), e.Tokens...), Extra: append([]uint64(nil), e.Extra...)})
	}
	s.mu.Lock()
	s.batches = append(s.batches, b)
	s.mu.Unlock()
	return nil
}

func (s *recordingSink) events() []eventCopy {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []eventCopy
	for _, b := range s.batches {
		out = append(out, b...)
	}
	return out
}

type testEnv struct {
	srv   *httptest.Server
	boot  *httptest.Server // an SGLang prefill server's bootstrap server
	ranks Ranks
	reg   *prometheus.Registry
	sink  *recordingSink
	s     *Server
}

// newTestEnv starts dp engine ranks (time scale 1e-3 unless given) behind an httptest server;
// everything stops at test cleanup.
func newTestEnv(t *testing.T, cfg Config, scale float64, dp int, scfg ServerConfig) *testEnv {
	t.Helper()
	if scale == 0 {
		scale = 1e-3
	}
	env := &testEnv{reg: prometheus.NewRegistry(), sink: &recordingSink{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for r := range dp {
		e, err := NewEngine(EngineConfig{Core: cfg, Rank: r, TimeScale: scale}, SystemClock{}, env.sink, nil)
		if err != nil {
			t.Fatal(err)
		}
		env.ranks = append(env.ranks, e)
	}
	m, err := NewMetrics(env.reg, "sim-model", cfg, env.ranks)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range env.ranks {
		e.obs = m
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	if scfg.Model == "" {
		scfg.Model = "sim-model"
	}
	env.srv = httptest.NewUnstartedServer(nil)
	if scfg.PD != nil && scfg.PD.SideChannel == "" {
		pd := *scfg.PD
		pd.SideChannel = env.srv.Listener.Addr().String()
		scfg.PD = &pd
	}
	s, err := NewServer(scfg, env.ranks, env.reg)
	if err != nil {
		t.Fatal(err)
	}
	env.s = s
	env.srv.Config.Handler = s.Handler()
	env.srv.Start()
	if h := s.BootstrapHandler(); h != nil {
		env.boot = httptest.NewServer(h)
		t.Cleanup(env.boot.Close)
	}
	t.Cleanup(func() {
		env.srv.Close()
		cancel()
		wg.Wait()
	})
	return env
}

func (env *testEnv) post(t *testing.T, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.srv.URL+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (env *testEnv) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(env.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type completionResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int      `json:"index"`
		Text         string   `json:"text"`
		FinishReason *string  `json:"finish_reason"`
		TokenIDs     []uint32 `json:"token_ids"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func idsJSON(ids []uint32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

func TestHTTPCompletionNonStreaming(t *testing.T) {
	env := newTestEnv(t, Config{}, 0, 1, ServerConfig{})
	prompt := idsJSON(seqTokens(100, 56))
	var texts []string
	for i, wantCached := range []int{0, 48} {
		code, body := env.post(t, `{"model":"sim-model","prompt":`+prompt+`,"max_tokens":5,"return_token_ids":true}`)
		if code != 200 {
			t.Fatalf("request %d: status %d: %s", i, code, body)
		}
		var r completionResp
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Choices) != 1 || *r.Choices[0].FinishReason != "length" || len(r.Choices[0].TokenIDs) != 5 {
			t.Fatalf("request %d: choices %+v", i, r.Choices)
		}
		if r.Object != "text_completion" || r.Model != "sim-model" || !strings.HasPrefix(r.ID, "cmpl-") {
			t.Errorf("envelope: %+v", r)
		}
		u := r.Usage
		if u.PromptTokens != 56 || u.CompletionTokens != 5 || u.TotalTokens != 61 || u.PromptTokensDetails.CachedTokens != wantCached {
			t.Errorf("request %d usage: got %+v, want 56/5/61 cached %d", i, *u, wantCached)
		}
		texts = append(texts, r.Choices[0].Text)
	}
	if texts[0] != texts[1] || texts[0] == "" {
		t.Errorf("same prompt gave texts %q and %q, want equal non-empty", texts[0], texts[1])
	}
}

// readSSE returns the data payloads of an SSE body.
func readSSE(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE line without data: %q", line)
		}
		out = append(out, data)
	}
	return out
}

func TestHTTPCompletionStreaming(t *testing.T) {
	env := newTestEnv(t, Config{}, 0, 1, ServerConfig{})
	prompt := idsJSON(seqTokens(7, 40))
	code, body := env.post(t, `{"prompt":`+prompt+`,"max_tokens":12,"seed":3}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var plain completionResp
	if err := json.Unmarshal(body, &plain); err != nil {
		t.Fatal(err)
	}

	code, body = env.post(t, `{"prompt":`+prompt+`,"max_tokens":12,"seed":3,"stream":true,"stream_options":{"include_usage":true}}`)
	if code != 200 {
		t.Fatalf("stream status %d: %s", code, body)
	}
	events := readSSE(t, strings.NewReader(string(body)))
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events: %q", events)
	}
	var text strings.Builder
	var finish string
	for _, ev := range events[:len(events)-2] {
		var c completionResp
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		if len(c.Choices) != 1 || c.Usage != nil {
			t.Fatalf("chunk %q: want one choice and null usage", ev)
		}
		text.WriteString(c.Choices[0].Text)
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	if got, want := text.String(), plain.Choices[0].Text; got != want {
		t.Errorf("streamed text %q, want %q (same seed, non-streaming)", got, want)
	}
	if finish != "length" {
		t.Errorf("finish_reason: got %q, want length", finish)
	}
	var last completionResp
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil {
		t.Fatal(err)
	}
	if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != 12 || last.Usage.PromptTokens != 40 ||
		last.Usage.PromptTokensDetails.CachedTokens != 32 {
		t.Errorf("usage chunk: %s", events[len(events)-2])
	}
}

func TestHTTPCompletionListsAndN(t *testing.T) {
	env := newTestEnv(t, Config{}, 0, 2, ServerConfig{})
	a, b := idsJSON(seqTokens(1, 20)), idsJSON(seqTokens(500, 20))
	code, body := env.post(t, `{"prompt":[`+a+`,`+b+`],"n":2,"max_tokens":3}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var r completionResp
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, c := range r.Choices {
		idx = append(idx, c.Index)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3}, idx); diff != "" {
		t.Errorf("choice indices (-want +got):\n%s", diff)
	}
	if r.Choices[0].Text == r.Choices[1].Text {
		t.Errorf("samples of one prompt are identical: %q", r.Choices[0].Text)
	}
	if r.Usage.PromptTokens != 40 || r.Usage.CompletionTokens != 12 {
		t.Errorf("usage: %+v", *r.Usage)
	}
}

func TestHTTPStopString(t *testing.T) {
	env := newTestEnv(t, Config{}, 0, 1, ServerConfig{})
	prompt := idsJSON(seqTokens(900, 20))
	_, body := env.post(t, `{"prompt":`+prompt+`,"max_tokens":10}`)
	var full completionResp
	if err := json.Unmarshal(body, &full); err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(full.Choices[0].Text)
	stop := " " + words[3]
	want := full.Choices[0].Text[:strings.Index(full.Choices[0].Text, stop)]
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			code, body := env.post(t, fmt.Sprintf(`{"prompt":%s,"max_tokens":10,"stop":[%q],"stream":%v}`, prompt, stop, stream))
			if code != 200 {
				t.Fatalf("status %d: %s", code, body)
			}
			var got, finish string
			if stream {
				for _, ev := range readSSE(t, strings.NewReader(string(body))) {
					if ev == "[DONE]" {
						continue
					}
					var c completionResp
					if err := json.Unmarshal([]byte(ev), &c); err != nil {
						t.Fatal(err)
					}
					got += c.Choices[0].Text
					if c.Choices[0].FinishReason != nil {
						finish = *c.Choices[0].FinishReason
					}
				}
			} else {
				var r completionResp
				if err := json.Unmarshal(body, &r); err != nil {
					t.Fatal(err)
				}
				got, finish = r.Choices[0].Text, *r.Choices[0].FinishReason
			}
			if got != want || finish != "stop" {
				t.Errorf("got %q (%s), want %q (stop)", got, finish, want)
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	env := newTestEnv(t, Config{MaxModelLen: 100, VocabSize: 1000}, 0, 1, ServerConfig{MaxBodyBytes: 4096})
	tests := []struct {
		name, body string
		status     int
	}{
		{"bad json", `{"prompt":`, 400},
		{"unknown model", `{"model":"other","prompt":[1,2]}`, 404},
		{"missing prompt", `{"max_tokens":2}`, 400},
		{"empty list", `{"prompt":[]}`, 400},
		{"empty ids", `{"prompt":[[]]}`, 400},
		{"text without tokenizer", `{"prompt":"hello"}`, 400},
		{"negative id", `{"prompt":[1,-2]}`, 400},
		{"id out of vocab", `{"prompt":[1,5000]}`, 400},
		{"too long", `{"prompt":[1,2,3],"max_tokens":98}`, 400},
		{"max_tokens 0", `{"prompt":[1,2],"max_tokens":0}`, 400},
		{"n 0", `{"prompt":[1,2],"n":0}`, 400},
		{"bad stop", `{"prompt":[1,2],"stop":5}`, 400},
		{"stream_options without stream", `{"prompt":[1,2],"stream_options":{"include_usage":true}}`, 400},
		{"min_tokens above max_tokens", `{"prompt":[1,2],"max_tokens":2,"min_tokens":3}`, 400},
		{"negative min_tokens", `{"prompt":[1,2],"min_tokens":-1}`, 400},
		{"body too large", `{"prompt":[` + strings.Repeat("1,", 3000) + `1]}`, 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := env.post(t, tc.body)
			if code != tc.status {
				t.Fatalf("status: got %d, want %d (%s)", code, tc.status, body)
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Code != tc.status || e.Error.Type == "" {
				t.Errorf("error body %s: %v", body, err)
			}
		})
	}
	// The server survives bad input.
	if code, body := env.post(t, `{"prompt":[1,2,3],"max_tokens":2}`); code != 200 {
		t.Errorf("after errors: status %d: %s", code, body)
	}
}

func TestHTTPModelsHealthMetricsDebug(t *testing.T) {
	env := newTestEnv(t, Config{BlockSize: 16}, 0, 2, ServerConfig{})
	if code, _ := env.get(t, "/health"); code != 200 {
		t.Errorf("/health: %d", code)
	}
	code, body := env.get(t, "/v1/models")
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &models); code != 200 || err != nil || len(models.Data) != 1 || models.Data[0].ID != "sim-model" {
		t.Errorf("/v1/models: %d %s %v", code, body, err)
	}
	prompt := idsJSON(seqTokens(100, 40))
	for range 2 {
		if code, body := env.post(t, `{"prompt":`+prompt+`,"max_tokens":2}`); code != 200 {
			t.Fatalf("completion: %d %s", code, body)
		}
	}
	_, body = env.get(t, "/metrics")
	text := string(body)
	for _, want := range []string{
		`vllm:prefix_cache_queries_total{model_name="sim-model"} 80`,
		`vllm:prefix_cache_hits_total{model_name="sim-model"} 32`,
		`vllm:num_requests_running{model_name="sim-model"} 0`,
		`vllm:num_requests_waiting{model_name="sim-model"} 0`,
		`vllm:time_to_first_token_seconds_count{model_name="sim-model"} 2`,
		`vllm:kv_cache_usage_perc{model_name="sim-model"} 0`,
		`vllm:request_success_total{finish_reason="length",model_name="sim-model"} 2`,
		`vllm:generation_tokens_total{model_name="sim-model"} 4`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	code, body = env.get(t, "/debug/cache")
	var dc DebugCache
	if err := json.Unmarshal(body, &dc); code != 200 || err != nil {
		t.Fatalf("/debug/cache: %d %s %v", code, body, err)
	}
	var cached []uint64
	for _, r := range dc.Ranks {
		cached = append(cached, r.Hashes...)
	}
	var stored []uint64
	for _, e := range env.sink.events() {
		if e.Kind == "stored" {
			stored = append(stored, e.Hashes...)
		}
	}
	if len(dc.Ranks) != 2 || dc.BlockSize != 16 || len(cached) != 2 {
		t.Errorf("/debug/cache: %+v", dc)
	}
	if diff := cmp.Diff(stored, cached, cmpSortU64); diff != "" {
		t.Errorf("cached hashes vs stored events (-events +cache):\n%s", diff)
	}
}

func TestHTTPClientDisconnectAborts(t *testing.T) {
	env := newTestEnv(t, Config{}, 0.05, 1, ServerConfig{}) // ~1 ms wall per decode step
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.srv.URL+"/v1/completions",
		strings.NewReader(`{"prompt":[1,2,3,4],"max_tokens":30000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if got := env.ranks[0].NumRunning(); got != 1 {
		t.Errorf("running while streaming: got %d, want 1", got)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(defaultTestTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for env.ranks[0].NumRunning()+env.ranks[0].NumWaiting() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("request still in the engine after the client went away")
		}
		<-tick.C // polling with a deadline
	}
}

var cmpSortU64 = cmp.Transformer("sort", func(in []uint64) []uint64 {
	out := append([]uint64(nil), in...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
})

// TestHTTPHealthFlap: with HealthFlap, /health alternates between 200 and 503 while
// completions go on being served.
func TestHTTPHealthFlap(t *testing.T) {
	env := newTestEnv(t, Config{}, 0, 1, ServerConfig{HealthFlap: 100 * time.Millisecond})
	seen := map[int]bool{}
	ok := harness.Eventually(defaultTestTimeout, func() bool {
		resp, err := http.Get(env.srv.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen[resp.StatusCode] = true
		if resp.StatusCode == http.StatusServiceUnavailable {
			if code, body := env.post(t, `{"prompt":[1,2,3],"max_tokens":2}`); code != http.StatusOK {
				t.Fatalf("completion while /health fails: %d %s", code, body)
			}
		}
		return seen[http.StatusOK] && seen[http.StatusServiceUnavailable]
	})
	if !ok {
		t.Errorf("/health answered %v, want both 200 and 503", seen)
	}
}

func TestHTTPRemembersTraceparents(t *testing.T) {
	env := newTestEnv(t, Config{}, 0, 1, ServerConfig{})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest(http.MethodPost, env.srv.URL+"/v1/completions", strings.NewReader(`{"model":"sim-model","prompt":[1,2,3],"max_tokens":1}`))
	req.Header.Set("Traceparent", tp)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	env.post(t, `{"model":"sim-model","prompt":[1,2,3],"max_tokens":1}`) // none: not recorded
	code, body := env.get(t, "/debug/traceparents")
	if code != http.StatusOK || string(body) != `["`+tp+`"]` {
		t.Errorf("GET /debug/traceparents: %d %s", code, body)
	}
}
