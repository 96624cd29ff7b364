package parse

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The fuzz targets feed arbitrary text, split at arbitrary points (from the seed), to one
// parser and check, per parser:
//
//  1. no panic, and the streamed message equals Parsers.parse of the whole text (ids included),
//     with arguments re-formatted and verbatim;
//  2. bounded buffering: after every Feed the stream holds at most fuzzHeldBound bytes
//     (markers, the implicit-end lookahead, and MaxCallBytes, set to fuzzLimit, per pending
//     call part, plus one Feed's worth);
//  3. nothing invented (verbatim arguments): every byte of content, reasoning and arguments
//     comes from the text, as a multiset, except the documented additions (Harmony's "\n"
//     between joined messages, mistral's "{}" for absent arguments); and content, reasoning
//     and each call's arguments are each a subsequence of the text (not for Harmony, whose
//     joins insert "\n");
//  4. nothing lost when no call is made: content (and reasoning) account for the text exactly,
//     less only the markers the parser consumes:
//     - think parsers: reasoning = the text before the first "</think>" with every "<think>"
//     removed, content = the text after it (the whole text is reasoning without "</think>");
//     - hermes, llama3_json: content = the text;
//     - mistral: content = the text, when it has no "[TOOL_CALLS]" (a "[TOOL_CALLS] []"
//     array makes no call but is consumed);
//     - deepseek_v3: content = the text, when it has no "<｜tool▁calls▁begin｜>" (the calls
//     block's markers and whitespace are consumed);
//     - Harmony: not checked (messages on other channels and built-in tool calls are dropped
//     by design); properties 1-3 apply.
//
// Special-token stripping is off in the fuzzers (withStripTokens(nil)) so property 4 is exact.

const (
	fuzzLimit     = 32
	fuzzMaxChunk  = 8
	fuzzHeldBound = 3*(fuzzLimit+6*fuzzMaxChunk) + 160
)

type fuzzSpec struct {
	reasoning, tool string
	req             RequestInfo
}

func fuzzSplit(text string, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed>>7))
	var parts []string
	for len(text) > 0 {
		n := 1 + r.IntN(min(len(text), fuzzMaxChunk))
		parts = append(parts, text[:n])
		text = text[n:]
	}
	return parts
}

func checkParser(t *testing.T, spec fuzzSpec, text string, seed uint64) {
	parts := fuzzSplit(text, seed)
	for _, raw := range []bool{false, true} {
		opts := []Option{withMaxCallBytes(fuzzLimit), withStripTokens(nil)}
		if raw {
			opts = append(opts, WithRawArguments())
		}
		whole := newTestParsers(t, spec.reasoning, spec.tool, opts...).parse(spec.req, text)
		got, _, held := streamParts(newTestParsers(t, spec.reasoning, spec.tool, opts...), spec.req, parts)
		if !reflect.DeepEqual(whole, got) {
			t.Fatalf("raw=%v: streamed %q gives %s, Parse gives %s", raw, parts, show(got), show(whole))
		}
		if held > fuzzHeldBound {
			t.Fatalf("raw=%v: stream held %d bytes, want at most %d", raw, held, fuzzHeldBound)
		}
		if raw {
			checkNoInvention(t, spec, text, whole)
		}
		if len(whole.ToolCalls) == 0 {
			checkNoLoss(t, spec, text, whole)
		}
	}
}

