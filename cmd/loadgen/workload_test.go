package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func prefixCfg() genConfig {
	return genConfig{kind: workloadPrefix, numRequests: 12, numPrefixes: 5, prefixTokens: 20, suffixTokens: 5,
		outputTokens: 7, rate: 0, burstiness: 1, seed: 3, vocabLo: 1000, vocabHi: 32000}
}

func TestPrefixRepetitionTokenIDs(t *testing.T) {
	cfg := prefixCfg()
	p, err := genPrefix(cfg, promptMaker{lo: cfg.vocabLo, hi: cfg.vocabHi})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.requests); got != 12 {
		t.Fatalf("got %d requests, want 12", got)
	}
	byPrefix := map[string][]*request{}
	suffixes := map[string]bool{}
	for _, r := range p.requests {
		if len(r.ids) != 25 || r.tokens != 25 || r.maxTokens != 7 || r.text != "" {
			t.Fatalf("request %d: got %d ids, tokens %d, max %d, text %q; want 25, 25, 7, \"\"", r.id, len(r.ids), r.tokens, r.maxTokens, r.text)
		}
		for _, id := range r.ids {
			if id < 1000 || id >= 32000 {
				t.Fatalf("request %d: id %d outside [1000,32000)", r.id, id)
			}
		}
		key := fmt.Sprint(r.ids[:20])
		byPrefix[key] = append(byPrefix[key], r)
		suffixes[fmt.Sprint(r.ids[20:])] = true
	}
	if len(byPrefix) != 5 {
		t.Errorf("got %d distinct prefixes, want 5", len(byPrefix))
	}
	for _, rs := range byPrefix {
		if len(rs) < 2 || len(rs) > 3 {
			t.Errorf("a prefix is used %d times, want 2 or 3 (12 requests over 5 prefixes)", len(rs))
		}
	}
	if len(suffixes) != 12 {
		t.Errorf("got %d distinct suffixes, want 12", len(suffixes))
	}
	// Ideal: (12 − 5) repeats × 20 tokens over 12 × 25 tokens.
	if got, want := p.ideal(), 7.0*20/(12*25); got != want {
		t.Errorf("ideal = %v, want %v", got, want)
	}
	if p.distinctPrefixes != 5 {
		t.Errorf("distinctPrefixes = %d, want 5", p.distinctPrefixes)
	}

	// Same seed, same workload.
	again, err := genPrefix(cfg, promptMaker{lo: cfg.vocabLo, hi: cfg.vocabHi})
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.requests {
		if diff := cmp.Diff(p.requests[i].ids, again.requests[i].ids); diff != "" {
			t.Fatalf("request %d differs between runs with one seed (-first +second):\n%s", i, diff)
		}
	}
}

func TestPrefixRepetitionIdealFewerRequestsThanPrefixes(t *testing.T) {
	cfg := prefixCfg()
	cfg.numRequests, cfg.numPrefixes = 3, 10
	p, err := genPrefix(cfg, promptMaker{lo: cfg.vocabLo, hi: cfg.vocabHi})
	if err != nil {
		t.Fatal(err)
	}
	if p.distinctPrefixes != 3 || p.ideal() != 0 {
		t.Errorf("got %d distinct prefixes and ideal %v, want 3 and 0", p.distinctPrefixes, p.ideal())
	}
}

// TestPrefixRepetitionTextExact checks the point of text prompts: with each real tokenizer,
// every prompt encodes to exactly prefix+suffix tokens and shares exactly its prefix's tokens.
func TestPrefixRepetitionTextExact(t *testing.T) {
	for _, fam := range []string{"qwen3", "llama3", "deepseek_v3"} {
		t.Run(fam, func(t *testing.T) {
			_, c := realTokenizer(t, fam)
			tb, err := newTextBuilder(c)
			if err != nil {
				t.Fatal(err)
			}
			cfg := prefixCfg()
			cfg.numRequests, cfg.numPrefixes, cfg.prefixTokens, cfg.suffixTokens = 40, 8, 300, 17
			p, err := genPrefix(cfg, promptMaker{tb: tb})
			if err != nil {
				t.Fatal(err)
			}
			prefixIDs := map[string][]uint32{}
			for _, r := range p.requests {
				if r.ids != nil {
					t.Fatalf("request %d: text mode produced token ids", r.id)
				}
				ids, err := c.encode(r.text)
				if err != nil {
					t.Fatal(err)
				}
				if len(ids) != 317 || r.tokens != 317 {
					t.Fatalf("request %d: encodes to %d tokens (recorded %d), want 317", r.id, len(ids), r.tokens)
				}
				ptext := tb.firstPieces(r.text, 300)
				pids, err := c.encode(ptext)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(pids, ids[:300]) {
					t.Fatalf("request %d: prefix tokens are not the prompt's first 300 tokens", r.id)
				}
				if prev, ok := prefixIDs[ptext]; ok && !slices.Equal(prev, pids) {
					t.Fatalf("request %d: one prefix text, two tokenizations", r.id)
				}
				prefixIDs[ptext] = pids
				back, err := c.decode(ids)
				if err != nil || back != r.text {
					t.Fatalf("request %d: decode round trip: got %q, %v", r.id, back, err)
				}
			}
			if len(prefixIDs) != 8 {
				t.Errorf("got %d distinct prefixes, want 8", len(prefixIDs))
			}
		})
	}
}

