package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/pipeline"
)

// The split outcomes of X-Kvgate-Pd and kvgate_pd_requests_total (docs/operations.md).
const (
	pdPair           = "pair"
	pdShortPrompt    = "short_prompt"
	pdDecodeCached   = "decode_cached"
	pdMultiple       = "multiple_outputs"
	pdPrefillFailed  = "prefill_failed"
	pdTransferFailed = "transfer_failed"
)

// The prefill/decode pair flows (pd.go, pd_legs.go; wire/pd.md) against a fake engine pair.

// longPrompt is a prompt the byte tokenizer makes 300 tokens of.
var longPrompt = strings.Repeat("abcdefghij", 30)

// nixlParams is what the fake NIXL prefill worker returns: the test checks the decode leg gets
// exactly these bytes.
const nixlParams = `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[3,4,5]],"remote_engine_id":"e-1","remote_request_id":"r-1","remote_host":"10.0.0.9","remote_port":5601,"tp_size":1,"future_key":{"x":[1,2]}}`

// nixlPrefill makes fw answer like a vLLM prefill worker: one token and kv_transfer_params.
func nixlPrefill(fw *fakeWorker, params string) {
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		kv := ""
		if params != "" {
			kv = `,"kv_transfer_params":` + params
		}
		fmt.Fprintf(w, `{"id":"cmpl-p","object":"text_completion","model":%q,"choices":[{"index":0,"text":"x","finish_reason":"length"}]%s}`, body["model"], kv)
	}
}

// decodeAnswer makes fw answer the decode leg: an SSE stream when asked, else JSON.
func decodeAnswer(fw *fakeWorker) {
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if body["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"decoded\"}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-d","object":"text_completion","model":%q,"choices":[{"index":0,"text":"decoded","finish_reason":"length"}]}`, body["model"])
	}
}

func pdGateway(t *testing.T, pd pipeline.PD, p, d *fakeWorker, extra ...string) *testGateway {
	t.Helper()
	return newTestGateway(t, testConfig{PD: pd}, append([]string{"url=" + p.url() + ",role=prefill", "url=" + d.url() + ",role=decode"}, extra...)...)
}

func TestPDNIXLPair(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		stream bool
	}{
		{"json", `{"prompt":%q,"max_tokens":20,"min_tokens":5,"n":1,"x_extra":"kept"}`, false},
		{"stream", `{"prompt":%q,"max_tokens":20,"min_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
			nixlPrefill(p, nixlParams)
			decodeAnswer(d)
			g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
			resp, body := g.post(t, fmt.Sprintf(tt.body, longPrompt))
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") {
				t.Fatalf("got %d %s, want 200 with the decode answer", resp.StatusCode, body)
			}
			pb, ph := p.nextReq(t), <-p.headers
			db, dh := d.nextReq(t), <-d.headers
			wantP := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
			if diff := cmp.Diff(wantP, pb["kv_transfer_params"]); diff != "" {
				t.Errorf("prefill kv_transfer_params (-want +got):\n%s", diff)
			}
			if pb["max_tokens"] != 1.0 || pb["stream"] != false || pb["stream_options"] != nil || pb["min_tokens"] != nil {
				t.Errorf("prefill leg: got max_tokens %v stream %v stream_options %v min_tokens %v, want 1 false absent absent",
					pb["max_tokens"], pb["stream"], pb["stream_options"], pb["min_tokens"])
			}
			var gotKV, wantKV any
			_ = json.Unmarshal([]byte(nixlParams), &wantKV)
			gotKV = db["kv_transfer_params"]
			if diff := cmp.Diff(wantKV, gotKV); diff != "" {
				t.Errorf("decode kv_transfer_params (-want +got):\n%s", diff)
			}
			if db["max_tokens"] != 20.0 || db["min_tokens"] != 5.0 || (db["stream"] == true) != tt.stream || (db["stream_options"] != nil) != tt.stream {
				t.Errorf("decode leg is not the client's request: %v", db)
			}
			if id := ph.Get("X-Request-Id"); id == "" || dh.Get("X-Request-Id") != id {
				t.Errorf("X-Request-Id: prefill %q, decode %q, want one value on both", id, dh.Get("X-Request-Id"))
			}
			if got := resp.Header.Get(pipeline.HeaderPrefillWorker); got != p.url() {
				t.Errorf("%s = %q, want %q", pipeline.HeaderPrefillWorker, got, p.url())
			}
			if got := resp.Header.Get(pipeline.HeaderWorker); got != d.url() {
				t.Errorf("%s = %q, want the decode worker %q", pipeline.HeaderWorker, got, d.url())
			}
			if got := g.metricValue(t, "kvgate_pd_requests_total", "outcome", "pair"); got != 1 {
				t.Errorf("pair count %v, want 1", got)
			}
		})
	}
}

