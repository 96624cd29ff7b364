package router

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/pipeline"
)

// A concurrent pair (SGLang, Mooncake) whose prefill worker fails before anything reached the
// client is run again on another prefill worker (pd_legs.go reroutePrefill), with a fresh
// room or transfer id; with no other prefill worker, it runs whole on the decode worker, or,
// for an SGLang decode-mode worker, which serves only pairs, answers the prefill failure.

// transferKey is the key a concurrent pair's legs share: the bootstrap room (SGLang) or the
// transfer id (Mooncake).
func transferKey(body map[string]any) string {
	if kv, ok := body["kv_transfer_params"].(map[string]any); ok {
		return fmt.Sprint(kv["transfer_id"])
	}
	if r, ok := body["bootstrap_room"]; ok {
		return fmt.Sprint(r)
	}
	return ""
}

// retryFleet is a decode fake worker and prefill fake workers for a concurrent pair: the first
// prefill leg (on whichever worker) fails with a 500 once its decode leg is waiting, later
// ones answer. A decode leg answers once a prefill leg of its key has answered, and waits
// until the gateway ends it otherwise; a request without a key (run whole) answers at once.
type retryFleet struct {
	d       *fakeWorker
	p       []*fakeWorker
	mu      sync.Mutex
	done    map[string]bool // keys whose prefill leg answered
	waiting chan struct{}   // a decode leg with a key arrived
	legs    atomic.Int32    // prefill legs received
	onWhich chan string     // each prefill leg's worker URL, in order
	ended   chan string     // the keys of decode legs the gateway ended
}

