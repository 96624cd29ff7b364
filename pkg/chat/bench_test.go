package chat

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/openai"
)

// benchBodies returns n variants of the bench-10msg-4k conversation (12 messages, 3 tools,
// 3783 Qwen3 tokens as written) whose message letters are permuted differently in each (the
// JSON structure, keys and tool schemas stay), so the tokenizer's word cache has not seen
// the message text of an iteration when it runs: the cold case a new conversation is. With
// tools set, the letters of the tools' descriptions are permuted too, so the renderer has
// not seen an iteration's tool schemas either.
func benchBodies(b *testing.B, n int, tools bool) [][]byte {
	var req json.RawMessage
	for _, c := range readConversations(b) {
		if c.ID == "bench-10msg-4k" {
			req = c.Request
		}
	}
	if req == nil {
		b.Fatal("no bench-10msg-4k conversation")
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(req, &body); err != nil {
		b.Fatal(err)
	}
	var msgs []map[string]any
	if err := json.Unmarshal(body["messages"], &msgs); err != nil {
		b.Fatal(err)
	}
	toolsJSON := body["tools"]
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, n)
	for i := range out {
		scramble := testutil.Scrambler(rng)
		vm := make([]map[string]any, len(msgs))
		for j, m := range msgs {
			c := map[string]any{}
			for k, v := range m {
				c[k] = v
			}
			if s, ok := m["content"].(string); ok {
				c["content"] = scramble(s)
			}
			vm[j] = c
		}
		mb, _ := json.Marshal(vm)
		body["messages"] = mb
		if tools {
			body["tools"] = scrambleDescriptions(toolsJSON, scramble)
		}
		out[i], _ = json.Marshal(body)
	}
	return out
}

var descriptionRE = regexp.MustCompile(`"description":\s*"((?:[^"\\]|\\.)*)"`)

// scrambleDescriptions applies scramble to the letters of every "description" string in the
// JSON text raw, leaving escape sequences as they are.
func scrambleDescriptions(raw []byte, scramble func(string) string) []byte {
	return descriptionRE.ReplaceAllFunc(raw, func(m []byte) []byte {
		sub := descriptionRE.FindSubmatchIndex(m)
		var out []byte
		out = append(out, m[:sub[2]]...)
		text := string(m[sub[2]:sub[3]])
		for text != "" {
			k := strings.IndexByte(text, '\\')
			if k < 0 {
				k = len(text)
			}
			out = append(out, scramble(text[:k])...)
			text = text[k:]
			if text != "" { // an escape: \x, or \uXXXX
				n := min(2, len(text))
				if n == 2 && text[1] == 'u' {
					n = min(6, len(text))
				}
				out = append(out, text[:n]...)
				text = text[n:]
			}
		}
		return append(out, m[sub[3]:]...)
	})
}

const freshCacheTrials = 9

var (
	freshOnce sync.Once
	freshNs   float64
)

// freshCacheRender renders the original bench conversation with freshCacheTrials freshly
// loaded tokenizers and returns the median duration of the first render with each.
func freshCacheRender(b *testing.B) float64 {
	var body []byte
	for _, c := range readConversations(b) {
		if c.ID == "bench-10msg-4k" {
			body = c.Request
		}
	}
	req, perr := openai.ParseChat(body, openai.Limits{})
	if perr != nil {
		b.Fatal(perr.Message)
	}
	var ds []time.Duration
	for range freshCacheTrials {
		r, err := New(repoPath(".cache", "tokenizers", "qwen3"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		start := time.Now()
		if _, err := r.Render(req); err != nil {
			b.Fatal(err.Message)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds())
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs body in a b.Loop and reports, beside ns/op, the CPU time per iteration
// (cpu-ns/op): with -cpu 1 that is the work of one request including its share of GC, and it
// is steadier than wall time on a shared machine, where wall time also counts the time the
// benchmark waits for a core.
func loopCPU(b *testing.B, body func(i int)) {
	i := 0
	cpu0 := cpuTime()
	for b.Loop() {
		body(i)
		i++
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkRenderChat is render + tokenize of the 10-message, ~4k-token conversation with
// tools (Qwen3's template), on text the tokenizer's caches have not seen (cold) and on one
// repeated text (warm), with the parts measured alone on the same inputs.
func BenchmarkRenderChat(b *testing.B) {
	r, err := New(repoPath(".cache", "tokenizers", "qwen3"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	bodies := benchBodies(b, 4096, false)
	reqs := make([]*openai.ChatRequest, len(bodies))
	prompts := make([]string, len(bodies))
	for i, body := range bodies {
		req, perr := openai.ParseChat(body, openai.Limits{})
		if perr != nil {
			b.Fatal(perr.Message)
		}
		reqs[i] = req
		if prompts[i], perr = r.RenderText(req); perr != nil {
			b.Fatal(perr.Message)
		}
	}
	res, _ := r.Render(reqs[0])
	b.Logf("prompt: %d bytes, %d tokens", len(res.Prompt), len(res.TokenIDs))
	b.Run("render+tokenize/cold", func(b *testing.B) {
		b.ReportAllocs()
		loopCPU(b, func(i int) {
			if _, err := r.Render(reqs[i%len(reqs)]); err != nil {
				b.Fatal(err.Message)
			}
		})
	})
	// As cold, but the tools' descriptions differ in every iteration too, so the tool schemas
	// the renderer keeps for templates that share them (schemacache.go) are new each time.
	b.Run("render+tokenize/cold-tools", func(b *testing.B) {
		treqs := make([]*openai.ChatRequest, 4096)
		for i, body := range benchBodies(b, len(treqs), true) {
			req, perr := openai.ParseChat(body, openai.Limits{})
			if perr != nil {
				b.Fatal(perr.Message)
			}
			treqs[i] = req
		}
		b.ReportAllocs()
		loopCPU(b, func(i int) {
			if _, err := r.Render(treqs[i%len(treqs)]); err != nil {
				b.Fatal(err.Message)
			}
		})
	})
	b.Run("render+tokenize/warm", func(b *testing.B) {
		b.ReportAllocs()
		loopCPU(b, func(int) {
			if _, err := r.Render(reqs[0]); err != nil {
				b.Fatal(err.Message)
			}
		})
	})
	// A new tokenizer has an empty word cache: the cold cost on the conversation as written
	// (natural text; the scrambled variants above tokenize into about twice as many tokens).
	// Loading takes ~0.1 s, so this is measured on freshCacheTrials tokenizers once, reported
	// as fresh-ns/op beside the loop's own (warm) ns/op.
	b.Run("render+tokenize/fresh-cache", func(b *testing.B) {
		freshOnce.Do(func() { freshNs = freshCacheRender(b) })
		for b.Loop() {
			if _, err := r.Render(reqs[0]); err != nil {
				b.Fatal(err.Message)
			}
		}
		b.ReportMetric(freshNs, "fresh-ns/op")
	})
	b.Run("render", func(b *testing.B) {
		b.ReportAllocs()
		loopCPU(b, func(i int) {
			if _, err := r.RenderText(reqs[i%len(reqs)]); err != nil {
				b.Fatal(err.Message)
			}
		})
	})
	b.Run("tokenize/cold", func(b *testing.B) {
		b.ReportAllocs()
		var ids []uint32
		loopCPU(b, func(i int) {
			ids, _ = r.tok.Encode(ids[:0], prompts[i%len(prompts)], false)
		})
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		loopCPU(b, func(i int) {
			if _, err := openai.ParseChat(bodies[i%len(bodies)], openai.Limits{}); err != nil {
				b.Fatal(err.Message)
			}
		})
	})
}
