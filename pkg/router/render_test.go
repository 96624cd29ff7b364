package router

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/endpoint"
)

// generateRequestKeys are the fields of vLLM's GenerateRequest, in declaration order
// (frontend/entrypoints/scale_out/token_in_token_out/protocol.py), all of which its render
// routes write (pydantic model_dump).
var generateRequestKeys = []string{"request_id", "token_ids", "assistant_tokens_mask", "token_offsets", "features", "content_parts",
	"sampling_params", "model", "stream", "stream_options", "cache_salt", "priority", "kv_transfer_params", "ec_transfer_params"}

// renderAnswer splits one GenerateRequest into its fields, in the order written.
func renderAnswer(t *testing.T, raw json.RawMessage) (keys []string, fields map[string]json.RawMessage) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	fields = map[string]json.RawMessage{}
	for dec.More() {
		k, _ := dec.Token()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		keys = append(keys, k.(string))
		fields[k.(string)] = v
	}
	return keys, fields
}

// idsOf is the JSON of the tag renderer's ids for prompt.
func idsOf(prompt string) string {
	ids := make([]uint32, len(prompt))
	for i := range prompt {
		ids[i] = uint32(prompt[i])
	}
	b, _ := json.Marshal(ids)
	return string(b)
}

// TestRender: the render routes answer vLLM's GenerateRequest from the gateway's renderer and
// tokenizer (the ids the chat and completion endpoints route on), with sampling_params built
// and serialized by vLLM's rules (the request's values, else generation_config.json's, else
// vLLM's; only non-default fields, in SamplingParams' order); no worker is called.
func TestRender(t *testing.T) {
	fw := newFakeWorker(t, "m")
	plain := newTestGateway(t, testConfig{Chat: tagRenderer{}}, fw.url())
	bounded := newTestGateway(t, testConfig{Chat: tagRenderer{}, MaxPromptTokens: 500}, fw.url())
	temp, topP, topK, maxNew := 0.6, 0.95, int64(20), int64(256)
	withGen := newTestGateway(t, testConfig{Chat: endpoint.WithGeneration(tagRenderer{}, endpoint.Generation{Temperature: &temp, TopP: &topP, TopK: &topK, MaxTokens: &maxNew})}, fw.url())
	const hi = `"messages":[{"role":"user","content":"Hi"}]`
	hiIDs := idsOf("<user>Hi<assistant>")
	base := `"stop":[],"stop_token_ids":[]`
	tail := `"skip_clone":true,"bad_words":[],"skip_reading_prefix_cache":false`
	for _, tt := range []struct {
		name       string
		g          *testGateway
		path, body string
		idPrefix   string
		// want are the fields to compare (besides the key order and request_id), by name.
		want map[string]string
	}{
		{"chat, nothing known of max_tokens", plain, "/v1/chat/completions/render", `{"model":"test-model",` + hi + `}`, "chatcmpl-", map[string]string{
			"token_ids": hiIDs, "model": `"test-model"`, "stream": "false", "stream_options": "null", "cache_salt": "null", "priority": "0", "features": "null",
			"sampling_params": `{` + base + `,"output_kind":2,` + tail + `}`}},
		{"chat, vLLM's sampling test", bounded, "/v1/chat/completions/render", `{` + hi + `,"temperature":0.123,"top_p":0.456,"frequency_penalty":1.1}`, "chatcmpl-", map[string]string{
			"model": "null", "sampling_params": `{"frequency_penalty":1.1,"temperature":0.123,"top_p":0.456,` + base + `,"max_tokens":` + itoa(500-19) + `,"output_kind":2,` + tail + `}`}},
		{"chat, stream options kept", plain, "/v1/chat/completions/render", `{` + hi + `,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"cache_salt":"s3","priority":-2}`, "chatcmpl-", map[string]string{
			"stream": "true", "stream_options": `{"include_usage":true,"continuous_usage_stats":true}`, "cache_salt": `"s3"`, "priority": "-2",
			"sampling_params": `{` + base + `,"output_kind":1,` + tail + `}`}},
		{"chat, request options", bounded, "/v1/chat/completions/render", `{` + hi + `,"max_completion_tokens":40,"max_tokens":7,"stop":"END","stop_token_ids":[5,5,9],"seed":-1,"n":2,"top_k":-1,"logprobs":true,"top_logprobs":3,"echo":true,"logit_bias":{"7":200,"3":-0.5},"ignore_eos":true,"min_tokens":2,"kv_transfer_params":{"do_remote_decode":true}}`, "chatcmpl-", map[string]string{
			"sampling_params": `{"n":2,"top_k":-1,"stop":["END"],"stop_token_ids":[5,9],"ignore_eos":true,"max_tokens":40,"min_tokens":2,"logprobs":3,"prompt_logprobs":3,"output_kind":2,"skip_clone":true,"output_text_buffer_length":2,` +
				`"logit_bias":{"7":100,"3":-0.5},"extra_args":{"kv_transfer_params":{"do_remote_decode":true}},"bad_words":[],"skip_reading_prefix_cache":true}`}},
		{"chat, generation_config defaults", withGen, "/v1/chat/completions/render", `{` + hi + `}`, "chatcmpl-", map[string]string{
			"sampling_params": `{"temperature":0.6,"top_p":0.95,"top_k":20,` + base + `,"max_tokens":256,"output_kind":2,` + tail + `}`}},
		{"chat, greedy over the defaults", withGen, "/v1/chat/completions/render", `{` + hi + `,"temperature":0,"max_tokens":16}`, "chatcmpl-", map[string]string{
			"sampling_params": `{"temperature":0,` + base + `,"output_kind":2,` + tail + `}`}},
		{"messages", bounded, "/v1/messages/render", `{"model":"test-model","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":"Hello"}],"top_k":5,"stop_sequences":["\n\nHuman:"]}`, "chatcmpl-", map[string]string{
			"token_ids": idsOf("<system>Be brief.<user>Hello<assistant>"), "model": `"test-model"`,
			"sampling_params": `{"top_k":5,"stop":["\n\nHuman:"],"stop_token_ids":[],"max_tokens":64,"output_kind":2,"skip_clone":true,"output_text_buffer_length":7,"bad_words":[],"skip_reading_prefix_cache":false}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, out := tt.g.do(t, http.MethodPost, tt.path, tt.body, "")
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), out)
			}
			keys, fields := renderAnswer(t, json.RawMessage(out))
			if d := cmp.Diff(generateRequestKeys, keys); d != "" {
				t.Errorf("GenerateRequest fields (-vLLM +got):\n%s", d)
			}
			var id string
			_ = json.Unmarshal(fields["request_id"], &id)
			if !regexp.MustCompile(`^` + tt.idPrefix + `[0-9a-f]{32}$`).MatchString(id) {
				t.Errorf("request_id %q, want %s and a uuid4 hex", id, tt.idPrefix)
			}
			for k, want := range tt.want {
				if got := string(fields[k]); got != want {
					t.Errorf("%s:\n got %s\nwant %s", k, got, want)
				}
			}
		})
	}

	t.Run("completions", func(t *testing.T) {
		resp, out := bounded.do(t, http.MethodPost, "/v1/completions/render", `{"model":"test-model","prompt":["Hello world","Goodbye world"]}`, "")
		var list []json.RawMessage
		if err := json.Unmarshal([]byte(out), &list); err != nil || resp.StatusCode != 200 || len(list) != 2 {
			t.Fatalf("%d %s: want a list of two GenerateRequests", resp.StatusCode, out)
		}
		for i, p := range []string{"Hello world", "Goodbye world"} {
			keys, f := renderAnswer(t, list[i])
			var id string
			_ = json.Unmarshal(f["request_id"], &id)
			// max_tokens is CompletionRequest's default 16, SamplingParams' own: left out.
			if !cmp.Equal(keys, generateRequestKeys) || !strings.HasPrefix(id, "cmpl-") || string(f["token_ids"]) != idsOf(p) ||
				string(f["sampling_params"]) != `{`+base+`,"output_kind":2,`+tail+`}` {
				t.Errorf("prompt %d: %s", i, list[i])
			}
		}
		_, out = bounded.do(t, http.MethodPost, "/v1/completions/render", `{"prompt":[1,2,3],"echo":true,"max_tokens":5,"logprobs":2,"stream":true}`, "")
		_ = json.Unmarshal([]byte(out), &list)
		if _, f := renderAnswer(t, list[0]); string(f["token_ids"]) != "[1,2,3]" ||
			string(f["sampling_params"]) != `{`+base+`,"max_tokens":5,"logprobs":2,"prompt_logprobs":2,"output_kind":1,"skip_clone":true,"bad_words":[],"skip_reading_prefix_cache":true}` {
			t.Errorf("echo with logprobs: %s", out)
		}
	})

	for _, tt := range []struct {
		path, body string
		status     int
		contains   string
	}{
		{"/v1/chat/completions/render", `{"model":"nope",` + hi + `}`, 404, "nope"},
		{"/v1/completions/render", `{"model":"nope","prompt":"x"}`, 404, "nope"},
		{"/v1/messages/render", `{"model":"nope","max_tokens":4,` + hi + `}`, 404, "nope"},
		{"/v1/messages/render", `{"model":"test-model",` + hi + `}`, 400, "max_tokens"},
		{"/v1/chat/completions/render", `{` + hi + `,"use_beam_search":true}`, 400, "Beam search is not supported by the render endpoint"},
		{"/v1/chat/completions/render", `{` + hi + `,"top_k":-2}`, 400, "top_k must be 0 (disable), or at least 1, got -2."},
		{"/v1/chat/completions/render", `{` + hi + `,"min_p":1.5}`, 400, "min_p must be in [0, 1], got 1.5."},
		{"/v1/chat/completions/render", `{` + hi + `,"stop":["a",""]}`, 400, "empty"},
		{"/v1/chat/completions/render", `{` + hi + `,"n":3,"temperature":0}`, 400, "n must be 1 when using greedy sampling, got 3."},
		{"/v1/chat/completions/render", `{` + hi + `,"min_tokens":50,"max_tokens":10}`, 400, "min_tokens must be less than or equal to max_tokens=10, got 50."},
		{"/v1/chat/completions/render", `{` + hi + `,"top_k":"many"}`, 400, "top_k"},
		{"/v1/chat/completions/render", `{` + hi + `,"response_format":{"type":"json_object"}}`, 501, "response_format"},
		{"/v1/chat/completions/render", `{` + hi + `,"truncate_prompt_tokens":4}`, 501, "truncate_prompt_tokens"},
		{"/v1/chat/completions/render", `{"messages":[{"role":"user","content":"raise"}]}`, 400, "no raising allowed"},
	} {
		resp, out := plain.do(t, http.MethodPost, tt.path, tt.body, "")
		if resp.StatusCode != tt.status || !strings.Contains(openAIError(t, out).Message, tt.contains) {
			t.Errorf("%s %s: got %d %s, want %d containing %q", tt.path, tt.body, resp.StatusCode, out, tt.status, tt.contains)
		}
	}
	// A prompt of max_model_len tokens leaves no room to generate: vLLM's 400.
	long := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 500-17) + `"}]}`
	if resp, out := bounded.do(t, http.MethodPost, "/v1/chat/completions/render", long, ""); resp.StatusCode != 400 || !strings.Contains(out, "max_tokens must be at least 1, got 0.") {
		t.Errorf("a prompt filling the context: %d %s", resp.StatusCode, out)
	}
	select {
	case r := <-fw.reqs:
		t.Errorf("a render request reached the worker: %v", r)
	default:
	}
}

// TestLoadGeneration: generation_config.json's sampling values as vLLM takes them, the ones
// equal to transformers' defaults dropped (GenerationConfig.to_diff_dict).
func TestLoadGeneration(t *testing.T) {
	dir := t.TempDir()
	if g, err := endpoint.LoadGeneration(dir); err != nil || g != (endpoint.Generation{}) {
		t.Fatalf("no file: %+v %v, want the zero value", g, err)
	}
	cfg := `{"bos_token_id":1,"do_sample":true,"eos_token_id":[2,3],"temperature":0.7,"top_p":1.0,"top_k":50,"repetition_penalty":1.05,"min_p":0.0,"max_new_tokens":2048,"transformers_version":"4.51.0"}`
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := endpoint.LoadGeneration(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for k, v := range map[string]any{"temperature": g.Temperature, "top_p": g.TopP, "top_k": g.TopK, "repetition_penalty": g.RepetitionPenalty, "min_p": g.MinP, "max_tokens": g.MaxTokens} {
		switch p := v.(type) {
		case *float64:
			if p != nil {
				got[k] = *p
			}
		case *int64:
			if p != nil {
				got[k] = *p
			}
		}
	}
	want := map[string]any{"temperature": 0.7, "repetition_penalty": 1.05, "min_p": 0.0, "max_tokens": int64(2048)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"temperature":"hot"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := endpoint.LoadGeneration(dir); err == nil {
		t.Error("a malformed generation_config.json must be an error")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
