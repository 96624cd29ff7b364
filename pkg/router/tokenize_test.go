package router

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/clientauth"
)

// TestTokenize: /tokenize answers vLLM's shape from the gateway's own tokenizer (prompt form)
// and renderer (messages form, the ids the chat endpoint routes on); /detokenize inverts it;
// no worker is called.
func TestTokenize(t *testing.T) {
	fw := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{Chat: tagRenderer{}, MaxPromptTokens: 500}, fw.url())
	resp, out := g.do(t, http.MethodPost, "/tokenize", `{"model":"test-model","prompt":"Hi!"}`, "")
	if resp.StatusCode != 200 || out != `{"count":3,"max_model_len":500,"token_strs":null,"tokens":[72,105,33]}`+"\n" {
		t.Errorf("prompt: %d %s", resp.StatusCode, out)
	}
	chat := chatBody(t, `,"add_generation_prompt":true,"return_token_strs":false`, "What is 2+2?")
	resp, out = g.do(t, http.MethodPost, "/tokenize", chat, "")
	var got struct {
		Count  int
		Tokens []uint32
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("messages: %d %s", resp.StatusCode, out)
	}
	want, _ := tagRenderer{}.Render(mustParseChat(t, chat))
	if d := cmp.Diff(want.TokenIDs, got.Tokens); d != "" || got.Count != len(want.TokenIDs) {
		t.Errorf("messages: count %d, ids not the render's (-want +got):\n%s", got.Count, d)
	}
	resp, out = g.do(t, http.MethodPost, "/detokenize", `{"tokens":[72,105,33]}`, "")
	if resp.StatusCode != 200 || out != `{"prompt":"Hi!"}`+"\n" {
		t.Errorf("detokenize: %d %s", resp.StatusCode, out)
	}
	for _, tt := range []struct {
		path, body string
		status     int
		contains   string
	}{
		{"/tokenize", `{"model":"nope","prompt":"x"}`, 404, "nope"},
		{"/tokenize", `{"model":"test-model"}`, 400, "prompt or messages is required"},
		{"/tokenize", `{"prompt":"x","messages":[{"role":"user","content":"x"}]}`, 400, "not both"},
		{"/tokenize", `{"messages":[{"role":"user","content":"raise"}]}`, 400, "no raising allowed"},
		{"/tokenize", `{"prompt":"x","return_token_strs":true}`, 501, "vocabulary"},
		{"/tokenize", `{"prompt":`, 400, "invalid JSON"},
		{"/detokenize", `{"tokens":[300]}`, 400, "out of the vocabulary"},
		{"/detokenize", `{"tokens":[-1]}`, 400, "array of token ids"},
		{"/detokenize", `{"model":"nope","tokens":[1]}`, 404, "nope"},
	} {
		resp, out := g.do(t, http.MethodPost, tt.path, tt.body, "")
		if resp.StatusCode != tt.status || !strings.Contains(openAIError(t, out).Message, tt.contains) {
			t.Errorf("%s %s: got %d %s, want %d containing %q", tt.path, tt.body, resp.StatusCode, out, tt.status, tt.contains)
		}
	}
	select {
	case r := <-fw.reqs:
		t.Errorf("a tokenize request reached the worker: %v", r)
	default:
	}
}

// TestVersionAndPing: /version answers {"version"}; /ping is a probe, open without a key.
func TestVersionAndPing(t *testing.T) {
	g := newTestGateway(t, testConfig{APIKeys: mustKeySet(t, clientauth.APIKey{Name: "a", Key: "k1"})}, newFakeWorker(t, "m").url())
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if resp, out := g.do(t, m, "/ping", "", ""); resp.StatusCode != 200 {
			t.Errorf("%s /ping without a key: %d %s", m, resp.StatusCode, out)
		}
	}
	resp, out := g.do(t, http.MethodGet, "/version", "", "k1")
	var v struct{ Version string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || resp.StatusCode != 200 || v.Version == "" {
		t.Errorf("/version: %d %s", resp.StatusCode, out)
	}
	if resp, _ := g.do(t, http.MethodGet, "/version", "", ""); resp.StatusCode != 401 {
		t.Errorf("/version without a key: %d, want 401", resp.StatusCode)
	}
}