func show(m Message) string {
	b, _ := json.Marshal(m)
	return string(b)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func isSubsequence(sub, s string) bool {
	j := 0
	for i := 0; i < len(s) && j < len(sub); i++ {
		if s[i] == sub[j] {
			j++
		}
	}
	return j == len(sub)
}

func checkNoInvention(t *testing.T, spec fuzzSpec, text string, m Message) {
	var avail [256]int
	for i := 0; i < len(text); i++ {
		avail[text[i]]++
	}
	harmony := spec.tool == ToolOpenAI || spec.reasoning == ReasoningGptOss
	if harmony {
		avail['\n'] += 1 << 20
	}
	if spec.reasoning == ReasoningMiniMaxM2AppendThink {
		text = thinkStart + text // the parser's documented addition
		for i := 0; i < len(thinkStart); i++ {
			avail[thinkStart[i]]++
		}
	}
	if spec.tool == ToolMistral {
		avail['{'] += len(m.ToolCalls)
		avail['}'] += len(m.ToolCalls)
	}
	pieces := []string{deref(m.Content), deref(m.Reasoning)}
	for _, c := range m.ToolCalls {
		if xmlTool(spec.tool) {
			// the XML formats build their arguments: a JSON object, whatever the text
			var obj map[string]any
			if err := json.Unmarshal([]byte(c.Arguments), &obj); err != nil {
				t.Fatalf("text %q: arguments %q are not a JSON object: %v", text, c.Arguments, err)
			}
			continue
		}
		pieces = append(pieces, c.Arguments)
	}
	for _, p := range pieces {
		for i := 0; i < len(p); i++ {
			avail[p[i]]--
			if avail[p[i]] < 0 {
				t.Fatalf("output byte %q occurs more often than in the text %q: %s", p[i], text, show(m))
			}
		}
		if !harmony && !isSubsequence(p, text) {
			t.Fatalf("output %q is not a subsequence of the text %q", p, text)
		}
	}
}

func checkNoLoss(t *testing.T, spec fuzzSpec, text string, m Message) {
	content, ok := reasoningModel(t, spec, text, m)
	if !ok {
		return
	}
	switch spec.tool {
	case ToolOpenAI:
		return
	case ToolMistral:
		if strings.Contains(content, mistralCalls) {
			return
		}
	case ToolDeepSeekV3, ToolDeepSeekV31:
		if strings.Contains(content, dsCallsBegin) {
			return
		}
	case ToolGranite:
		rest := strings.TrimLeft(content, " \t\r\n")
		for _, m := range graniteBOT {
			rest = strings.TrimLeft(strings.TrimPrefix(rest, m), " \t\r\n")
		}
		if strings.HasPrefix(rest, "[") {
			return // an array that makes no call ("[]") is consumed
		}
	case ToolDeepSeekV32:
		if strings.Contains(content, dsFCStart) {
			return // the block's markers and text outside calls are consumed
		}
	case ToolStep3:
		if strings.Contains(content, s3CallsBegin) {
			return // the block's markers and text outside calls are consumed
		}
	case ToolMiniMaxM2:
		if strings.Contains(content, mmBlockOpen) {
			return // the block's markers and whitespace are consumed
		}
	case ToolKimiK2:
		if strings.Contains(content, kimiSectionBegin) {
			return // the section's markers and whitespace are consumed
		}
	}
	if spec.req.NamedTool != "" || spec.req.ToolChoice == "required" {
		return
	}
	if got := deref(m.Content); got != content {
		t.Fatalf("text %q: got content %q, want %q (%s)", text, got, content, show(m))
	}
}

// reasoningModel checks the reasoning of m against the rules of spec's reasoning parser
// (think.go) applied to the whole text, and returns the content the tool stage was given; ok
// is false when the text holds an implicit end marker, which needs its own model (the golden
// cases cover it).
func reasoningModel(t *testing.T, spec fuzzSpec, text string, m Message) (string, bool) {
	p := &Parsers{reasoning: spec.reasoning}
	if spec.reasoning == ReasoningMiniMaxM2AppendThink {
		return thinkStart + text, true
	}
	sp := thinkSpecs[spec.reasoning]
	if sp == nil || !p.thinkOn(spec.req) {
		return text, true
	}
	if (sp == &specQwen3 && strings.Contains(text, toolCallOpen)) || (sp == &specKimi && strings.Contains(text, kimiSectionBegin)) {
		return "", false
	}
	if sp.leading {
		return leadingModel(t, spec, sp, text, m), true
	}
	pre, body, found := "", text, true
	if !sp.inside {
		pre, body, found = strings.Cut(text, sp.start)
		pre = strings.ReplaceAll(pre, sp.end, "")
		if !found {
			body = ""
		}
	}
	wantR, after, ended := body, "", false
	if found {
		wantR, after, ended = strings.Cut(body, sp.end)
		if sp.dropStart {
			wantR = strings.ReplaceAll(wantR, sp.start, "")
		}
	}
	if got := deref(m.Reasoning); got != wantR {
		t.Fatalf("%s, text %q: got reasoning %q, want %q", spec.reasoning, text, got, wantR)
	}
	if !ended {
		after = ""
	}
	return pre + after, true
}

// leadingModel is reasoningModel for a leading start marker with second spellings (granite):
// reasoning only when the text opens with a start marker, up to the first end marker of
// either spelling.
func leadingModel(t *testing.T, spec fuzzSpec, sp *thinkSpec, text string, m Message) string {
	body, found := strings.CutPrefix(text, sp.start)
	if !found {
		body, found = strings.CutPrefix(text, sp.start2)
	}
	wantR, after := "", text
	if found {
		wantR, after = body, ""
		i, n := strings.Index(body, sp.end), len(sp.end)
		if j := strings.Index(body, sp.end2); j >= 0 && (i < 0 || j < i) {
			i, n = j, len(sp.end2)
		}
		if i >= 0 {
			wantR, after = body[:i], body[i+n:]
		}
	}
	if got := deref(m.Reasoning); got != wantR {
		t.Fatalf("%s, text %q: got reasoning %q, want %q", spec.reasoning, text, got, wantR)
	}
	return after
}

func xmlTool(name string) bool {
	switch name {
	case ToolQwen3Coder, ToolQwen3XML, ToolGLM45, ToolGLM47, ToolSeedOSS, ToolMiniMaxM2, ToolPythonic, ToolLlama4Pythonic,
		ToolStep3, ToolDeepSeekV32:
		return true
	}
	return false
}

func addSeeds(f *testing.F, file string, extra ...string) {
	g := loadGolden(f)[file]
	for i, c := range g.Cases {
		f.Add(c.Text, uint64(i))
	}
	for i, s := range extra {
		f.Add(s, uint64(100+i))
	}
}

var toolsReq = RequestInfo{ToolsGiven: true}

func FuzzParseHermes(f *testing.F) {
	addSeeds(f, "hermes", "<tool_call><tool_call>{\"name\":\"a\",\"arguments\":1}", "</think><tool_call>{\"arguments\": [\"\\ud800\\udc00\", 1e999]}")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{ReasoningQwen3, ToolHermes, toolsReq}, text, seed)
		checkParser(t, fuzzSpec{"", ToolHermes, toolsReq}, text, seed)
	})
}

