package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeFleet is an OpenAI-compatible SSE server standing in for a gateway, with two workers'
// /metrics endpoints whose prefix-cache counters advance with every request.
type fakeFleet struct {
	t        *testing.T
	api      *httptest.Server
	metrics  [2]*httptest.Server
	reply    string                             // text of each streamed token
	fail     func(n int, body *recvBody) string // "" = serve; else "503", "event", "cut"
	mu       sync.Mutex                         // guards bodies, hits, queries
	bodies   []recvBody
	hits     [2]float64
	queries  [2]float64
	inflight atomic.Int64
	maxIn    atomic.Int64
	// auth is every Authorization header the API and the workers' /metrics received.
	auth struct {
		sync.Mutex
		api, metrics []string
	}
}

type recvBody struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Messages      []chatMessage   `json:"messages"`
	MaxTokens     int             `json:"max_tokens"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	Stream        bool            `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (b *recvBody) ids() []uint32 {
	var ids []uint32
	if json.Unmarshal(b.Prompt, &ids) != nil {
		return nil
	}
	return ids
}

func (b *recvBody) text() string {
	var s string
	if json.Unmarshal(b.Prompt, &s) != nil {
		return ""
	}
	return s
}

func newFakeFleet(t *testing.T) *fakeFleet {
	f := &fakeFleet{t: t, reply: " tok"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/completions", f.complete)
	mux.HandleFunc("POST /v1/chat/completions", f.complete)
	f.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.auth.Lock()
		f.auth.api = append(f.auth.api, r.Header.Get("Authorization"))
		f.auth.Unlock()
		mux.ServeHTTP(w, r)
	}))
	for i := range f.metrics {
		f.metrics[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.auth.Lock()
			f.auth.metrics = append(f.auth.metrics, r.Header.Get("Authorization"))
			f.auth.Unlock()
			f.mu.Lock()
			h, q := f.hits[i], f.queries[i]
			f.mu.Unlock()
			fmt.Fprintf(w, "# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{engine=\"0\"} %g\n"+
				"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{engine=\"0\"} %g\n", q, h)
		}))
	}
	t.Cleanup(func() {
		f.api.Close()
		for _, m := range f.metrics {
			m.Close()
		}
	})
	// Counters start non-zero: the hit rate must come from the difference.
	f.hits, f.queries = [2]float64{1000, 1000}, [2]float64{5000, 5000}
	return f
}

