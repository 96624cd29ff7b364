package router

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/pipeline"
)

// vLLM MooncakeConnector pairs (pd_mooncake.go; wire/pd.md §3) against a fake engine pair and
// a fake bootstrap server.

// fakeBootstrap is a prefill worker's Mooncake bootstrap server: GET /query answers answer()
// (a status and a body), counting the queries.
type fakeBootstrap struct {
	srv     *httptest.Server
	queries atomic.Int32
	answer  atomic.Pointer[func() (int, string)]
}

func newFakeBootstrap(t *testing.T, status int, body string) *fakeBootstrap {
	t.Helper()
	b := &fakeBootstrap{}
	b.set(status, body)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/query" {
			http.NotFound(w, r)
			return
		}
		b.queries.Add(1)
		status, body := (*b.answer.Load())()
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *fakeBootstrap) set(status int, body string) {
	f := func() (int, string) { return status, body }
	b.answer.Store(&f)
}

func (b *fakeBootstrap) port() string {
	_, port, _ := net.SplitHostPort(b.srv.Listener.Addr().String())
	return port
}

// mooncakeGateway is a gateway in Mooncake mode over p (whose bootstrap server is b) and d.
func mooncakeGateway(t *testing.T, p, d *fakeWorker, b *fakeBootstrap) *testGateway {
	t.Helper()
	return newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferMooncake, Timeout: 2 * time.Second}},
		"url="+p.url()+",role=prefill,bootstrap_port="+b.port(), "url="+d.url()+",role=decode")
}

// mooncakeFakes returns a prefill fake worker answering like a Mooncake prefill engine (one
// token, no kv_transfer_params) and a decode one that answers once the prefill leg has
// arrived, as a Mooncake decode engine waits for the KV push.
func mooncakeFakes(t *testing.T) (p, d *fakeWorker) {
	p, d = newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	pushed := make(chan struct{}, 8)
	p.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
		pushed <- struct{}{}
	}
	decodeAnswer(d)
	answer := d.handle
	d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		select {
		case <-pushed:
		case <-r.Context().Done():
			return
		}
		answer(w, r, body)
	}
	return p, d
}

var transferIDRe = regexp.MustCompile(`^xfer-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestPDMooncakePair(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		stream bool
	}{
		{"json", `{"prompt":%q,"max_tokens":20,"min_tokens":5,"n":1,"x_extra":"kept","kv_transfer_params":{"transfer_id":"client"}}`, false},
		{"stream", `{"prompt":%q,"max_tokens":20,"min_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, d := mooncakeFakes(t)
			b := newFakeBootstrap(t, http.StatusOK, `{"0":{"engine_id":"eng-p0","worker_addr":{"0":{"0":"10.0.0.1:17000"}}}}`)
			g := mooncakeGateway(t, p, d, b)
			var ids []string
			for range 2 {
				resp, body := g.post(t, fmt.Sprintf(tt.body, longPrompt))
				if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") {
					t.Fatalf("got %d %s, want 200 with the decode answer", resp.StatusCode, body)
				}
				if resp.Header.Get(pipeline.HeaderPD) != pdPair || resp.Header.Get(pipeline.HeaderPrefillWorker) != p.url() || resp.Header.Get(pipeline.HeaderWorker) != d.url() {
					t.Errorf("headers %v: want a pair with prefill %s, decode %s", resp.Header, p.url(), d.url())
				}
				pb, ph := p.nextReq(t), <-p.headers
				db, dh := d.nextReq(t), <-d.headers
				pkv, _ := pb["kv_transfer_params"].(map[string]any)
				id, _ := pkv["transfer_id"].(string)
				if !transferIDRe.MatchString(id) {
					t.Fatalf("transfer_id %q is not xfer-<uuid>", id)
				}
				ids = append(ids, id)
				wantP := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": id}
				if diff := cmp.Diff(wantP, pb["kv_transfer_params"]); diff != "" {
					t.Errorf("prefill kv_transfer_params (-want +got):\n%s", diff)
				}
				if pb["max_tokens"] != 1.0 || pb["stream"] != false || pb["stream_options"] != nil || pb["min_tokens"] != nil || pb["x_extra"] != db["x_extra"] {
					t.Errorf("prefill leg %v: want max_tokens 1, stream false, no stream_options or min_tokens", pb)
				}
				wantD := map[string]any{"do_remote_decode": false, "do_remote_prefill": true, "transfer_id": id, "remote_engine_id": "eng-p0",
					"remote_bootstrap_addr": "http://127.0.0.1:" + b.port()}
				if diff := cmp.Diff(wantD, db["kv_transfer_params"]); diff != "" {
					t.Errorf("decode kv_transfer_params (-want +got):\n%s", diff)
				}
				if db["max_tokens"] != 20.0 || db["min_tokens"] != 5.0 || (db["stream"] == true) != tt.stream || (db["stream_options"] != nil) != tt.stream {
					t.Errorf("decode leg is not the client's request: %v", db)
				}
				if rid := ph.Get("X-Request-Id"); rid == "" || dh.Get("X-Request-Id") != rid {
					t.Errorf("X-Request-Id: prefill %q, decode %q, want one value on both", rid, dh.Get("X-Request-Id"))
				}
				if ph.Get("X-Data-Parallel-Rank") != "" {
					t.Errorf("one DP rank: the prefill leg is pinned to rank %q", ph.Get("X-Data-Parallel-Rank"))
				}
			}
			if ids[0] == ids[1] {
				t.Errorf("two pairs share transfer_id %s", ids[0])
			}
			if n := b.queries.Load(); n != 1 {
				t.Errorf("%d /query calls for two pairs, want 1 (cached per prefill worker)", n)
			}
			if got := g.metricValue(t, "kvgate_pd_requests_total", "outcome", pdPair); got != 2 {
				t.Errorf("pair count %v, want 2", got)
			}
		})
	}
}

