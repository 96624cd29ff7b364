package router

import (
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

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

const defaultTestTimeout = 10 * time.Second

// byteTokenizer is a fake tokenizer: every byte of the text is one token (id = byte value),
// with no special tokens. Decoding is the inverse, so gRPC output is easy to predict.
type byteTokenizer struct{ vocab int }

func (b byteTokenizer) Encode(dst []uint32, text string, _ bool) ([]uint32, error) {
	for i := 0; i < len(text); i++ {
		dst = append(dst, uint32(text[i]))
	}
	return dst, nil
}

func (b byteTokenizer) VocabSize() int {
	if b.vocab == 0 {
		return 256
	}
	return b.vocab
}

func (b byteTokenizer) NewDecoder(bool) engine.StreamDecoder { return &byteDecoder{} }

type byteDecoder struct{}

func (*byteDecoder) Add(id uint32) string { return string([]byte{byte(id)}) }
func (*byteDecoder) Flush() string        { return "" }

// fixedPolicy always picks the first candidate (so tests can predict the choice) and records
// what it was offered.
type fixedPolicy struct {
	mu    sync.Mutex
	calls [][]policy.Candidate
}

func (p *fixedPolicy) Pick(_ *policy.Request, cands []policy.Candidate) policy.Decision {
	p.mu.Lock()
	p.calls = append(p.calls, append([]policy.Candidate(nil), cands...))
	p.mu.Unlock()
	return policy.Decision{Index: 0, Reason: policy.ReasonRoundRobin}
}

// fakeWorker is an OpenAI-compatible HTTP worker. Each /v1/completions and /v1/chat/completions
// request is published on reqs (the decoded body; chat bodies get "_path" added); the response
// is produced by handle (default: a fixed JSON body).
type fakeWorker struct {
	srv     *httptest.Server
	reqs    chan map[string]any
	headers chan http.Header
	handle  func(w http.ResponseWriter, r *http.Request, body map[string]any)
	model   string
	models  string // when set, the whole /v1/models body (set before the gateway starts)
	healthy func() bool
	metrics string
}

func newFakeWorker(t *testing.T, model string) *fakeWorker {
	t.Helper()
	fw := &fakeWorker{reqs: make(chan map[string]any, 64), headers: make(chan http.Header, 64), model: model}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if fw.healthy != nil && !fw.healthy() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		if fw.models != "" {
			io.WriteString(w, fw.models)
			return
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, fw.model)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, fw.metrics)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		body["_path"] = r.URL.Path
		select {
		case fw.reqs <- body:
		default:
		}
		if fw.handle != nil {
			fw.handle(w, r, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, body["model"])
	})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		select {
		case fw.reqs <- body:
		default:
		}
		select {
		case fw.headers <- r.Header.Clone():
		default:
		}
		if fw.handle != nil {
			fw.handle(w, r, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","model":%q,"choices":[{"index":0,"text":"hello","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}`, body["model"])
	})
	fw.srv = httptest.NewServer(mux)
	t.Cleanup(fw.srv.Close)
	return fw
}

func (fw *fakeWorker) url() string { return fw.srv.URL }

// nextReq waits for the next request the worker received.
func (fw *fakeWorker) nextReq(t *testing.T) map[string]any {
	t.Helper()
	select {
	case r := <-fw.reqs:
		return r
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out waiting for the worker to receive a request")
	}
	return nil
}

// testGateway is a Router running in the background, its public API and its admin API each
// served by an httptest server, as cmd/gateway serves them on two listeners.
type testGateway struct {
	rt      *Router
	srv     *httptest.Server
	admin   *httptest.Server
	reg     *prometheus.Registry
	clients *clientauth.Guard
}

// testConfig is what the tests configure of a gateway, in one flat struct: the default model's
// fields (Model ... Pending), further Models, the fleet's, the client guard's and the router's
// own. newTestGateway turns it into a Config.
type testConfig struct {
	Model                                                string
	Tokenizer                                            pipeline.Tokenizer
	Chat                                                 pipeline.ChatRenderer
	ChatParsers                                          *parse.Parsers
	ReasoningField                                       string
	Policy                                               policy.Policy
	BlockSize                                            int
	Index                                                *indexer.Index
	Tree                                                 *indexer.Tree
	Pending                                              *indexer.Pending
	PD                                                   pipeline.PD
	Models                                               []Model
	KVIndex                                              string
	KVListen                                             string
	HealthInterval                                       time.Duration
	EngineMetricsInterval, DrainTimeout, UpstreamTimeout time.Duration

	APIKeys             *clientauth.KeySet
	RateLimit           float64
	RateBurst           int
	MaxConcurrentPerKey int
	Now                 func() time.Time

	AdminToken                                              string
	Profiling                                               bool
	ForwardTokenIDs, ForwardPriority                        bool
	MaxPromptTokens, MaxN, MaxPrompts, MaxInFlightPerWorker int
	MaxBodyBytes                                            int64
	Queue                                                   pipeline.QueueConfig
	Logger                                                  *zap.Logger
	AccessLog                                               *zap.Logger
	Tracing                                                 trace.TracerProvider
}

// config fills tc's test defaults (a cache_aware policy, a fresh index, tree and pending
// overlay, the byte tokenizer, model "test-model", 50 ms health checks) and returns the
// router's Config, with a client guard when tc asks for keys or limits.
func (tc testConfig) config(t *testing.T, reg prometheus.Registerer) (Config, *clientauth.Guard) {
	t.Helper()
	if tc.Policy == nil {
		tc.Policy = mustPolicy(t, policy.NameCacheAware)
	}
	if tc.Index == nil {
		tc.Index = mustIndex(t)
	}
	if tc.Tree == nil {
		bs := tc.BlockSize
		if bs == 0 {
			bs = fleet.DefaultBlockSize
		}
		tree, err := indexer.NewTree(indexer.TreeConfig{BlockSize: bs})
		if err != nil {
			t.Fatal(err)
		}
		tc.Tree = tree
	}
	if tc.Pending == nil {
		p, err := indexer.NewPending(indexer.PendingConfig{})
		if err != nil {
			t.Fatal(err)
		}
		tc.Pending = p
	}
	if tc.Tokenizer == nil {
		tc.Tokenizer = byteTokenizer{}
	}
	if tc.Model == "" {
		tc.Model = "test-model"
	}
	if tc.HealthInterval == 0 {
		tc.HealthInterval = 50 * time.Millisecond
	}
	if tc.Logger == nil {
		tc.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	def := Model{Name: tc.Model, Tokenizer: tc.Tokenizer, Chat: tc.Chat, ChatParsers: tc.ChatParsers, ReasoningField: tc.ReasoningField, Policy: tc.Policy, BlockSize: tc.BlockSize, Index: tc.Index, Tree: tc.Tree, Pending: tc.Pending, PD: tc.PD}
	var guard *clientauth.Guard
	if tc.APIKeys != nil || tc.RateLimit != 0 || tc.RateBurst != 0 || tc.MaxConcurrentPerKey != 0 {
		var err error
		guard, err = clientauth.New(clientauth.Config{Keys: tc.APIKeys, RateLimit: tc.RateLimit, RateBurst: tc.RateBurst,
			MaxConcurrentPerKey: tc.MaxConcurrentPerKey, OpenPaths: OpenPaths, Registerer: reg, Now: tc.Now, WriteError: WriteClientError})
		if err != nil {
			t.Fatal(err)
		}
	}
	models := []Model{def}
	for _, m := range tc.Models {
		if m.Policy == nil {
			m.Policy = tc.Policy // the further models pick as the default one does
		}
		models = append(models, m)
	}
	return Config{
		Models: models,
		Fleet: fleet.Config{KVIndex: tc.KVIndex, KVListen: tc.KVListen, HealthInterval: tc.HealthInterval,
			EngineMetricsInterval: tc.EngineMetricsInterval, DrainTimeout: tc.DrainTimeout},
		Clients: guard, AdminToken: tc.AdminToken, Profiling: tc.Profiling, ForwardTokenIDs: tc.ForwardTokenIDs, ForwardPriority: tc.ForwardPriority, MaxPromptTokens: tc.MaxPromptTokens,
		MaxN: tc.MaxN, MaxPrompts: tc.MaxPrompts, MaxInFlightPerWorker: tc.MaxInFlightPerWorker, MaxBodyBytes: tc.MaxBodyBytes,
		UpstreamTimeout: tc.UpstreamTimeout, Queue: tc.Queue, Logger: tc.Logger, Registerer: reg, Now: tc.Now, Tracing: tc.Tracing,
		AccessLog: tc.AccessLog,
	}, guard
}

// newTestGateway builds a router from tc (filling test defaults), adds the workers, runs it
// and waits until every worker is healthy.
func newTestGateway(t *testing.T, tc testConfig, specs ...string) *testGateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg, guard := tc.config(t, reg)
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		sp, err := worker.ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Fleet().AddWorker(sp); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	srv := httptest.NewServer(rt.Handler())
	admin := httptest.NewServer(rt.AdminHandler())
	t.Cleanup(func() {
		srv.Close()
		admin.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(defaultTestTimeout):
			t.Error("Run did not return")
		}
	})
	g := &testGateway{rt: rt, srv: srv, admin: admin, reg: reg, clients: guard}
	g.waitFor(t, "all workers healthy", func() bool {
		for _, w := range rt.Fleet().Workers() {
			if !w.Healthy() {
				return false
			}
		}
		return true
	})
	return g
}

// member returns the serving worker at url, or nil.
func (g *testGateway) member(url string) *fleet.Member { return g.rt.Fleet().Snapshot().Member(url) }

// members returns the serving workers.
func (g *testGateway) members() []*fleet.Member { return g.rt.Fleet().Snapshot().Members() }

// index returns the default model's event index.
func (g *testGateway) index() *indexer.Index {
	return g.rt.Fleet().Snapshot().DefaultPool().Lookup().Index
}

// metricValue returns the value of the counter or gauge name with the given label pairs
// (name, value, ...) in g's registry, 0 when it has no such series.
func (g *testGateway) metricValue(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v := g.metricValues(t, name, labels...)
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// metricSum returns the sum of the series of the counter or gauge name with the given label
// pairs.
func (g *testGateway) metricSum(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for _, v := range g.metricValues(t, name, labels...) {
		sum += v
	}
	return sum
}

// metricValues returns the values of the series of the counter or gauge name with the given
// label pairs.
func (g *testGateway) metricValues(t *testing.T, name string, labels ...string) []float64 {
	t.Helper()
	var out []float64
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				out = append(out, c.GetValue())
				continue
			}
			out = append(out, m.GetGauge().GetValue())
		}
	}
	return out
}

func mustPolicy(t *testing.T, name string) policy.Policy {
	t.Helper()
	p, err := policy.New(name, policy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustIndex(t *testing.T) *indexer.Index {
	t.Helper()
	idx, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// waitFor polls cond until it holds or the test times out.
func (g *testGateway) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
}

// post sends a completion request and returns the response with its body read.
func (g *testGateway) post(t *testing.T, body string) (*http.Response, string) {
	t.Helper()
	return g.do(t, http.MethodPost, "/v1/completions", body, "")
}

// do sends a request with an optional bearer token: admin paths (/workers, /debug/) to the
// admin server, everything else to the public API.
func (g *testGateway) do(t *testing.T, method, path, body, token string) (*http.Response, string) {
	t.Helper()
	srv := g.srv
	if isAdminPath(path) {
		srv = g.admin
	}
	return doOn(t, srv, method, path, body, token)
}

// isAdminPath reports whether path belongs to the admin API.
func isAdminPath(path string) bool {
	return strings.HasPrefix(path, "/workers") || strings.HasPrefix(path, "/debug/")
}

// doOn sends a request to srv with an optional bearer token and returns the response with its
// body read.
func doOn(t *testing.T, srv *httptest.Server, method, path, body, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// errorFields is the "error" member of an OpenAI error body as a client decodes it.
type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// openAIError decodes an OpenAI error body.
func openAIError(t *testing.T, body string) errorFields {
	t.Helper()
	var e struct {
		Error errorFields `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("body %q is not an OpenAI error: %v", body, err)
	}
	return e.Error
}

// sseData returns the data payloads of an SSE body in order.
func sseData(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}
