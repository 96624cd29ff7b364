package parse

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// benchOutput is a realistic Qwen3 reply to a request with tools: a reasoning block, a
// sentence, two calls, and the end-of-turn token (decoded with special tokens kept, as hermes
// requires when tools are given).
const benchOutput = "<think>\nThe user wants the weather in Paris and in Tokyo for the next three days, " +
	"in Celsius. I have a get_weather tool that takes a city, a unit and a number of days. " +
	"I should call it twice, once per city, and then summarise. Paris is in France; Tokyo in Japan.\n</think>\n\n" +
	"I'll look up the forecast for both cities.\n" +
	"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, France\", \"unit\": \"celsius\", \"days\": 3, \"include_hourly\": false}}\n</tool_call>\n" +
	"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tōkyō, Japan\", \"unit\": \"celsius\", \"days\": 3, \"threshold\": 0.50}}\n</tool_call><|im_end|>"

// benchPieces returns benchOutput as the per-token texts a streaming detokenizer yields: with
// the real Qwen3 tokenizer when .cache/tokenizers/qwen3 is present, else split at 1-6 bytes.
func benchPieces(b *testing.B) ([]string, string) {
	dir := filepath.Join(moduleRootDir(b), ".cache", "tokenizers", "qwen3")
	if tk, err := tokenizer.LoadDir(dir); err == nil {
		ids, err := tk.Encode(nil, benchOutput, false)
		if err != nil {
			b.Fatal(err)
		}
		d := tk.NewStreamDecoderSpecial(false)
		var pieces []string
		for _, id := range ids {
			if s := d.Add(id); s != "" {
				pieces = append(pieces, s)
			}
		}
		if s := d.Flush(); s != "" {
			pieces = append(pieces, s)
		}
		return pieces, "qwen3 tokenizer"
	}
	r := rand.New(rand.NewPCG(3, 3))
	var pieces []string
	for t := benchOutput; len(t) > 0; {
		n := min(len(t), 1+r.IntN(6))
		pieces = append(pieces, t[:n])
		t = t[n:]
	}
	return pieces, "1-6 byte pieces"
}

func moduleRootDir(tb testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// BenchmarkParseStream feeds benchOutput token by token through qwen3 + hermes and reports
// the cost per streamed token.
func BenchmarkParseStream(b *testing.B) {
	pieces, how := benchPieces(b)
	p, err := NewParsers(ReasoningQwen3, ToolHermes, withRand(seqRand(1)))
	if err != nil {
		b.Fatal(err)
	}
	req := RequestInfo{ToolsGiven: true}
	var acc accumulator
	s := p.NewStream(req)
	for _, piece := range pieces {
		acc.Add(s.Feed(piece))
	}
	acc.Add(s.Finish())
	if m := acc.Message(s); len(m.ToolCalls) != 2 || m.Reasoning == nil || m.Content == nil {
		b.Fatalf("benchmark output parsed to %s", show(m))
	}
	b.Logf("%d tokens (%s), %d bytes", len(pieces), how, len(benchOutput))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := p.NewStream(req)
		for _, piece := range pieces {
			s.Feed(piece)
		}
		s.Finish()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pieces)), "ns/token")
}

// BenchmarkParseWhole parses benchOutput in one call.
func BenchmarkParseWhole(b *testing.B) {
	p, err := NewParsers(ReasoningQwen3, ToolHermes, withRand(seqRand(1)))
	if err != nil {
		b.Fatal(err)
	}
	req := RequestInfo{ToolsGiven: true}
	b.ReportAllocs()
	b.SetBytes(int64(len(benchOutput)))
	for i := 0; i < b.N; i++ {
		p.parse(req, benchOutput)
	}
}
