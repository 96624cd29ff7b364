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
