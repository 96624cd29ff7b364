package parse

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvgate/kvgate/pkg/openai"
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

// parserBenchCases are one realistic reply per parser pair: reasoning, a sentence and two calls
// in the parser's own format.
var parserBenchCases = []struct {
	name, reasoning, tool string
	req                   RequestInfo
	text                  string
}{
	{"qwen3+hermes", ReasoningQwen3, ToolHermes, RequestInfo{ToolsGiven: true}, benchOutput},
	{"qwen3+qwen3_coder", ReasoningQwen3, ToolQwen3Coder, RequestInfo{ToolsGiven: true, Tools: benchTools},
		benchThink + "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis, France\n</parameter>\n<parameter=days>\n3\n</parameter>\n" +
			"<parameter=include_hourly>\nfalse\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n" +
			"<parameter=city>\nTōkyō, Japan\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=threshold>\n0.50\n</parameter>\n</function>\n</tool_call>"},
	{"glm45+glm45", ReasoningGLM45, ToolGLM45, RequestInfo{ToolsGiven: true, Tools: benchTools},
		benchThink + "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris, France</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>" +
			"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Tōkyō, Japan</arg_value>\n<arg_key>threshold</arg_key>\n<arg_value>0.50</arg_value>\n</tool_call>"},
	{"kimi_k2+kimi_k2", ReasoningKimiK2, ToolKimiK2, RequestInfo{ToolsGiven: true},
		benchThink + "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris, France\", \"days\": 3}<|tool_call_end|>" +
			"<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{\"city\": \"Tōkyō, Japan\", \"days\": 3}<|tool_call_end|><|tool_calls_section_end|>"},
	{"deepseek_v3+deepseek_v31", ReasoningDeepSeekV3, ToolDeepSeekV31, RequestInfo{ToolsGiven: true, Thinking: ThinkingOn},
		benchThink + dsCallsBegin + dsCallBegin + "get_weather" + dsSep + "{\"city\": \"Paris, France\", \"days\": 3}" + dsCallEnd +
			dsCallBegin + "get_weather" + dsSep + "{\"city\": \"Tōkyō, Japan\", \"days\": 3}" + dsCallEnd + dsCallsEnd},
	{"mistral+mistral", ReasoningMistral, ToolMistral, RequestInfo{ToolsGiven: true},
		"[THINK]" + benchThink + "[/THINK]I'll look it up.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris, France\", \"days\": 3}"},
	{"minimax_m2_append_think+minimax_m2", ReasoningMiniMaxM2AppendThink, ToolMiniMaxM2, RequestInfo{ToolsGiven: true, Tools: benchTools},
		benchThink + "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris, France</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n" +
			"<invoke name=\"get_weather\">\n<parameter name=\"city\">Tōkyō, Japan</parameter>\n<parameter name=\"threshold\">0.50</parameter>\n</invoke>\n</minimax:tool_call>"},
	{"seed_oss+seed_oss", ReasoningSeedOSS, ToolSeedOSS, RequestInfo{ToolsGiven: true, Tools: benchTools},
		"<seed:think>" + benchThink + "</seed:think><seed:tool_call>\n<function=get_weather>\n<parameter=city>\nParis, France\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</seed:tool_call>" +
			"<seed:tool_call>\n<function=get_weather>\n<parameter=city>\nTōkyō, Japan\n</parameter>\n</function>\n</seed:tool_call>"},
	{"llama4_pythonic", "", ToolLlama4Pythonic, RequestInfo{ToolsGiven: true},
		"<|python_start|>[get_weather(city=\"Paris, France\", days=3, include_hourly=False), get_weather(city=\"Tōkyō, Japan\", threshold=0.50)]<|python_end|>"},
	{"granite", "", ToolGranite, RequestInfo{ToolsGiven: true},
		"<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, France\", \"days\": 3}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tōkyō, Japan\", \"threshold\": 0.50}}]"},
	{"step3", ReasoningStep3, "", RequestInfo{}, benchThink + "The forecast follows."},
	{"step3+step3", ReasoningStep3, ToolStep3, RequestInfo{ToolsGiven: true, Tools: benchTools},
		benchThink + s3CallsBegin + s3CallBegin + "function" + "<｜tool_sep｜>" + `<steptml:invoke name="get_weather"><steptml:parameter name="city">Paris, France</steptml:parameter>` +
			`<steptml:parameter name="days">3</steptml:parameter></steptml:invoke>` + s3CallEnd + s3CallBegin + "function" + "<｜tool_sep｜>" +
			`<steptml:invoke name="get_weather"><steptml:parameter name="city">Tōkyō, Japan</steptml:parameter><steptml:parameter name="threshold">0.50</steptml:parameter></steptml:invoke>` +
			s3CallEnd + s3CallsEnd},
	{"deepseek_v3+deepseek_v32", ReasoningDeepSeekV3, ToolDeepSeekV32, RequestInfo{ToolsGiven: true, Tools: benchTools, Thinking: ThinkingOn},
		benchThink + dsFCStart + "\n" + dsInvokeTag + ` name="get_weather">` + "\n" + dsParamTag + ` name="city" string="true">Paris, France` + dsParamEnd + "\n" +
			dsParamTag + ` name="days" string="false">3` + dsParamEnd + "\n" + dsInvokeEnd + "\n" + dsInvokeTag + ` name="get_weather">` + "\n" +
			dsParamTag + ` name="city" string="true">Tōkyō, Japan` + dsParamEnd + "\n" + dsParamTag + ` name="threshold" string="false">0.50` + dsParamEnd + "\n" +
			dsInvokeEnd + "\n" + dsFCEnd},
	{"granite+granite", ReasoningGranite, ToolGranite, RequestInfo{ToolsGiven: true},
		"Here is my thought process:" + benchThink[len("<think>"):len(benchThink)-len("</think>\n\nI'll look up the forecast for both cities.\n")] + "Here is my response:" +
			"<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, France\", \"days\": 3}}]"},
}

