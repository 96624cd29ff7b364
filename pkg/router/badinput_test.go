package router

import (
	"net/http"
	"strings"
	"testing"
)

func TestBadInput(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{MaxPromptTokens: 8, MaxBodyBytes: 1024, MaxN: 4, MaxPrompts: 3, Tokenizer: byteTokenizer{vocab: 100}}, fw.url())
	tests := []struct {
		name   string
		body   string
		status int
		param  string
	}{
		{"invalid json", `{"prompt":`, 400, ""},
		{"not an object", `[1,2]`, 400, ""},
		{"null body", `null`, 400, ""},
		{"missing prompt", `{"model":"test-model"}`, 400, "prompt"},
		{"prompt wrong type", `{"prompt":{"a":1}}`, 400, "prompt"},
		{"prompt number", `{"prompt":5}`, 400, "prompt"},
		{"mixed list", `{"prompt":["a",1]}`, 400, "prompt"},
		{"empty string", `{"prompt":""}`, 400, "prompt"},
		{"empty list", `{"prompt":[]}`, 400, "prompt"},
		{"empty token list", `{"prompt":[[]]}`, 400, "prompt"},
		{"negative token", `{"prompt":[1,-2]}`, 400, "prompt"},
		{"float token", `{"prompt":[1.5]}`, 400, "prompt"},
		{"token over u32", `{"prompt":[4294967296]}`, 400, "prompt"},
		{"token outside vocab", `{"prompt":[1,100]}`, 400, "prompt"},
		{"model wrong type", `{"model":3,"prompt":"a"}`, 400, "model"},
		{"unknown model", `{"model":"nope","prompt":"a"}`, 404, "model"},
		{"negative max_tokens", `{"prompt":"a","max_tokens":-1}`, 400, "max_tokens"},
		{"zero max_tokens", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens"},
		{"huge max_tokens", `{"prompt":"a","max_tokens":99999999999}`, 400, "max_tokens"},
		{"string max_tokens", `{"prompt":"a","max_tokens":"5"}`, 400, "max_tokens"},
		{"n over limit", `{"prompt":"a","n":5}`, 400, "n"},
		{"n zero", `{"prompt":"a","n":0}`, 400, "n"},
		{"temperature range", `{"prompt":"a","temperature":3}`, 400, "temperature"},
		{"temperature type", `{"prompt":"a","temperature":"hot"}`, 400, "temperature"},
		{"top_p zero", `{"prompt":"a","top_p":0}`, 400, "top_p"},
		{"seed type", `{"prompt":"a","seed":"x"}`, 400, "seed"},
		{"stream type", `{"prompt":"a","stream":"yes"}`, 400, "stream"},
		{"stream_options without stream", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"stop type", `{"prompt":"a","stop":[1]}`, 400, "stop"},
		{"empty stop", `{"prompt":"a","stop":""}`, 400, "stop"},
		{"user type", `{"prompt":"a","user":1}`, 400, "user"},
		{"prompt over max tokens", `{"prompt":"123456789"}`, 413, "prompt"},
		{"token prompt over max tokens", `{"prompt":[1,2,3,4,5,6,7,8,9]}`, 413, "prompt"},
		{"more prompts than max prompts", `{"prompt":["a","b","c","d"]}`, 400, "prompt"},
		{"more token prompts than max prompts", `{"prompt":[[1],[2],[3],[4]]}`, 400, "prompt"},
		{"invalid UTF-8 in the prompt", "{\"prompt\":\"ab\xff\xfe\"}", 400, ""},
		{"invalid UTF-8 in a key", "{\"prompt\":\"ab\",\"\xc3\":1}", 400, ""},
		{"body over max bytes", `{"prompt":"` + strings.Repeat("a", 2000) + `"}`, 413, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := g.post(t, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status: got %d, want %d (body %s)", resp.StatusCode, tt.status, body)
			}
			e := openAIError(t, body)
			gotParam := ""
			if e.Param != nil {
				gotParam = *e.Param
			}
			if gotParam != tt.param {
				t.Errorf("param: got %q, want %q (%s)", gotParam, tt.param, e.Message)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type: got %q", ct)
			}
		})
	}
	// None of it reached the worker, and the gateway still serves good requests.
	select {
	case r := <-fw.reqs:
		t.Errorf("a bad request reached the worker: %v", r)
	default:
	}
	if resp, body := g.post(t, `{"prompt":"ok"}`); resp.StatusCode != http.StatusOK {
		t.Errorf("good request after bad ones: got %d %s", resp.StatusCode, body)
	}
}

func TestNoHealthyWorker(t *testing.T) {
	fw := newFakeWorker(t, "m")
	healthy := make(chan bool, 1)
	healthy <- true
	state := true
	fw.healthy = func() bool {
		select {
		case state = <-healthy:
		default:
		}
		return state
	}
	g := newTestGateway(t, testConfig{}, fw.url())
	healthy <- false
	g.waitFor(t, "worker marked down", func() bool { return !g.rt.Fleet().Workers()[0].Healthy() })
	resp, body := g.post(t, `{"prompt":"a"}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status: got %d, want 503 (%s)", resp.StatusCode, body)
	}
	if resp, _ := g.do(t, http.MethodGet, "/readiness", "", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readiness with no healthy worker: got %d, want 503", resp.StatusCode)
	}
	healthy <- true
	g.waitFor(t, "worker back", func() bool { return g.rt.Fleet().Workers()[0].Healthy() })
	if resp, body := g.post(t, `{"prompt":"a"}`); resp.StatusCode != http.StatusOK {
		t.Errorf("after recovery: got %d %s", resp.StatusCode, body)
	}
}

func TestNoCapacity(t *testing.T) {
	fw := newFakeWorker(t, "m")
	release := make(chan struct{})
	fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		<-release
		w.Write([]byte(`{}`))
	}
	g := newTestGateway(t, testConfig{MaxInFlightPerWorker: 1}, fw.url())
	done := make(chan int)
	go func() {
		resp, err := g.srv.Client().Post(g.srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a"}`))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	fw.nextReq(t)
	resp, body := g.post(t, `{"prompt":"b"}`)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("status: got %d, want 429 (%s)", resp.StatusCode, body)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("first request: got %d, want 200", code)
	}
}