// TestPDNIXLRelaysRawParams checks the params reach the decode worker byte for byte, key order
// and spacing included (they are opaque: wire/pd.md §2.3).
func TestPDNIXLRelaysRawParams(t *testing.T) {
	raw := `{"z_last":1, "do_remote_prefill":true,"remote_block_ids":[[1]],"a":"b"}`
	p := newFakeWorker(t, "test-model")
	nixlPrefill(p, raw)
	got := make(chan string, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"data":[{"id":"test-model"}]}`) })
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	})
	d := &fakeWorker{srv: httptest.NewServer(mux)}
	t.Cleanup(d.srv.Close)
	g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
	if resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q}`, longPrompt)); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if b := <-got; !strings.Contains(b, `"kv_transfer_params":`+raw) {
		t.Errorf("decode body %s does not carry %s verbatim", b, raw)
	}
}

func TestPDNIXLWithoutParams(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	nixlPrefill(p, "")
	decodeAnswer(d)
	g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"kv_transfer_params":{"do_remote_prefill":true}}`, longPrompt))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	p.nextReq(t)
	if db := d.nextReq(t); db["kv_transfer_params"] != nil {
		t.Errorf("decode leg got kv_transfer_params %v, want none (the prefill answer had none, the client's are stripped)", db["kv_transfer_params"])
	}
	if got := g.metricValue(t, "kvgate_pd_missing_kv_params_total"); got != 1 {
		t.Errorf("missing params count %v, want 1", got)
	}
	if got := g.metricValue(t, "kvgate_pd_client_transfer_fields_total"); got != 1 {
		t.Errorf("stripped count %v, want 1", got)
	}
}

func TestPDNIXLPrefillFailure(t *testing.T) {
	t.Run("5xx runs whole on the decode worker", func(t *testing.T) {
		p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
		p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}
		decodeAnswer(d)
		g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
		resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":7}`, longPrompt))
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") {
			t.Fatalf("got %d %s, want the decode worker's whole answer", resp.StatusCode, body)
		}
		if db := d.nextReq(t); db["kv_transfer_params"] != nil || db["max_tokens"] != 7.0 {
			t.Errorf("decode leg %v, want the client's request without params", db)
		}
		if got := resp.Header.Get(pipeline.HeaderPD); got != pdPrefillFailed {
			t.Errorf("%s = %q, want %q", pipeline.HeaderPD, got, pdPrefillFailed)
		}
		if got := resp.Header.Get(pipeline.HeaderPrefillWorker); got != "" {
			t.Errorf("%s = %q, want none", pipeline.HeaderPrefillWorker, got)
		}
	})
	t.Run("4xx is the client's answer", func(t *testing.T) {
		p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
		p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"too long","type":"BadRequestError"}}`)
		}
		decodeAnswer(d)
		g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
		resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q}`, longPrompt))
		if resp.StatusCode != http.StatusBadRequest || openAIError(t, body).Message != "too long" {
			t.Fatalf("got %d %s, want the prefill worker's 400", resp.StatusCode, body)
		}
		select {
		case r := <-d.reqs:
			t.Errorf("decode worker got %v, want no request", r)
		default:
		}
	})
}

func TestPDShortPromptRunsWhole(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	nixlPrefill(p, nixlParams)
	decodeAnswer(d)
	g := pdGateway(t, pipeline.PD{}, p, d)
	resp, body := g.post(t, `{"prompt":"short prompt","max_tokens":3}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(pipeline.HeaderPD); got != pdShortPrompt {
		t.Errorf("%s = %q, want %q", pipeline.HeaderPD, got, pdShortPrompt)
	}
	d.nextReq(t)
	select {
	case r := <-p.reqs:
		t.Errorf("prefill worker got %v, want nothing", r)
	default:
	}
	if got := g.metricValue(t, "kvgate_pd_requests_total", "outcome", pdShortPrompt); got != 1 {
		t.Errorf("short_prompt count %v, want 1", got)
	}
}

func TestPDNIXLMultipleOutputsRunWhole(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	nixlPrefill(p, nixlParams)
	decodeAnswer(d)
	g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
	resp, _ := g.post(t, fmt.Sprintf(`{"prompt":%q,"n":2}`, longPrompt))
	if got := resp.Header.Get(pipeline.HeaderPD); got != pdMultiple {
		t.Errorf("%s = %q, want %q", pipeline.HeaderPD, got, pdMultiple)
	}
}

// sglangPair returns a prefill and a decode fake worker (their handlers set by the test) and
// a channel the test's handlers signal a leg's end on.
func sglangPair(t *testing.T) (p, d *fakeWorker, dEnded chan struct{}) {
	p, d = newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	dEnded = make(chan struct{}, 4)
	return p, d, dEnded
}

func TestPDSGLangPair(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			p, d, _ := sglangPair(t)
			transferred := make(chan struct{})
			p.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"choices":[{"text":"","finish_reason":"length"}]}`)
				close(transferred)
			}
			decodeAnswer(d)
			answer := d.handle
			d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				<-transferred // as an SGLang decode worker waits for the KV
				answer(w, r, body)
			}
			g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferSGLang}},
				"url="+p.url()+",role=prefill,bootstrap_port=9123", "url="+d.url()+",role=decode")
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":20,"stream":%v,"bootstrap_room":5}`, longPrompt, stream))
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") {
				t.Fatalf("got %d %s", resp.StatusCode, body)
			}
			pb, db := p.nextReq(t), d.nextReq(t)
			for _, k := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room", "max_tokens", "stream"} {
				if pb[k] != db[k] {
					t.Errorf("%s: prefill %v, decode %v, want equal", k, pb[k], db[k])
				}
			}
			if pb["bootstrap_host"] != "127.0.0.1" || pb["bootstrap_port"] != 9123.0 || pb["bootstrap_room"] == 5.0 || pb["max_tokens"] != 20.0 {
				t.Errorf("prefill leg %v: want host 127.0.0.1, port 9123, a fresh room, the client's max_tokens", pb)
			}
		})
	}
}