// With several DP ranks, the engine id is rank 0's and the prefill leg is pinned to it.
func TestPDMooncakeDPRanks(t *testing.T) {
	p, d := mooncakeFakes(t)
	b := newFakeBootstrap(t, http.StatusOK, `{"1":{"engine_id":"eng-r1"},"0":{"engine_id":"eng-r0"}}`)
	g := mooncakeGateway(t, p, d, b)
	if resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt)); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	_, ph := p.nextReq(t), <-p.headers
	db := d.nextReq(t)
	if kv, _ := db["kv_transfer_params"].(map[string]any); kv["remote_engine_id"] != "eng-r0" {
		t.Errorf("decode kv_transfer_params %v, want rank 0's engine id", kv)
	}
	if got := ph.Get("X-Data-Parallel-Rank"); got != "0" {
		t.Errorf("prefill X-Data-Parallel-Rank %q, want 0", got)
	}
}

// A bootstrap server that cannot be asked (down, an error, an answer without an engine id)
// runs the request whole on the decode worker, counted; the failure is not cached.
func TestPDMooncakeQueryFailureRunsWhole(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		status     int
	}{
		{"error", `oops`, http.StatusInternalServerError},
		{"not json", `<html>`, http.StatusOK},
		{"no engine id", `{"0":{"worker_addr":{}}}`, http.StatusOK},
		{"no rank", `{}`, http.StatusOK},
		{"bad rank", `{"x":{"engine_id":"e"}}`, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
			decodeAnswer(d)
			b := newFakeBootstrap(t, tt.status, tt.body)
			g := mooncakeGateway(t, p, d, b)
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt))
			if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != "bootstrap_query_failed" || resp.Header.Get(pipeline.HeaderWorker) != d.url() {
				t.Fatalf("got %d %v %s, want the decode worker's answer, bootstrap_query_failed", resp.StatusCode, resp.Header, body)
			}
			if db := d.nextReq(t); db["kv_transfer_params"] != nil || db["max_tokens"] != 3.0 {
				t.Errorf("whole request %v: want the client's, without kv_transfer_params", db)
			}
			select {
			case pb := <-p.reqs:
				t.Errorf("the prefill worker got %v", pb)
			default:
			}
			if got := g.metricValue(t, "kvgate_pd_requests_total", "outcome", "bootstrap_query_failed"); got != 1 {
				t.Errorf("bootstrap_query_failed count %v, want 1", got)
			}
			b.set(http.StatusOK, `{"0":{"engine_id":"eng-back"}}`)
			resp, body = g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt))
			if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != pdPair {
				t.Fatalf("after the bootstrap server recovered: %d %v %s, want a pair", resp.StatusCode, resp.Header, body)
			}
		})
	}
}

