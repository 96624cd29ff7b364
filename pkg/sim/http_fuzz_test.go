package sim

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzParseCompletion feeds arbitrary bodies to the request parser: it must never panic, and
// anything it accepts must be a valid engine request.
func FuzzParseCompletion(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":[1,2,3],"max_tokens":4}`,
		`{"prompt":[[1,2],[3]],"n":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":["a","b"]}`,
		`{"prompt":"x","stop":["a",""],"seed":-1}`,
		`{"prompt":[],"stop":5}`,
		`{"model":"m","prompt":[4294967295]}`,
		`[`,
	} {
		f.Add(seed)
	}
	e, err := NewEngine(EngineConfig{Core: Config{VocabSize: 1000, MaxModelLen: 64, NumBlocks: 8, BlockSize: 16}}, nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	s, err := NewServer(ServerConfig{Model: "m", MaxBodyBytes: 1 << 16}, Ranks{e}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		p, aerr := s.parse(httptest.NewRequest("POST", "/v1/completions", strings.NewReader(body)))
		if aerr != nil {
			if aerr.status < 400 || aerr.msg == "" {
				t.Fatalf("bad error %+v", aerr)
			}
			return
		}
		if len(p.prompts) == 0 || p.n < 1 || p.maxTokens < 1 {
			t.Fatalf("accepted an invalid request: %+v", p)
		}
		for _, ids := range p.prompts {
			r := &Request{Prompt: ids, MaxTokens: p.maxTokens}
			if err := e.Validate(r); err != nil && len(ids) > 0 && len(ids)+p.maxTokens <= 64 {
				t.Fatalf("parser accepted what the engine rejects: %v", err)
			}
		}
	})
}

// FuzzParseChat feeds arbitrary bodies to the chat path up to the engine (parse, the Qwen3
// template, the engine's view): it must never panic, every refusal must be a 4xx with a
// message, and anything it accepts must be a request the engine takes.
func FuzzParseChat(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}],"max_tokens":4,"n":2}`,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}],"add_generation_prompt":false,"continue_final_message":true}`,
		`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false},"stop":["a"],"min_tokens":2,"max_completion_tokens":3}`,
		`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`,
		`{"messages":[]}`,
		`{"model":"m","messages":[{"role":"user"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":60}`,
		`[`,
	} {
		f.Add(seed)
	}
	tok := loadQwen3(f)
	e, err := NewEngine(EngineConfig{Core: Config{VocabSize: tok.VocabSize(), MaxModelLen: 64, NumBlocks: 8, BlockSize: 16}}, nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	s, err := NewServer(ServerConfig{Model: "m", MaxBodyBytes: 1 << 16, Codec: NewTokenizerCodec(tok), Chat: qwen3Chat(f)}, Ranks{e}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		p, out, aerr := s.parseChat(httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body)))
		if aerr != nil {
			if aerr.status < 400 || aerr.status >= 500 || aerr.msg == "" {
				t.Fatalf("bad error %+v", aerr)
			}
			return
		}
		if len(p.prompts) != 1 || p.n < 1 || p.maxTokens < 1 || p.minTokens > p.maxTokens || out == nil {
			t.Fatalf("accepted an invalid request: %+v", p)
		}
		r := &Request{Prompt: p.prompts[0], MaxTokens: p.maxTokens}
		if err := e.Validate(r); err != nil {
			t.Fatalf("parser accepted what the engine rejects: %v", err)
		}
	})
}