const mooncakeTrace = `{"timestamp": 0, "input_length": 1030, "output_length": 5, "hash_ids": [1, 2, 3]}
{"timestamp": 250, "input_length": 700, "output_length": 9, "hash_ids": [1, 4]}

{"timestamp": 1000, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}
`

func TestTraceHashIDs(t *testing.T) {
	cfg := genConfig{kind: workloadTrace, traceBlockSize: 512, seed: 1, vocabLo: 10, vocabHi: 50000}
	p, err := genTrace(cfg, promptMaker{lo: cfg.vocabLo, hi: cfg.vocabHi}, strings.NewReader(mooncakeTrace))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		At        time.Duration
		Tokens    int
		IDs       int
		MaxTokens int
	}
	var gs []got
	for _, r := range p.requests {
		gs = append(gs, got{r.at, r.tokens, len(r.ids), r.maxTokens})
	}
	want := []got{
		{0, 1030, 1030, 5},
		{250 * time.Millisecond, 700, 700, 9},
		{time.Second, 1536, 1536, 1},
	}
	if diff := cmp.Diff(want, gs); diff != "" {
		t.Fatalf("requests mismatch (-want +got):\n%s", diff)
	}
	r0, r1, r2 := p.requests[0].ids, p.requests[1].ids, p.requests[2].ids
	if !slices.Equal(r0[:512], r1[:512]) {
		t.Error("hash id 1 gave different blocks")
	}
	if slices.Equal(r0[512:700], r1[512:700]) {
		t.Error("hash ids 2 and 4 gave equal blocks")
	}
	if !slices.Equal(r0, r2[:1030]) {
		t.Error("the partial last block of request 0 is not a prefix of request 2's full block")
	}
	// Ideal: request 1 reuses block 1 (512 tokens); request 2 reuses 1, 2 and the whole of 3.
	if got, want := p.ideal(), float64(512+1536)/float64(1030+700+1536); got != want {
		t.Errorf("ideal = %v, want %v", got, want)
	}
}

func TestTraceVariantsAndLimits(t *testing.T) {
	trace := `{"timestamp": 5, "output_length": 3, "token_ids": [1, 2, 3]}
{"timestamp": 7, "output_length": 0, "prompt": "hello there"}
{"timestamp": 9, "input_length": 10, "output_length": 3, "hash_ids": [1]}
`
	cfg := genConfig{kind: workloadTrace, traceBlockSize: 16, numRequests: 2, vocabLo: 10, vocabHi: 100}
	p, err := genTrace(cfg, promptMaker{lo: 10, hi: 100}, strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.requests) != 2 {
		t.Fatalf("got %d requests, want 2 (--num-requests)", len(p.requests))
	}
	if diff := cmp.Diff([]uint32{1, 2, 3}, p.requests[0].ids); diff != "" {
		t.Errorf("token_ids line (-want +got):\n%s", diff)
	}
	if r := p.requests[1]; r.text != "hello there" || r.maxTokens != 1 || r.at != 2*time.Millisecond {
		t.Errorf("prompt line: got text %q, max %d, at %v; want \"hello there\", 1, 2ms", r.text, r.maxTokens, r.at)
	}
	if !isNaN(p.ideal()) {
		t.Errorf("ideal with prompt lines = %v, want NaN (unknown)", p.ideal())
	}
	for _, bad := range []string{`{"timestamp": 1}`, `not json`, ``} {
		if _, err := genTrace(cfg, promptMaker{lo: 10, hi: 100}, strings.NewReader(bad)); err == nil {
			t.Errorf("genTrace(%q): got nil error, want one", bad)
		}
	}
}