// A hung bootstrap server is bounded: the request runs whole within the query timeout.
func TestPDMooncakeQueryTimeout(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	decodeAnswer(d)
	b := newFakeBootstrap(t, http.StatusOK, "")
	stop := make(chan struct{})
	defer close(stop)
	hang := func() (int, string) { <-stop; return 200, "" }
	b.answer.Store(&hang)
	g := mooncakeGateway(t, p, d, b)
	start := time.Now()
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != "bootstrap_query_failed" {
		t.Fatalf("got %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v, want about the 2 s query bound", took)
	}
	// It gave up on the hung server, not on another failure before asking it.
	if got := b.queries.Load(); got != 1 {
		t.Errorf("the bootstrap server was asked %d times, want 1", got)
	}
	select {
	case r := <-p.reqs:
		t.Errorf("the prefill worker got a leg %v without an engine id", r)
	default:
	}
}

// A failed prefill leg cancels the waiting decode leg (it has already been sent, as for
// SGLang); with no other prefill worker the request runs whole on the decode worker (a vLLM
// engine prefills itself without transfer params), and the next pair asks /query again.
func TestPDMooncakeFailedPrefillEndsDecodeAndRefreshes(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	waiting := make(chan struct{}, 4)
	dEnded := make(chan struct{}, 4)
	var failing atomic.Bool
	failing.Store(true)
	decodeAnswer(d)
	answer := d.handle
	p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		if !failing.Load() {
			io.WriteString(w, `{"choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
			return
		}
		<-waiting
		http.Error(w, "prefill out of memory", http.StatusInternalServerError)
	}
	d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if !failing.Load() || body["kv_transfer_params"] == nil {
			answer(w, r, body)
			return
		}
		waiting <- struct{}{}
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // waiting for the push that never comes
		dEnded <- struct{}{}
	}
	b := newFakeBootstrap(t, http.StatusOK, `{"0":{"engine_id":"eng-1"}}`)
	g := mooncakeGateway(t, p, d, b)
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") || resp.Header.Get(pipeline.HeaderPD) != pdPrefillFailed {
		t.Errorf("got %d %v %s, want the decode worker's whole answer, prefill_failed", resp.StatusCode, resp.Header, body)
	}
	select {
	case <-dEnded:
	case <-time.After(defaultTestTimeout):
		t.Fatal("the decode leg was not cancelled")
	}
	if leg, whole := d.nextReq(t), d.nextReq(t); leg["kv_transfer_params"] == nil || whole["kv_transfer_params"] != nil {
		t.Errorf("decode worker got %v then %v, want the pair's leg, then the request whole without transfer params", leg, whole)
	}
	b.set(http.StatusOK, `{"0":{"engine_id":"eng-2"}}`)
	failing.Store(false)
	resp, body = g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second pair: %d %s", resp.StatusCode, body)
	}
	if db := d.nextReq(t); db["kv_transfer_params"].(map[string]any)["remote_engine_id"] != "eng-2" {
		t.Errorf("second pair's decode params %v, want the engine id asked again after the failure", db["kv_transfer_params"])
	}
	if n := b.queries.Load(); n != 2 {
		t.Errorf("%d /query calls, want 2", n)
	}
}

// Several outputs run whole (one transfer_id names one prompt's KV).
func TestPDMooncakeMultipleOutputsRunWhole(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	decodeAnswer(d)
	b := newFakeBootstrap(t, http.StatusOK, `{"0":{"engine_id":"eng-1"}}`)
	g := mooncakeGateway(t, p, d, b)
	resp, _ := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3,"n":2}`, longPrompt))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != pdMultiple {
		t.Fatalf("got %d %v, want multiple_outputs", resp.StatusCode, resp.Header)
	}
}