func TestPDSGLangFailedPrefillEndsDecode(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			p, d, dEnded := sglangPair(t)
			waiting := make(chan struct{})
			p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				<-waiting // fail once the decode leg waits for the KV
				http.Error(w, "prefill out of memory", http.StatusInternalServerError)
			}
			d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				close(waiting)
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, "data: {\"choices\":[{\"text\":\"\"}]}\n\n")
					w.(http.Flusher).Flush()
				}
				_, _ = io.Copy(io.Discard, r.Body) // at EOF the server notices the gateway hanging up
				<-r.Context().Done()               // waiting for KV that never comes, until the gateway ends the leg
				dEnded <- struct{}{}
			}
			g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferSGLang}},
				"url="+p.url()+",role=prefill", "url="+d.url()+",role=decode")
			start := time.Now()
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"stream":%v}`, longPrompt, stream))
			if !strings.Contains(body, "prefill stage: prefill worker "+p.url()+" failed") {
				t.Errorf("got %d %s, want an error naming the prefill stage and worker", resp.StatusCode, body)
			}
			if !stream && resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("status %d, want 503", resp.StatusCode)
			}
			select {
			case <-dEnded:
			case <-time.After(defaultTestTimeout):
				t.Fatal("the decode leg was not cancelled")
			}
			if time.Since(start) > defaultTestTimeout/2 {
				t.Errorf("took %v", time.Since(start))
			}
		})
	}
}

func TestPDSGLangPrefillTimeout(t *testing.T) {
	p, d, dEnded := sglangPair(t)
	p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}
	d.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		dEnded <- struct{}{}
	}
	g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferSGLang, Timeout: 200 * time.Millisecond}},
		"url="+p.url()+",role=prefill", "url="+d.url()+",role=decode")
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q}`, longPrompt))
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "prefill stage: prefill worker") {
		t.Errorf("got %d %s, want a 503 naming the prefill stage and worker", resp.StatusCode, body)
	}
	<-dEnded
}