func FuzzParseQwen3(f *testing.F) {
	addSeeds(f, "hermes", "<think><think></think>", "a<tool_call>   <function=x")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{ReasoningQwen3, "", RequestInfo{}}, text, seed)
		checkParser(t, fuzzSpec{ReasoningDeepSeekR1, "", RequestInfo{}}, text, seed)
	})
}

// FuzzParseReasoning runs every marker reasoning parser (and append-think) alone, with the
// thinking switch unset, on and off.
func FuzzParseReasoning(f *testing.F) {
	for _, file := range []string{"r_glm45", "r_kimi_k2", "r_mistral", "r_seed_oss", "r_step3", "r_deepseek_v3", "r_minimax_m2_append_think", "r_granite"} {
		addSeeds(f, file)
	}
	f.Add("[/THINK][THINK][THINK]a[/THINK][/THINK]", uint64(9))
	f.Add("<seed:think><think></seed:think></think>", uint64(10))
	f.Add("Here's my thought process:Here is my thoughtHere's my responseHere is my response:", uint64(8))
	names := []string{ReasoningDeepSeekV3, ReasoningGLM45, ReasoningKimiK2, ReasoningMiniMaxM2,
		ReasoningMiniMaxM2AppendThink, ReasoningMistral, ReasoningStep3, ReasoningSeedOSS, ReasoningGranite}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		name := names[seed%uint64(len(names))]
		th := []Thinking{ThinkingUnset, ThinkingOn, ThinkingOff}[(seed/8)%3]
		checkParser(t, fuzzSpec{name, "", RequestInfo{Thinking: th}}, text, seed)
	})
}

// fuzzSchemas types the XML formats' parameters in the fuzzers: every class of xmlvalue.go.
var fuzzSchemas = []openai.ChatTool{{Type: "function", Name: "f", Parameters: json.RawMessage(`{"properties": {
	"s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
	"o": {"type": "object"}, "a": {"type": "array"}, "u": {"anyOf": [{"type": "null"}, {"type": "string"}]}, "x": {"type": "other"}}}`)}}

func FuzzParseQwen3Coder(f *testing.F) {
	addSeeds(f, "qwen3_coder", "<tool_call><function=f><parameter=i>1_0<parameter=o>{\"a\": 1e5}</function>",
		"<tool_call>\n<function=f>\n<parameter=s>\n\xe6\x97</parameter><parameter=n>\n-0.0\n</tool_call> x")
	req := RequestInfo{ToolsGiven: true, Tools: fuzzSchemas}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolQwen3Coder, req}, text, seed)
		checkParser(t, fuzzSpec{ReasoningQwen3, ToolQwen3Coder, req}, text, seed)
	})
}

func FuzzParseMiniMaxM2(f *testing.F) {
	addSeeds(f, "minimax_m2", "<minimax:tool_call><invoke name=f><parameter name=i>1_0</parameter><parameter name=o>{\"a\": 1e5}</parameter></invoke>")
	req := RequestInfo{ToolsGiven: true, Tools: fuzzSchemas}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolMiniMaxM2, req}, text, seed)
		checkParser(t, fuzzSpec{ReasoningMiniMaxM2, ToolMiniMaxM2, req}, text, seed)
	})
}

