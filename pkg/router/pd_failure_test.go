package router

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/pipeline"
)

// TestPDSGLangPrefillFailureMatrix: an SGLang pair whose only prefill worker fails cannot run
// whole (role=decode SGLang servers serve only pairs), so the client gets, plain or streamed, a 503 naming the prefill stage and its worker whatever the
// prefill worker did (a 5xx, a dropped connection, no answer within --pd-timeout); a 4xx is the
// engine's verdict on the request and keeps its status. The waiting decode leg is ended at
// once in every case.
func TestPDSGLangPrefillFailureMatrix(t *testing.T) {
	cases := []struct {
		name    string
		prefill func(w http.ResponseWriter, r *http.Request)
		status  int
		code    string
	}{
		{"5xx", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "prefill engine out of memory", http.StatusInternalServerError)
		}, http.StatusServiceUnavailable, "prefill_failed"},
		{"dropped", func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler) // the prefill engine dies mid-request: the connection closes unanswered
		}, http.StatusServiceUnavailable, "prefill_failed"},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, http.StatusServiceUnavailable, "prefill_failed"},
		{"4xx", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"prompt too long for the prefill engine","type":"BadRequestError"}}`)
		}, http.StatusBadRequest, ""},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				p, d, dEnded := sglangPair(t)
				waiting := make(chan struct{})
				p.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
					<-waiting // fail once the decode leg waits for the KV
					tc.prefill(w, r)
				}
				d.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
					close(waiting)
					_, _ = io.Copy(io.Discard, r.Body)
					<-r.Context().Done() // waiting for KV that never comes, until the gateway ends the leg
					dEnded <- struct{}{}
				}
				g := newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: pipeline.PDTransferSGLang, Timeout: 300 * time.Millisecond}},
					"url="+p.url()+",role=prefill", "url="+d.url()+",role=decode")
				start := time.Now()
				resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"stream":%v}`, longPrompt, stream))
				if resp.StatusCode != tc.status || !strings.Contains(body, "prefill stage: prefill worker "+p.url()+" failed") {
					t.Errorf("got %d %s, want %d naming the prefill stage and worker", resp.StatusCode, body, tc.status)
				}
				if tc.code != "" && !strings.Contains(body, `"code":"`+tc.code+`"`) {
					t.Errorf("body %s lacks code %q", body, tc.code)
				}
				if resp.Header.Get(pipeline.HeaderPD) != pdPair || resp.Header.Get(pipeline.HeaderPrefillWorker) != p.url() {
					t.Errorf("headers %v: want the pair and its prefill worker named", resp.Header)
				}
				select {
				case <-dEnded:
				case <-time.After(defaultTestTimeout):
					t.Fatal("the decode leg was not cancelled")
				}
				if took := time.Since(start); took > defaultTestTimeout/2 {
					t.Errorf("took %v", took)
				}
			})
		}
	}
}

// TestPDNIXLTransferFailedRunsWhole: a NIXL decode engine whose KV read from the prefill
// worker fails (the worker died after answering, or its lease expired) ends the request with a
// server error before answering (vLLM's kv_load_failure_policy "fail"); the gateway then runs
// the request whole on that decode worker, without the params, and the client gets its answer,
// plain or streamed. A decode worker that fails the whole run too is the client's error, named.
func TestPDNIXLTransferFailedRunsWhole(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
			nixlPrefill(p, nixlParams)
			decodeAnswer(d)
			answer := d.handle
			d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				if body["kv_transfer_params"] != nil {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusInternalServerError)
					io.WriteString(w, `{"error":{"message":"KV transfer failed: connection refused","type":"InternalServerError"}}`)
					return
				}
				answer(w, r, body)
			}
			g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"stream":%v}`, longPrompt, stream))
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") || strings.Contains(body, "error") {
				t.Fatalf("got %d %s, want the decode worker's whole answer", resp.StatusCode, body)
			}
			if resp.Header.Get(pipeline.HeaderPD) != pdTransferFailed || resp.Header.Get(pipeline.HeaderPrefillWorker) != p.url() {
				t.Errorf("headers %v: want %s=%s and the prefill worker named", resp.Header, pipeline.HeaderPD, pdTransferFailed)
			}
			p.nextReq(t)
			if first, second := d.nextReq(t), d.nextReq(t); first["kv_transfer_params"] == nil || second["kv_transfer_params"] != nil || second["stream"] != stream {
				t.Errorf("decode legs %v then %v: want the pair's params, then the client's request whole", first, second)
			}
			if got, pairs := g.metricValue(t, "kvgate_pd_requests_total", "outcome", pdTransferFailed), g.metricValue(t, "kvgate_pd_requests_total", "outcome", pdPair); got != 1 || pairs != 0 {
				t.Errorf("transfer_failed %v, pair %v; want 1, 0 (one outcome per request)", got, pairs)
			}
		})
	}
	t.Run("whole fails too", func(t *testing.T) {
		p, d := newFakeWorker(t, "test-model"), newFakeWorker(t, "test-model")
		nixlPrefill(p, nixlParams)
		d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"decode engine overloaded","type":"ServiceUnavailableError"}}`)
		}
		g := pdGateway(t, pipeline.PD{MinUncachedTokens: -1}, p, d)
		resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q}`, longPrompt))
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "decode worker "+d.url()+" failed") || !strings.Contains(body, "decode engine overloaded") {
			t.Errorf("got %d %s, want a 502 naming the decode worker with its error", resp.StatusCode, body)
		}
		d.nextReq(t)
		d.nextReq(t)
		select {
		case b := <-d.reqs:
			t.Errorf("a third decode call %v: want one whole run after the pair", b)
		default:
		}
	})
}