func newRetryFleet(t *testing.T, prefills int, failAll bool) *retryFleet {
	f := &retryFleet{d: newFakeWorker(t, "test-model"), done: map[string]bool{}, waiting: make(chan struct{}, 16),
		onWhich: make(chan string, 16), ended: make(chan string, 16)}
	for range prefills {
		p := newFakeWorker(t, "test-model")
		p.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			f.onWhich <- p.url()
			if n := f.legs.Add(1); n == 1 || failAll {
				select {
				case <-f.waiting: // fail once the decode leg waits for the KV
				case <-time.After(defaultTestTimeout):
				}
				http.Error(w, "prefill engine out of memory", http.StatusInternalServerError)
				return
			}
			f.mu.Lock()
			f.done[transferKey(body)] = true
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
		}
		f.p = append(f.p, p)
	}
	decodeAnswer(f.d)
	answer := f.d.handle
	f.d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		key := transferKey(body)
		if key == "" {
			answer(w, r, body)
			return
		}
		f.waiting <- struct{}{}
		for {
			f.mu.Lock()
			ok := f.done[key]
			f.mu.Unlock()
			if ok {
				answer(w, r, body)
				return
			}
			select {
			case <-r.Context().Done():
				f.ended <- key
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return f
}

// prefillLeg returns the worker URL of the next prefill leg, waiting a bounded time.
func (f *retryFleet) prefillLeg(t *testing.T) string {
	t.Helper()
	select {
	case u := <-f.onWhich:
		return u
	case <-time.After(defaultTestTimeout):
		t.Fatal("no prefill leg arrived")
		return ""
	}
}

// gateway starts a gateway over the fleet in the transfer style, the decode worker in role
// decodeRole; Mooncake prefill workers each get a bootstrap server.
func (f *retryFleet) gateway(t *testing.T, transfer, decodeRole string) *testGateway {
	specs := []string{"url=" + f.d.url() + ",role=" + decodeRole}
	for _, p := range f.p {
		spec := "url=" + p.url() + ",role=prefill"
		if transfer == pipeline.PDTransferMooncake {
			spec += ",bootstrap_port=" + newFakeBootstrap(t, http.StatusOK, `{"0":{"engine_id":"eng-`+p.url()+`"}}`).port()
		}
		specs = append(specs, spec)
	}
	return newTestGateway(t, testConfig{PD: pipeline.PD{MinUncachedTokens: -1, Transfer: transfer, Timeout: 2 * time.Second}}, specs...)
}

func TestPDConcurrentPrefillRetried(t *testing.T) {
	for _, transfer := range []string{pipeline.PDTransferSGLang, pipeline.PDTransferMooncake} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", transfer, stream), func(t *testing.T) {
				f := newRetryFleet(t, 2, false)
				g := f.gateway(t, transfer, "decode")
				resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3,"stream":%v}`, longPrompt, stream))
				if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") || strings.Contains(body, "error") {
					t.Fatalf("got %d %s, want the decode answer of the retried pair", resp.StatusCode, body)
				}
				first, second := f.prefillLeg(t), f.prefillLeg(t)
				if first == second {
					t.Errorf("both prefill legs went to %s, want the retry on the other prefill worker", first)
				}
				if got := resp.Header.Get(pipeline.HeaderPrefillWorker); got != second || resp.Header.Get(pipeline.HeaderPD) != pdPair {
					t.Errorf("headers %v: want a pair through the second prefill worker %s", resp.Header, second)
				}
				leg1, leg2 := f.d.nextReq(t), f.d.nextReq(t)
				id1, id2 := (<-f.d.headers).Get("X-Request-Id"), (<-f.d.headers).Get("X-Request-Id")
				if id1 == "" || id2 != id1+"-retry" {
					t.Errorf("decode legs' X-Request-Id %q then %q: want the retried pair's marked as such", id1, id2)
				}
				for _, p := range f.p {
					if p.url() == second {
						if got := (<-p.headers).Get("X-Request-Id"); got != id2 {
							t.Errorf("the retried prefill leg's X-Request-Id %q, its decode leg's %q: want one value on both", got, id2)
						}
					}
				}
				if k1, k2 := transferKey(leg1), transferKey(leg2); k1 == "" || k1 == k2 {
					t.Errorf("decode legs' keys %q and %q: want a fresh one for the retried pair", k1, k2)
				}
				select {
				case k := <-f.ended:
					if k != transferKey(leg1) {
						t.Errorf("the gateway ended decode leg %q, want the failed pair's %q", k, transferKey(leg1))
					}
				case <-time.After(defaultTestTimeout):
					t.Fatal("the failed pair's decode leg was not ended")
				}
				if n := g.metricValue(t, "kvgate_pd_prefill_retries_total"); n != 1 {
					t.Errorf("kvgate_pd_prefill_retries_total = %v, want 1", n)
				}
				if pairs, all := g.metricSum(t, "kvgate_pd_requests_total", "outcome", pdPair), g.metricSum(t, "kvgate_pd_requests_total"); pairs != 1 || all != 1 {
					t.Errorf("kvgate_pd_requests_total: %v pairs of %v, want the one request counted once, as a pair", pairs, all)
				}
			})
		}
	}
}

// concurrentFallbacks are the decode workers a concurrent pair that cannot be answered falls
// back on: ones that run the request whole (a Mooncake decode worker is a vLLM engine, an
// SGLang both worker an ordinary server), and one that cannot (an SGLang decode-mode server).
var concurrentFallbacks = []struct {
	transfer, decodeRole string
	whole                bool
}{
	{pipeline.PDTransferMooncake, "decode", true},
	{pipeline.PDTransferSGLang, "both", true},
	{pipeline.PDTransferSGLang, "decode", false},
}

// Every prefill worker failing: a Mooncake pair, or an SGLang one whose decode worker is a
// both worker, runs whole on the decode worker, counted as prefill_failed; an SGLang
// decode-mode worker's client gets the 503 naming the prefill stage.
func TestPDConcurrentPrefillFailsEverywhere(t *testing.T) {
	for _, tc := range concurrentFallbacks {
		t.Run(tc.transfer+"/"+tc.decodeRole, func(t *testing.T) {
			f := newRetryFleet(t, 2, true)
			g := f.gateway(t, tc.transfer, tc.decodeRole)
			start := time.Now()
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt))
			if took := time.Since(start); took > defaultTestTimeout/2 {
				t.Errorf("took %v", took)
			}
			if tries := f.legs.Load(); tries != 2 {
				t.Errorf("%d prefill legs, want the first and one retry", tries)
			}
			if tc.whole {
				if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") || resp.Header.Get(pipeline.HeaderPD) != pdPrefillFailed ||
					resp.Header.Get(pipeline.HeaderPrefillWorker) != "" {
					t.Errorf("got %d %v %s, want the decode worker's whole answer, prefill_failed, no prefill worker named", resp.StatusCode, resp.Header, body)
				}
				f.d.nextReq(t)
				f.d.nextReq(t)
				if whole := f.d.nextReq(t); transferKey(whole) != "" {
					t.Errorf("the whole run's body %v carries transfer fields", whole)
				}
			} else if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "prefill stage: prefill worker") || !strings.Contains(body, `"code":"prefill_failed"`) {
				t.Errorf("got %d %s, want a 503 naming the prefill stage", resp.StatusCode, body)
			}
			if n := g.metricSum(t, "kvgate_pd_requests_total"); n != 1 {
				t.Errorf("kvgate_pd_requests_total sums to %v, want the one request counted once", n)
			}
		})
	}
}

// A decode engine that fails a concurrent pair's transfer (a server error before answering,
// the prefill leg having answered) gets the request whole, as after a failed NIXL transfer:
// counted transfer_failed, answered by its whole run; an SGLang decode-mode worker, which
// serves only pairs, gives the client a 502 naming it.
func TestPDConcurrentTransferFailedRunsWhole(t *testing.T) {
	for _, tc := range concurrentFallbacks {
		t.Run(tc.transfer+"/"+tc.decodeRole, func(t *testing.T) {
			f := newRetryFleet(t, 1, false)
			f.legs.Store(1) // the prefill leg answers
			answer := f.d.handle
			f.d.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				if transferKey(body) == "" {
					answer(w, r, body)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				http.Error(w, `{"error":{"message":"KV transfer failed","code":500}}`, http.StatusInternalServerError)
			}
			g := f.gateway(t, tc.transfer, tc.decodeRole)
			resp, body := g.post(t, fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, longPrompt))
			if tc.whole {
				if resp.StatusCode != http.StatusOK || !strings.Contains(body, "decoded") || resp.Header.Get(pipeline.HeaderPD) != pdTransferFailed {
					t.Errorf("got %d %v %s, want the decode worker's whole answer, transfer_failed", resp.StatusCode, resp.Header, body)
				}
				if leg, whole := f.d.nextReq(t), f.d.nextReq(t); transferKey(leg) == "" || transferKey(whole) != "" {
					t.Errorf("decode worker got %v then %v, want the pair's leg, then the request whole", leg, whole)
				}
			} else if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "decode worker "+f.d.url()+" failed") {
				t.Errorf("got %d %s, want a 502 naming the decode worker", resp.StatusCode, body)
			}
			if n := g.metricSum(t, "kvgate_pd_requests_total"); n != 1 {
				t.Errorf("kvgate_pd_requests_total sums to %v, want the one request counted once", n)
			}
			if n := g.metricValue(t, "kvgate_pd_prefill_retries_total"); n != 0 {
				t.Errorf("%v prefill retries, want none (the prefill leg answered)", n)
			}
		})
	}
}