// benchThink is the reasoning of benchOutput, closed.
const benchThink = "<think>\nThe user wants the weather in Paris and in Tokyo for the next three days, " +
	"in Celsius. I have a get_weather tool that takes a city, a unit and a number of days. " +
	"I should call it twice, once per city, and then summarise.\n</think>\n\nI'll look up the forecast for both cities.\n"

var benchTools = []openai.ChatTool{{Type: "function", Name: "get_weather", Parameters: json.RawMessage(`{"type": "object", "properties": {
	"city": {"type": "string"}, "days": {"type": "integer"}, "include_hourly": {"type": "boolean"}, "threshold": {"type": "number"}}}`)}}

// BenchmarkParsers feeds each parser pair its reply piece by piece (the Qwen3 tokenizer's pieces
// when .cache has it, else 1-6 bytes) and reports the cost per streamed piece.
func BenchmarkParsers(b *testing.B) {
	for _, c := range parserBenchCases {
		b.Run(c.name, func(b *testing.B) {
			pieces := piecesOf(b, c.text)
			p, err := NewParsers(c.reasoning, c.tool, withRand(seqRand(1)))
			if err != nil {
				b.Fatal(err)
			}
			if c.tool != "" {
				if m := p.parse(c.req, c.text); len(m.ToolCalls) == 0 {
					b.Fatalf("%s: no call parsed: %s", c.name, show(m))
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := p.NewStream(c.req)
				for _, piece := range pieces {
					s.Feed(piece)
				}
				s.Finish()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pieces)), "ns/token")
		})
	}
}

// piecesOf splits text as a streaming detokenizer does (see benchPieces).
func piecesOf(b *testing.B, text string) []string {
	dir := filepath.Join(moduleRootDir(b), ".cache", "tokenizers", "qwen3")
	if tk, err := tokenizer.LoadDir(dir); err == nil {
		ids, err := tk.Encode(nil, text, false)
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
		return pieces
	}
	r := rand.New(rand.NewPCG(3, 3))
	var pieces []string
	for len(text) > 0 {
		n := min(len(text), 1+r.IntN(6))
		pieces = append(pieces, text[:n])
		text = text[n:]
	}
	return pieces
}