func TestTraceText(t *testing.T) {
	_, c := realTokenizer(t, "qwen3")
	tb, err := newTextBuilder(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := genConfig{kind: workloadTrace, traceBlockSize: 512, seed: 1}
	p, err := genTrace(cfg, promptMaker{tb: tb}, strings.NewReader(mooncakeTrace))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.requests {
		ids, err := c.encode(r.text)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != r.tokens {
			t.Errorf("request %d: encodes to %d tokens, want %d", r.id, len(ids), r.tokens)
		}
	}
	if !strings.HasPrefix(p.requests[2].text, p.requests[0].text) {
		t.Error("request 0's text is not a prefix of request 2's")
	}
}

func TestGenChat(t *testing.T) {
	_, c := realTokenizer(t, "qwen3")
	tb, err := newTextBuilder(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := genConfig{kind: workloadChat, numRequests: 7, turns: 3, systemTokens: 10, userTokens: 4, outputTokens: 6, seed: 2, burstiness: 1}
	p, err := genChat(cfg, promptMaker{tb: tb})
	if err != nil {
		t.Fatal(err)
	}
	var turns, firsts []int
	for _, s := range p.sessions {
		turns = append(turns, len(s.users))
		firsts = append(firsts, s.first)
		for _, u := range s.users {
			if ids, err := c.encode(u); err != nil || len(ids) != 4 {
				t.Errorf("session %d: user message %q has %d tokens (%v), want 4", s.id, u, len(ids), err)
			}
		}
	}
	if diff := cmp.Diff([]int{3, 3, 1}, turns); diff != "" {
		t.Errorf("turns per session (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 3, 6}, firsts); diff != "" {
		t.Errorf("first slots (-want +got):\n%s", diff)
	}
	if ids, err := c.encode(p.system.text); err != nil || len(ids) != 10 {
		t.Errorf("system prompt has %d tokens (%v), want 10", len(ids), err)
	}
	if _, err := genChat(cfg, promptMaker{lo: 1, hi: 9000}); !errors.Is(err, errChatNeedsText) {
		t.Errorf("chat in token-id mode: got %v, want errChatNeedsText", err)
	}
}

func TestGenerateErrors(t *testing.T) {
	m := promptMaker{lo: 1, hi: 10}
	for _, cfg := range []genConfig{
		{kind: "nope"},
		{kind: workloadPrefix, numRequests: 0, numPrefixes: 1, outputTokens: 1},
		{kind: workloadPrefix, numRequests: 1, numPrefixes: 0, outputTokens: 1},
		{kind: workloadChat, numRequests: 1, turns: 0, userTokens: 1, outputTokens: 1},
		{kind: workloadTrace, tracePath: "/nonexistent/trace.jsonl", traceBlockSize: 1},
	} {
		t.Run(cfg.kind, func(t *testing.T) {
			if _, err := generate(cfg, m); err == nil {
				t.Errorf("generate(%+v): got nil error, want one", cfg)
			}
		})
	}
}

func isNaN(x float64) bool { return x != x }

func TestParsePrefixDist(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    prefixDist
		wantErr bool
	}{
		{in: "", want: prefixDist{}},
		{in: "uniform", want: prefixDist{}},
		{in: "zipf:1.2", want: prefixDist{zipf: 1.2}},
		{in: "zipf:0.8", want: prefixDist{zipf: 0.8}},
		{in: "zipf:0", wantErr: true},
		{in: "zipf:-1", wantErr: true},
		{in: "zipf:", wantErr: true},
		{in: "zipf:Inf", wantErr: true},
		{in: "pareto:1", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parsePrefixDist(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if !tc.wantErr && tc.in != "" && got.String() != tc.in {
				t.Errorf("String: got %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestPrefixRepetitionZipf(t *testing.T) {
	cfg := prefixCfg()
	cfg.numRequests, cfg.numPrefixes, cfg.prefixTokens, cfg.suffixTokens = 6000, 100, 4, 1
	cfg.prefixDist = prefixDist{zipf: 1.2}
	p, err := genPrefix(cfg, promptMaker{lo: cfg.vocabLo, hi: cfg.vocabHi})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, r := range p.requests {
		counts[fmt.Sprint(r.ids[:4])]++
	}
	var byCount []int
	for _, n := range counts {
		byCount = append(byCount, n)
	}
	slices.Sort(byCount)
	slices.Reverse(byCount)
	// P(rank 1) = 1/H(100, 1.2) ≈ 0.27 and P(rank 2) = P(rank 1)/2^1.2 ≈ 0.12.
	h := 0.0
	for k := 1; k <= 100; k++ {
		h += math.Pow(float64(k), -1.2)
	}
	for i, want := range []float64{1 / h, math.Pow(2, -1.2) / h} {
		got := float64(byCount[i]) / 6000
		if math.Abs(got-want) > 0.02 {
			t.Errorf("rank %d share: got %.3f, want %.3f ± 0.02", i+1, got, want)
		}
	}
	if p.distinctPrefixes != len(counts) {
		t.Errorf("distinctPrefixes: got %d, want %d", p.distinctPrefixes, len(counts))
	}
	if want := float64(6000-len(counts)) * 4 / (6000 * 5); math.Abs(p.ideal()-want) > 1e-12 {
		t.Errorf("ideal: got %v, want %v", p.ideal(), want)
	}
}