func TestPDClientTransferFieldsStripped(t *testing.T) {
	fw := newFakeWorker(t, "test-model")
	g := newTestGateway(t, testConfig{}, fw.url())
	if resp, body := g.post(t, `{"prompt":"hi","kv_transfer_params":{"do_remote_prefill":true},"bootstrap_host":"evil","bootstrap_room":1}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	b := fw.nextReq(t)
	for _, k := range []string{"kv_transfer_params", "bootstrap_host", "bootstrap_room"} {
		if _, ok := b[k]; ok {
			t.Errorf("worker got the client's %s", k)
		}
	}
	if got := g.metricValue(t, "kvgate_pd_client_transfer_fields_total"); got != 1 {
		t.Errorf("stripped count %v, want 1", got)
	}
}

// An SGLang decode-mode worker serves only pairs: a short prompt is paired too, and the
// transfer style comes from the workers' runtime when pipeline.PD.Transfer is empty.
func TestPDSGLangDecodeWorkersOnlyPair(t *testing.T) {
	p, d, _ := sglangPair(t)
	transferred := make(chan struct{})
	p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		io.WriteString(w, `{"choices":[{"text":""}]}`)
		close(transferred)
	}
	decodeAnswer(d)
	answer := d.handle
	d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) { <-transferred; answer(w, r, body) }
	g := newTestGateway(t, testConfig{}, "url="+p.url()+",role=prefill,runtime=sglang", "url="+d.url()+",role=decode,runtime=sglang")
	resp, body := g.post(t, `{"prompt":"short","max_tokens":2}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != pdPair {
		t.Fatalf("got %d %s %s=%q, want a pair", resp.StatusCode, body, pipeline.HeaderPD, resp.Header.Get(pipeline.HeaderPD))
	}
	if db := d.nextReq(t); db["bootstrap_room"] == nil {
		t.Errorf("decode leg %v has no bootstrap_room", db)
	}
}

func TestPDDebugRoute(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	g := pdGateway(t, pipeline.PD{DecodePolicy: mustPolicy(t, "least_load")}, p, d)
	tests := []struct {
		prompt, split, prefill string
	}{
		{"short", pdShortPrompt, ""},
		{longPrompt, pdPair, p.url()},
	}
	for _, tt := range tests {
		resp, body := g.do(t, http.MethodGet, "/debug/route?prompt="+tt.prompt, "", "")
		var r pipeline.RouteExplanation
		if err := json.Unmarshal([]byte(body), &r); err != nil || resp.StatusCode != http.StatusOK || r.PD == nil || r.Decision == nil {
			t.Fatalf("got %d %s, want an explanation with pd", resp.StatusCode, body)
		}
		if r.Decision.Worker != d.url() || r.Policy != "least_load" || r.PD.Split != tt.split || r.PD.MinUncachedTokens != pipeline.DefaultPDMinUncachedTokens {
			t.Errorf("prompt %.10q: decode %s policy %s split %q, want %s least_load %q", tt.prompt, r.Decision.Worker, r.Policy, r.PD.Split, d.url(), tt.split)
		}
		if got := ""; r.PD.Prefill != nil {
			got = r.PD.Prefill.Worker
			if got != tt.prefill {
				t.Errorf("prefill worker %q, want %q", got, tt.prefill)
			}
		} else if tt.prefill != "" {
			t.Errorf("no prefill decision, want %s", tt.prefill)
		}
	}
}

func TestPDSGLangFailedDecodeEndsPrefill(t *testing.T) {
	p, d, pEnded := sglangPair(t)
	arrived := make(chan struct{})
	p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		_, _ = io.Copy(io.Discard, r.Body)
		close(arrived)
		<-r.Context().Done() // waiting for a decode worker that failed
		pEnded <- struct{}{}
	}
	d.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		<-arrived // fail once the prefill leg waits for it
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"bad request","type":"BadRequestError"}}`)
	}
	g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferSGLang}},
		"url="+p.url()+",role=prefill", "url="+d.url()+",role=decode")
	start := time.Now()
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q}`, longPrompt))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("got %d %s, want the decode worker's 400", resp.StatusCode, body)
	}
	if took := time.Since(start); took > defaultTestTimeout/2 {
		t.Errorf("took %v: the prefill leg outlived the failed decode leg", took)
	}
	select {
	case <-pEnded:
	case <-time.After(defaultTestTimeout):
		t.Fatal("the prefill leg was not cancelled")
	}
}

func TestPDNIXLPrefillTimeoutRunsWhole(t *testing.T) {
	p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
	p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}
	decodeAnswer(d)
	g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1, Timeout: 100 * time.Millisecond}, p, d)
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q}`, longPrompt))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderPD) != pdPrefillFailed || !strings.Contains(body, "decoded") {
		t.Errorf("got %d %s=%q %s, want the decode worker's whole answer after the prefill timeout", resp.StatusCode, pipeline.HeaderPD, resp.Header.Get(pipeline.HeaderPD), body)
	}
	if got := g.metricValue(t, "kvgate_pd_requests_total", "outcome", pdPrefillFailed); got != 1 {
		t.Errorf("prefill_failed count %v, want 1", got)
	}
}

// A decode engine whose KV fetch from a dead prefill worker was refused fails at once, before
// the prefill leg's own failure reaches the gateway: the client still gets the prefill
// failure, which names the cause, not the decode worker's echo of it.
func TestPDSGLangDecodeFailsBeforePrefillVerdict(t *testing.T) {
	p, d, _ := sglangPair(t)
	decodeFailed := make(chan struct{})
	p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		<-decodeFailed
		time.Sleep(50 * time.Millisecond) // the verdict comes after the decode leg has ended
		http.Error(w, "prefill engine gone", http.StatusServiceUnavailable)
	}
	d.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		defer close(decodeFailed)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"KV transfer failed: connection refused","type":"InternalServerError"}}`)
	}
	g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferSGLang}},
		"url="+p.url()+",role=prefill", "url="+d.url()+",role=decode")
	resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q}`, longPrompt))
	if resp.StatusCode < 500 || !strings.Contains(body, "prefill worker "+p.url()+" failed") {
		t.Errorf("got %d %s, want a 5xx naming the prefill worker", resp.StatusCode, body)
	}
}