func (f *fakeFleet) complete(w http.ResponseWriter, r *http.Request) {
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxIn.Load()
		if n <= m || f.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	var b recvBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	idx := len(f.bodies)
	f.bodies = append(f.bodies, b)
	worker := idx % 2
	f.hits[worker] += 10
	f.queries[worker] += 40
	f.mu.Unlock()
	mode := ""
	if f.fail != nil {
		mode = f.fail(idx, &b)
	}
	if mode == "503" {
		http.Error(w, `{"error":{"message":"no capacity"}}`, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("x-kvgate-worker", fmt.Sprintf("w%d", worker))
	rc := http.NewResponseController(w)
	if b.Messages != nil {
		f.streamChat(w, &b)
		return
	}
	for i := range b.MaxTokens {
		if mode == "event" && i == 1 {
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"worker died\",\"type\":\"server_error\"}}\n\n")
			return
		}
		if mode == "cut" && i == 1 {
			return
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":%q,\"finish_reason\":null}]}\n\n", f.reply)
		_ = rc.Flush()
	}
	prompt := len(b.ids())
	if prompt == 0 {
		prompt = len(strings.Fields(b.text()))
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n", prompt, b.MaxTokens, prompt/4)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// streamChat answers a chat request as vLLM streams one: the role chunk, one content chunk
// per token, an empty last chunk with the finish reason, usage, [DONE].
func (f *fakeFleet) streamChat(w http.ResponseWriter, b *recvBody) {
	fmt.Fprint(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for range b.MaxTokens {
		fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", f.reply)
	}
	fmt.Fprint(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":%d}}\n\n", b.MaxTokens)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (f *fakeFleet) received() []recvBody {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.bodies)
}

func runLoadgen(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	err = run(ctx, args, &out, &errb, false)
	return out.String(), errb.String(), err
}

func readReport(t *testing.T, path string) report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report JSON: %v", err)
	}
	return rep
}

var resultRE = regexp.MustCompile(`^RESULT policy=round_robin index=none gateways=1 requests=20 errors=0 hit_rate=0\.2500 ttft_p50_ms=[0-9.]+ ttft_mean_ms=[0-9.]+$`)

func TestEndToEndPrefixRepetition(t *testing.T) {
	f := newFakeFleet(t)
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	stdout, stderr, err := runLoadgen(t, "--url", f.api.URL, "--token-ids",
		"--num-requests", "20", "--num-prefixes", "4", "--prefix-tokens", "32", "--suffix-tokens", "8",
		"--output-tokens", "5", "--rate", "1000", "--time-scale", "0.1", "--seed", "9",
		"--worker-metrics", f.metrics[0].URL+"/metrics", "--worker-metrics", f.metrics[1].URL+"/metrics",
		"--json", jsonPath, "--result-line", "policy=round_robin index=none gateways=1", "--progress", "always")
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	bodies := f.received()
	if len(bodies) != 20 {
		t.Fatalf("server got %d requests, want 20", len(bodies))
	}
	prefixes := map[string]int{}
	for i, b := range bodies {
		if b.Model != "fake-model" || !b.Stream || !b.IgnoreEOS || b.MaxTokens != 5 || !b.StreamOptions.IncludeUsage {
			t.Fatalf("request %d: got %+v; want model fake-model, stream, ignore_eos, max_tokens 5, include_usage", i, b)
		}
		ids := b.ids()
		if len(ids) != 40 {
			t.Fatalf("request %d: prompt has %d ids, want 40", i, len(ids))
		}
		prefixes[fmt.Sprint(ids[:32])]++
	}
	if diff := cmp.Diff([]int{5, 5, 5, 5}, slices.Sorted(mapValues(prefixes))); diff != "" {
		t.Errorf("uses per prefix (-want +got):\n%s", diff)
	}

	rep := readReport(t, jsonPath)
	if rep.Requests != 20 || rep.Sent != 20 || rep.Completed != 20 || rep.Errors != 0 {
		t.Errorf("requests %d sent %d completed %d errors %d; want 20 20 20 0", rep.Requests, rep.Sent, rep.Completed, rep.Errors)
	}
	if rep.HitRate == nil || *rep.HitRate != 0.25 || rep.HitTokens != 200 || rep.QueryTokens != 800 {
		t.Errorf("hit rate %v (%v of %v tokens), want 0.25 (200 of 800)", rep.HitRate, rep.HitTokens, rep.QueryTokens)
	}
	if rep.IdealHitRate == nil || *rep.IdealHitRate != 16.0*32/(20*40) {
		t.Errorf("ideal hit rate %v, want %v", rep.IdealHitRate, 16.0*32/(20*40))
	}
	if rep.OutputTokens != 100 || rep.PromptTokens != 800 || rep.TimeScale != 0.1 {
		t.Errorf("output %d prompt %d tokens, scale %v; want 100, 800, 0.1", rep.OutputTokens, rep.PromptTokens, rep.TimeScale)
	}
	if rep.TTFTms.P50 <= 0 || rep.E2Ems.P99 < rep.TTFTms.P50 || rep.RequestsPerS <= 0 {
		t.Errorf("latencies/rates not measured: ttft %+v e2e %+v rps %v", rep.TTFTms, rep.E2Ems, rep.RequestsPerS)
	}
	if diff := cmp.Diff(map[string]int{"w0": 10, "w1": 10}, rep.Workers); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	if rep.UsageCachedRate == nil || *rep.UsageCachedRate != 0.25 {
		t.Errorf("usage cached rate %v, want 0.25", rep.UsageCachedRate)
	}
	if diff := cmp.Diff(map[string]string{"policy": "round_robin", "index": "none", "gateways": "1"}, rep.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}

	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if last := lines[len(lines)-1]; !resultRE.MatchString(last) {
		t.Errorf("last stdout line %q does not match %s", last, resultRE)
	}
	for _, want := range []string{"prefix cache hit rate", "25.0% (ideal 64.0%)", "TTFT ms", "E2E ms", "20 sent, 20 ok, 0 errors"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "20/20 done") {
		t.Errorf("progress bar on stderr lacks \"20/20 done\": %q", stderr)
	}
}

func mapValues(m map[string]int) func(func(int) bool) {
	return func(yield func(int) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

func TestEndToEndErrors(t *testing.T) {
	f := newFakeFleet(t)
	f.fail = func(n int, _ *recvBody) string {
		switch n % 4 {
		case 1:
			return "503"
		case 2:
			return "event"
		case 3:
			return "cut"
		}
		return ""
	}
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	_, stderr, err := runLoadgen(t, "--url", f.api.URL, "--model", "m", "--token-ids", "--num-requests", "8",
		"--num-prefixes", "2", "--prefix-tokens", "16", "--suffix-tokens", "4", "--output-tokens", "3",
		"--concurrency", "1", "--json", jsonPath, "--worker-metrics", f.metrics[0].URL)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	rep := readReport(t, jsonPath)
	if rep.Completed != 2 || rep.Errors != 6 {
		t.Errorf("completed %d errors %d, want 2 and 6", rep.Completed, rep.Errors)
	}
	want := map[string]int{"status 503": 2, "stream error": 2, "stream ended without [DONE]": 2}
	if diff := cmp.Diff(want, rep.ErrorKinds); diff != "" {
		t.Errorf("error kinds (-want +got):\n%s", diff)
	}
	if got := f.maxIn.Load(); got != 1 {
		t.Errorf("max in flight %d with --concurrency 1, want 1", got)
	}
	// One worker's counters: 4 of the 8 requests went to it.
	if rep.HitRate == nil || *rep.HitRate != 0.25 {
		t.Errorf("hit rate %v, want 0.25", rep.HitRate)
	}
}

// TestEndToEndChatText: chat sends real chat requests to the chat endpoint, each turn
// carrying the system prompt, the earlier user messages with the streamed answers, and the new
// user message; TTFT is taken at the first content, and the ideal hit rate is computed on the
// conversations as the model directory's template renders them.
func TestEndToEndChatText(t *testing.T) {
	path, c := realTokenizer(t, "qwen3")
	dir := filepath.Dir(path)
	f := newFakeFleet(t)
	f.reply = " river"
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	_, stderr, err := runLoadgen(t, "--url", f.api.URL, "--model", "m", "--tokenizer", dir, "--workload", "chat",
		"--num-requests", "3", "--turns", "3", "--system-tokens", "30", "--user-tokens", "12", "--output-tokens", "3",
		"--json", jsonPath)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	bodies := f.received()
	if len(bodies) != 3 {
		t.Fatalf("server got %d requests, want 3", len(bodies))
	}
	var roles [][]string
	for i, b := range bodies {
		if b.Prompt != nil || !b.Stream || !b.IgnoreEOS || b.MaxTokens != 3 || !b.StreamOptions.IncludeUsage || b.Model != "m" {
			t.Errorf("request %d: got %+v; want a streaming chat request with max_tokens 3, ignore_eos and include_usage", i, b)
		}
		var rs []string
		for _, m := range b.Messages {
			rs = append(rs, m.Role)
		}
		roles = append(roles, rs)
	}
	want := [][]string{{"system", "user"}, {"system", "user", "assistant", "user"}, {"system", "user", "assistant", "user", "assistant", "user"}}
	if d := cmp.Diff(want, roles); d != "" {
		t.Fatalf("message roles (-want +got):\n%s", d)
	}
	for k := 1; k < 3; k++ {
		prev, cur := bodies[k-1].Messages, bodies[k].Messages
		if d := cmp.Diff(prev, cur[:len(prev)]); d != "" {
			t.Errorf("turn %d does not resend turn %d's messages (-want +got):\n%s", k+1, k, d)
		}
		if got := cur[len(prev)].Content; got != " river river river" {
			t.Errorf("turn %d: the assistant message is %q, want the streamed answer", k+1, got)
		}
	}
	if ids, err := c.encode(bodies[0].Messages[0].Content.(string)); err != nil || len(ids) != 30 {
		t.Errorf("system prompt has %d tokens (%v), want 30", len(ids), err)
	}

	// The ideal, recomputed from the bodies: turn k hits turn k−1's rendered ids followed by
	// its answer's tokens.
	rep := readReport(t, jsonPath)
	ci, err := loadChatIDs(dir, "", c.t)
	if err != nil || ci == nil {
		t.Fatalf("loadChatIDs: %v %v", ci, err)
	}
	var hit, total int
	var prevCtx []uint32
	for i, b := range bodies {
		body, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := ci.ids(body)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			hit += commonPrefix(ids, prevCtx)
		}
		total += len(ids)
		answer, _ := c.encode(" river river river")
		prevCtx = append(ids, answer...)
	}
	if rep.IdealHitRate == nil || *rep.IdealHitRate != float64(hit)/float64(total) || rep.IdealNote != "" {
		t.Errorf("ideal hit rate %v (%q), want %d/%d", rep.IdealHitRate, rep.IdealNote, hit, total)
	}
	if rep.Completed != 3 || rep.OutputTokens != 9 || rep.URL != f.api.URL+"/v1/chat/completions" {
		t.Errorf("completed %d, output tokens %d, url %s; want 3, 9, the chat endpoint", rep.Completed, rep.OutputTokens, rep.URL)
	}

	// A tokenizer file has no template: the run works, the ideal is not reported.
	_, stderr, err = runLoadgen(t, "--url", f.api.URL, "--model", "m", "--tokenizer", path, "--workload", "chat",
		"--num-requests", "2", "--turns", "2", "--output-tokens", "2", "--json", jsonPath)
	if err != nil {
		t.Fatalf("run with a tokenizer file: %v\nstderr: %s", err, stderr)
	}
	if rep := readReport(t, jsonPath); rep.IdealHitRate != nil || rep.IdealNote == "" || rep.Completed != 2 {
		t.Errorf("tokenizer file: ideal %v note %q completed %d; want no ideal, a note, 2", rep.IdealHitRate, rep.IdealNote, rep.Completed)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{}, // neither --tokenizer nor --token-ids
		{"--token-ids", "--time-scale", "0"},
		{"--token-ids", "--burstiness", "0"},
		{"--token-ids", "--workload", "trace"},
		{"--token-ids", "--progress", "sometimes"},
		{"--token-ids", "--worker-metrics", "not a url"},
		{"--token-ids", "extra"},
		{"--tokenizer", "/nonexistent/tokenizer.json"},
		{"--token-ids", "--workload", "chat", "--ideal"},
		{"--token-ids", "--workload", "chat"},
		{"--token-ids", "--workload", "responses"},
		{"--tokenizer", "../../.cache/tokenizers/qwen3", "--workload", "responses", "--ideal"},
		{"--tokenizer", "../../.cache/tokenizers/qwen3", "--workload", "responses", "--tool-tokens", "0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if _, _, err := runLoadgen(t, args...); err == nil {
				t.Errorf("run(%q): got nil error, want one", args)
			}
		})
	}
}

func TestIdealOnly(t *testing.T) {
	stdout, _, err := runLoadgen(t, "--token-ids", "--ideal", "--num-requests", "1800", "--num-prefixes", "600")
	if err != nil {
		t.Fatal(err)
	}
	// (1800 − 600) × 1000 / (1800 × 1050)
	if !strings.Contains(stdout, "ideal prefix cache hit rate: 63.5% (1200000 of 1890000 prompt tokens)") {
		t.Errorf("got %q", stdout)
	}
}

// TestAPIKey: --api-key (default $OPENAI_API_KEY) goes to the server under test on every
// request, /v1/models included, and never to the workers' /metrics.
func TestAPIKey(t *testing.T) {
	for _, tt := range []struct {
		name, flag, env, want string
	}{
		{"flag", "flag-key", "env-key", "Bearer flag-key"},
		{"environment", "", "env-key", "Bearer env-key"},
		{"none", "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OPENAI_API_KEY", tt.env)
			f := newFakeFleet(t)
			args := []string{"--url", f.api.URL, "--token-ids", "--num-requests", "4", "--num-prefixes", "2", "--prefix-tokens", "16",
				"--suffix-tokens", "4", "--output-tokens", "2", "--worker-metrics", f.metrics[0].URL}
			if tt.flag != "" {
				args = append(args, "--api-key", tt.flag)
			}
			if _, stderr, err := runLoadgen(t, args...); err != nil {
				t.Fatalf("run: %v\nstderr: %s", err, stderr)
			}
			f.auth.Lock()
			defer f.auth.Unlock()
			if len(f.auth.api) != 5 { // GET /v1/models and 4 completions
				t.Errorf("API requests: got %d, want 5", len(f.auth.api))
			}
			for _, a := range f.auth.api {
				if a != tt.want {
					t.Errorf("API request Authorization %q, want %q", a, tt.want)
				}
			}
			if len(f.auth.metrics) == 0 {
				t.Error("the worker metrics were never scraped")
			}
			for _, a := range f.auth.metrics {
				if a != "" {
					t.Errorf("a worker's /metrics got Authorization %q, want none", a)
				}
			}
		})
	}
}