func FuzzParseGranite(f *testing.F) {
	addSeeds(f, "granite", " <|tool_call|> [{\"name\": \"f\", \"arguments\": 1}, 2]", "<tool_call")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolGranite, toolsReq}, text, seed)
	})
}

func FuzzParsePythonic(f *testing.F) {
	addSeeds(f, "llama4_pythonic", "[f(a={1.5: [None, 'x\\x41']}, b=-0, c=1_0.5e3), g()]", "<|python_start|>[f(a=\"\\U0001F600\")]")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolPythonic, toolsReq}, text, seed)
		checkParser(t, fuzzSpec{"", ToolLlama4Pythonic, toolsReq}, text, seed)
	})
}

func FuzzParseSeedOSS(f *testing.F) {
	addSeeds(f, "seed_oss", "<seed:tool_call><function=f><parameter=i>1_0<parameter=o>{\"a\": 1e5}</function>")
	req := RequestInfo{ToolsGiven: true, Tools: fuzzSchemas}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{ReasoningSeedOSS, ToolSeedOSS, req}, text, seed)
	})
}

func FuzzParseGLM(f *testing.F) {
	addSeeds(f, "glm45", "<tool_call>f<arg_key>s</arg_key> <arg_value>\xe6\x97</arg_value><arg_key>i</arg_key>",
		"<tool_call> \n</tool_call><tool_call>f\n<arg_key>o</arg_key><arg_value>{\"a\": 1e5}</tool_call> x")
	req := RequestInfo{ToolsGiven: true, Tools: fuzzSchemas}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolGLM45, req}, text, seed)
		checkParser(t, fuzzSpec{ReasoningGLM47, ToolGLM47, req}, text, seed)
	})
}

// step3Fuzz types step3's parameters in its fuzzer: every type _cast_arguments reads.
var step3Fuzz = []openai.ChatTool{{Type: "function", Name: "f", Parameters: json.RawMessage(`{"properties": {
	"s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
	"z": {"type": "null"}, "o": {"type": "object"}}}`)}}

func FuzzParseStep3(f *testing.F) {
	addSeeds(f, "step3", s3CallsBegin+s3CallBegin+`<steptml:parameter name="i"> 1_0 </steptml:parameter><steptml:invoke name="f">`+
		`<steptml:parameter name="n">1e400</steptml:parameter><steptml:parameter name="<steptml:parameter name="b">TrUe</steptml:parameter>`,
		s3CallsBegin+s3CallBegin+`<steptml:invoke name="<steptml:invoke name="f">`+s3CallEnd+s3CallsEnd+s3CallsBegin)
	req := RequestInfo{ToolsGiven: true, Tools: step3Fuzz}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolStep3, req}, text, seed)
		checkParser(t, fuzzSpec{ReasoningStep3, ToolStep3, req}, text, seed)
	})
}

// dsmlFuzz types deepseek_v32's parameters in its fuzzer: every coercion, but no object or
// array type, whose values vLLM streams raw (so that the arguments are always a JSON object).
var dsmlFuzz = []openai.ChatTool{{Type: "function", Name: "f", Parameters: json.RawMessage(`{"properties": {
	"s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
	"u": {"type": ["null", "integer"]}, "x": {"type": "other"}}}`)}}

func FuzzParseDeepSeekV32(f *testing.F) {
	addSeeds(f, "deepseek_v32", dsFCStart+dsInvokeTag+"\u3000name=\"f\" >"+dsParamTag+` name="arguments" string="false">{"i": 1e999}`+dsParamEnd,
		dsFCStart+dsInvokeTag+` name="f">`+dsParamTag+` name="s"  string="true" >\xe6\x97`+dsParamEnd+dsParamTag+` name="u" string="false">NaN`,
		"a"+dsOrphan+`f">`+dsParamTag+` name="i" string="false">2`+dsParamEnd+dsInvokeEnd+" \u3000 "+dsFCEnd+dsOrphan+`f"`+dsForeignStart+dsOrphan+"f\">"+dsForeignEnd)
	req := RequestInfo{ToolsGiven: true, Tools: dsmlFuzz}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolDeepSeekV32, req}, text, seed)
		checkParser(t, fuzzSpec{ReasoningDeepSeekV3, ToolDeepSeekV32, RequestInfo{ToolsGiven: true, Tools: dsmlFuzz, Thinking: ThinkingOn}}, text, seed)
	})
}

func FuzzParseKimiK2(f *testing.F) {
	addSeeds(f, "kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|> a:1 <|tool_call_argument_begin|>   x  y   <|tool_call_begin|>")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolKimiK2, toolsReq}, text, seed)
		checkParser(t, fuzzSpec{ReasoningKimiK2, ToolKimiK2, toolsReq}, text, seed)
	})
}

func FuzzParseDeepSeekV31(f *testing.F) {
	addSeeds(f, "deepseek_v31")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolDeepSeekV31, toolsReq}, text, seed)
		checkParser(t, fuzzSpec{ReasoningDeepSeekV3, ToolDeepSeekV31, RequestInfo{ToolsGiven: true, Thinking: ThinkingOn}}, text, seed)
	})
}

func FuzzParseLlama3JSON(f *testing.F) {
	addSeeds(f, "llama3_json", "<|python_tag|>{\"name\": \"f\", \"parameters\": {}} ; {\"name\"")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolLlama3JSON, toolsReq}, text, seed)
	})
}

func FuzzParseDeepSeekV3(f *testing.F) {
	addSeeds(f, "deepseek_v3")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolDeepSeekV3, toolsReq}, text, seed)
		checkParser(t, fuzzSpec{ReasoningDeepSeekR1, ToolDeepSeekV3, toolsReq}, text, seed)
	})
}

func FuzzParseMistral(f *testing.F) {
	addSeeds(f, "mistral", "[TOOL_CALLS][ARGS][TOOL_CALLS]{", "[TOOL_CALLS] [{\"name\": \"f\"}, 3]")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolMistral, toolsReq}, text, seed)
	})
}

func FuzzParseOpenAI(f *testing.F) {
	addSeeds(f, "openai", "<|channel|>final<|message|>a<|start|>b<|channel|>analysis<|message|>c")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{ReasoningGptOss, ToolOpenAI, toolsReq}, text, seed)
	})
}

func FuzzParseToolChoice(f *testing.F) {
	addSeeds(f, "tool_choice")
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		checkParser(t, fuzzSpec{"", ToolHermes, RequestInfo{ToolsGiven: true, ToolChoice: "required"}}, text, seed)
		checkParser(t, fuzzSpec{ReasoningQwen3, ToolHermes, RequestInfo{ToolsGiven: true, NamedTool: "f"}}, text, seed)
	})
}

// FuzzJSONCanon checks the re-formatter against encoding/json: a value Go accepts must be
// accepted, and its re-formatted text must decode to the same value (floats compared as
// float64, so Python's repr spellings are checked for round-tripping).
func FuzzJSONCanon(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.50, -0, 1e400, "\u00e9\ud83d\ude00"]}`, `"x\\y\/"`, `-0.0`, `123456789012345678901234567890`, `[{}, [], null, true]`, `1E-7`} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		var want any
		if json.Unmarshal([]byte(text), &want) != nil || nesting(text) > maxJSONDepth-1 {
			return
		}
		for _, ascii := range []bool{false, true} {
			m := jsonMachine{ascii: ascii, limit: 1 << 20}
			m.reset()
			var out []byte
			done := false
			for _, part := range fuzzSplit(text, seed) {
				if done {
					if strings.TrimLeft(part, " \t\r\n") != "" {
						t.Fatalf("done before the end of %q", text)
					}
					continue
				}
				n, ev := m.feed([]byte(part))
				out = append(out, m.out...)
				m.out = m.out[:0]
				if ev == jErr {
					t.Fatalf("ascii=%v: %q rejected at %q", ascii, text, part[n:])
				}
				if ev == jDone {
					done = true
					if strings.TrimLeft(part[n:], " \t\r\n") != "" {
						t.Fatalf("done before the end of %q", text)
					}
				}
			}
			if !done {
				done = m.end()
				out = append(out, m.out...)
			}
			if !done {
				t.Fatalf("ascii=%v: %q not complete", ascii, text)
			}
			var got any
			if err := json.Unmarshal(out, &got); err != nil {
				if strings.Contains(string(out), "Infinity") {
					return // 1e400 is Infinity for Python, not JSON for Go
				}
				t.Fatalf("ascii=%v: %q re-formatted to invalid %q: %v", ascii, text, out, err)
			}
			if !jsonEqual(want, got) {
				t.Fatalf("ascii=%v: %q re-formatted to %q: value differs", ascii, text, out)
			}
		}
	})
}

func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || (math.IsNaN(x) && math.IsNaN(y)))
	case string:
		y, ok := b.(string)
		// Go decodes a lone surrogate escape to U+FFFD; both sides do the same here.
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if !jsonEqual(v, y[k]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// nesting returns an upper bound of the bracket nesting of a JSON text.
func nesting(s string) int {
	d, most := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '{':
			d++
			most = max(most, d)
		case ']', '}':
			d--
		}
	}
	return most
}
