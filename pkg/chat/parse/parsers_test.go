package parse

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

type goldenFile struct {
	Reasoning string      `json:"reasoning"`
	Tool      string      `json:"tool"`
	Cases     []parseCase `json:"cases"`
}

type parseCase struct {
	Name    string `json:"name"`
	Text    string `json:"text"`
	Request struct {
		Tools          bool   `json:"tools"`
		ToolChoice     string `json:"tool_choice"`
		NamedTool      string `json:"named_tool"`
		ReasoningEnded bool   `json:"reasoning_ended"`
		Thinking       string `json:"thinking"` // "on", "off" or "" (chat_template_kwargs)
		Schemas        []struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"schemas"` // the request's tools, for the XML formats
	} `json:"request"`
	Want   goldenMessage `json:"want"`
	Finish string        `json:"finish"`
	Note   string        `json:"note"`
}

type goldenMessage struct {
	Content   *string      `json:"content"`
	Reasoning *string      `json:"reasoning"`
	ToolCalls []goldenCall `json:"tool_calls"`
}

type goldenCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func (c parseCase) req() RequestInfo {
	var tools []openai.ChatTool
	for _, sc := range c.Request.Schemas {
		tools = append(tools, openai.ChatTool{Type: "function", Name: sc.Name, Parameters: sc.Parameters})
	}
	return RequestInfo{Tools: tools, ToolsGiven: c.Request.Tools, ToolChoice: c.Request.ToolChoice,
		NamedTool: c.Request.NamedTool, ReasoningEnded: c.Request.ReasoningEnded,
		Thinking: map[string]Thinking{"on": ThinkingOn, "off": ThinkingOff}[c.Request.Thinking]}
}

func loadGolden(t testing.TB) map[string]goldenFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	out := map[string]goldenFile{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var g goldenFile
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = g
	}
	return out
}

// seqRand is a deterministic id source: every Parsers built with the same seed makes the
// same ids in the same order.
func seqRand(seed uint64) func() uint64 {
	r := rand.New(rand.NewPCG(seed, 1))
	return r.Uint64
}

func newTestParsers(t testing.TB, reasoning, tool string, opts ...Option) *Parsers {
	t.Helper()
	p, err := NewParsers(reasoning, tool, append([]Option{withRand(seqRand(7))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func toGolden(m Message) goldenMessage {
	g := goldenMessage{Content: m.Content, Reasoning: m.Reasoning, ToolCalls: []goldenCall{}}
	for _, c := range m.ToolCalls {
		g.ToolCalls = append(g.ToolCalls, goldenCall{Name: c.Name, Arguments: c.Arguments})
	}
	return g
}

// streamParts feeds parts to a fresh stream and returns the accumulated message, its finish
// reason, and the largest number of bytes the stream held after a Feed.
func streamParts(p *Parsers, req RequestInfo, parts []string) (Message, string, int) {
	s := p.NewStream(req)
	var acc accumulator
	maxHeld := 0
	for _, part := range parts {
		acc.Add(s.Feed(part))
		maxHeld = max(maxHeld, s.held())
	}
	acc.Add(s.Finish())
	return acc.Message(s), s.FinishReason("stop"), maxHeld
}

// splits returns the ways a golden case is streamed: every split into two, byte by byte, and
// random multi-way splits.
func splits(text string, r *rand.Rand) [][]string {
	var out [][]string
	for i := 1; i < len(text); i++ {
		out = append(out, []string{text[:i], text[i:]})
	}
	var bytesEach []string
	for i := 0; i < len(text); i++ {
		bytesEach = append(bytesEach, text[i:i+1])
	}
	out = append(out, bytesEach)
	for k := 0; k < 30; k++ {
		out = append(out, randomSplit(text, r))
	}
	return out
}

func randomSplit(text string, r *rand.Rand) []string {
	var parts []string
	for len(text) > 0 {
		n := 1 + r.IntN(min(len(text), 8))
		parts = append(parts, text[:n])
		text = text[n:]
	}
	return parts
}

var toolIDPattern = regexp.MustCompile(`^chatcmpl-tool-[0-9a-f]{32}$`)
var mistralIDPattern = regexp.MustCompile(`^[A-Za-z0-9]{9}$`)
var callIDPattern = regexp.MustCompile(`^call_[0-9a-f]{24}$`)
var kimiIDPattern = regexp.MustCompile(`^[^<\s]+:[0-9]+$`)

func TestParseGolden(t *testing.T) {
	for file, g := range loadGolden(t) {
		for _, c := range g.Cases {
			t.Run(file+"/"+c.Name, func(t *testing.T) {
				p := newTestParsers(t, g.Reasoning, g.Tool)
				whole := p.parse(c.req(), c.Text)
				if diff := cmp.Diff(c.Want, toGolden(whole)); diff != "" {
					t.Errorf("Parse(%q) mismatch (-want +got):\n%s", c.Text, diff)
				}
				idPattern := toolIDPattern
				auto := c.Request.NamedTool == "" && c.Request.ToolChoice == ""
				switch {
				case g.Tool == ToolMistral && auto:
					idPattern = mistralIDPattern
				case (g.Tool == ToolQwen3Coder || g.Tool == ToolQwen3XML || g.Tool == ToolSeedOSS || g.Tool == ToolMiniMaxM2 ||
					g.Tool == ToolDeepSeekV32) && auto:
					idPattern = callIDPattern
				case g.Tool == ToolKimiK2 && auto:
					idPattern = kimiIDPattern
				}
				for _, tc := range whole.ToolCalls {
					if !idPattern.MatchString(tc.ID) {
						t.Errorf("tool call id %q, want one matching %s", tc.ID, idPattern)
					}
				}
				r := rand.New(rand.NewPCG(1, uint64(len(c.Text))))
				for _, parts := range splits(c.Text, r) {
					p := newTestParsers(t, g.Reasoning, g.Tool)
					got, finish, _ := streamParts(p, c.req(), parts)
					if diff := cmp.Diff(whole, got); diff != "" {
						t.Fatalf("streamed %q: message differs from Parse (-whole +streamed):\n%s", parts, diff)
					}
					if finish != c.Finish {
						t.Fatalf("streamed %q: got finish reason %q, want %q", parts, finish, c.Finish)
					}
				}
			})
		}
	}
}

// TestStreamDeltaShapes checks the delta sequence of one streamed call: the first entry
// carries id, type and name without arguments, later entries only arguments.
func TestStreamDeltaShapes(t *testing.T) {
	p := newTestParsers(t, ReasoningQwen3, ToolHermes)
	s := p.NewStream(RequestInfo{ToolsGiven: true})
	text := "<think>ok</think>Hi<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>"
	var deltas []Delta
	for i := 0; i < len(text); i++ {
		if d := s.Feed(text[i : i+1]); !d.Empty() {
			deltas = append(deltas, d)
		}
	}
	if d := s.Finish(); !d.Empty() {
		deltas = append(deltas, d)
	}
	var calls []ToolCallDelta
	var reasoning, content string
	for _, d := range deltas {
		calls = append(calls, d.ToolCalls...)
		reasoning += d.Reasoning
		content += d.Content
		if strings.Contains(d.Content, "<") {
			t.Errorf("content delta %q leaks a marker", d.Content)
		}
	}
	if reasoning != "ok" || content != "Hi" {
		t.Errorf("got reasoning %q content %q, want %q and %q", reasoning, content, "ok", "Hi")
	}
	if len(calls) < 2 {
		t.Fatalf("got %d tool-call entries, want a header and argument fragments", len(calls))
	}
	first := calls[0]
	if first.ID == "" || first.Type != "function" || first.Name != "f" || first.Arguments != "" {
		t.Errorf("first entry %+v, want id, type function, name f and no arguments", first)
	}
	args := ""
	for _, c := range calls[1:] {
		if c.ID != "" || c.Type != "" || c.Name != "" || c.Index != 0 {
			t.Errorf("later entry %+v carries more than index and arguments", c)
		}
		args += c.Arguments
	}
	if want := `{"a": [1, 2]}`; args != want {
		t.Errorf("got arguments %q, want %q", args, want)
	}
	if len(calls) < 4 {
		t.Errorf("arguments came in %d fragments, want them streamed as they arrive", len(calls)-1)
	}
}

func TestNewParsersNames(t *testing.T) {
	tests := []struct {
		reasoning, tool string
		wantErr         string
	}{
		{"qwen3", "hermes", ""},
		{"", "", ""},
		{"openai_gptoss", "openai", ""},
		{"openai_gptoss", "", ""},
		{"", "openai", ""},
		{"deepseek_r1", "deepseek_v3", ""},
		{"gptoss", "", "valid: deepseek_r1, deepseek_v3, glm45, glm47, granite, kimi_k2, minimax_m2, minimax_m2_append_think, mistral, openai_gptoss, qwen3, seed_oss, step3"},
		{"", "llama3", "valid: deepseek_v3, deepseek_v31, deepseek_v32, glm45, glm47, granite, hermes, kimi_k2, llama3_json, llama4_pythonic, minimax_m2, mistral, openai, pythonic, qwen3_coder, qwen3_xml, seed_oss, step3"},
		{"qwen3", "openai", "do not combine"},
		{"openai_gptoss", "hermes", "do not combine"},
	}
	for _, tt := range tests {
		t.Run(tt.reasoning+"+"+tt.tool, func(t *testing.T) {
			_, err := NewParsers(tt.reasoning, tt.tool)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got error %v, want one containing %q", err, tt.wantErr)
			case strings.HasPrefix(tt.wantErr, "valid") && !errors.Is(err, ErrUnknownParser):
				t.Errorf("got error %v, want it to wrap ErrUnknownParser", err)
			}
		})
	}
}

func TestDefaultParserNames(t *testing.T) {
	tests := []struct{ family, reasoning, tool string }{
		{"Qwen/Qwen3-8B", "qwen3", "hermes"},
		{"qwen3_moe", "qwen3", "hermes"},
		{"Qwen/Qwen3-Coder-30B-A3B-Instruct", "", "qwen3_coder"},
		{"Qwen/Qwen3.5-27B", "qwen3", "qwen3_coder"},
		{"deepseek-ai/DeepSeek-R1-0528", "deepseek_r1", "deepseek_v3"},
		{"deepseek-ai/DeepSeek-V3-0324", "", "deepseek_v3"},
		{"deepseek_v3", "", "deepseek_v3"},
		{"deepseek-ai/DeepSeek-V3.1", "deepseek_v3", "deepseek_v31"},
		{"deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v3", "deepseek_v32"},
		{"deepseek-ai/DeepSeek-V4-Flash", "", ""},
		{"zai-org/GLM-4.5-Air", "glm45", "glm45"},
		{"glm4_moe", "glm45", "glm45"},
		{"zai-org/GLM-4.7", "glm47", "glm47"},
		{"moonshotai/Kimi-K2-Thinking", "kimi_k2", "kimi_k2"},
		{"moonshotai/Kimi-K2-Instruct-0905", "", "kimi_k2"},
		{"MiniMaxAI/MiniMax-M2", "minimax_m2_append_think", "minimax_m2"},
		{"ByteDance-Seed/Seed-OSS-36B-Instruct", "seed_oss", "seed_oss"},
		{"stepfun-ai/step3", "step3", "step3"},
		{"mistralai/Magistral-Small-2509", "mistral", "mistral"},
		{"ibm-granite/granite-3.3-8b-instruct", "granite", "granite"},
		{"ibm-granite/granite-3.2-8b-instruct", "granite", "granite"},
		{"ibm-granite/granite-3.1-8b-instruct", "", "granite"},
		{"ibm-granite/granite-4.0-h-small", "", "hermes"},
		{"meta-llama/Llama-3.1-8B-Instruct", "", "llama3_json"},
		{"/models/llama3_3-70b", "", "llama3_json"},
		{"meta-llama/Llama-4-Scout-17B-16E", "", "llama4_pythonic"},
		{"mistralai/Mistral-Small-3.2-24B-Instruct-2506", "", "mistral"},
		{"openai/gpt-oss-120b", "openai_gptoss", "openai"},
		{"gpt_oss", "openai_gptoss", "openai"},
		{"google/gemma-3-27b-it", "", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			r, tl := DefaultParserNames(tt.family, "gemma3")
			if r != tt.reasoning || tl != tt.tool {
				t.Errorf("got (%q, %q), want (%q, %q)", r, tl, tt.reasoning, tt.tool)
			}
			if _, err := NewParsers(r, tl); err != nil {
				t.Errorf("defaults do not construct: %v", err)
			}
		})
	}
}

// TestDefaultParserNamesHints: the first hint naming a known family decides, a known
// plain-content family included; unknown hints fall through.
func TestDefaultParserNamesHints(t *testing.T) {
	tests := []struct {
		hints           []string
		reasoning, tool string
	}{
		{[]string{"my-model", "qwen3"}, "qwen3", "hermes"},
		{[]string{"Qwen3-Coder-30B-A3B-Instruct", "qwen3_moe"}, "", "qwen3_coder"},
		{[]string{"Llama-3.1-8B-Instruct", "llama"}, "", "llama3_json"},
		{[]string{"gemma-3-27b-it", "gemma3_text", "llama"}, "", ""},
		{nil, "", ""},
	}
	for _, tt := range tests {
		if r, tl := DefaultParserNames(tt.hints...); r != tt.reasoning || tl != tt.tool {
			t.Errorf("%q: got (%q, %q), want (%q, %q)", tt.hints, r, tl, tt.reasoning, tt.tool)
		}
	}
}

func TestSkipSpecialTokens(t *testing.T) {
	tools := RequestInfo{ToolsGiven: true}
	none := RequestInfo{ToolsGiven: true, ToolChoice: "none"}
	tests := []struct {
		reasoning, tool string
		req             RequestInfo
		want            bool
	}{
		{"qwen3", "hermes", tools, false},
		{"qwen3", "hermes", none, true},
		{"qwen3", "hermes", RequestInfo{}, true},
		{"", "mistral", tools, false},
		{"", "llama3_json", tools, true},
		{"deepseek_r1", "deepseek_v3", tools, true},
		{"openai_gptoss", "openai", RequestInfo{}, false},
		{"", "", tools, true},
	}
	for _, tt := range tests {
		t.Run(tt.reasoning+"+"+tt.tool, func(t *testing.T) {
			p := newTestParsers(t, tt.reasoning, tt.tool)
			if got := p.SkipSpecialTokens(tt.req); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPromptEndsReasoning(t *testing.T) {
	tests := []struct {
		prompt string
		want   bool
	}{
		{"<|im_start|>assistant\n<think>\n\n</think>\n\n", true},
		{"<|im_start|>assistant\n<think>\n", false},
		{"<|im_start|>assistant\n", false},
		{"old turn <think>a</think> b <|im_start|>assistant\n<think>\n", false},
	}
	for _, tt := range tests {
		if got := PromptEndsReasoning(tt.prompt); got != tt.want {
			t.Errorf("PromptEndsReasoning(%q) = %v, want %v", tt.prompt, got, tt.want)
		}
	}
}

func TestMultipleChoicesAreIndependent(t *testing.T) {
	p := newTestParsers(t, ReasoningQwen3, ToolHermes)
	req := RequestInfo{ToolsGiven: true}
	a, b := p.NewStream(req), p.NewStream(req)
	var accA, accB accumulator
	accA.Add(a.Feed("think</think><tool_call>{\"name\": \"f\", \"argu"))
	accB.Add(b.Feed("other</think>plain "))
	accA.Add(a.Feed("ments\": {}}</tool_call>"))
	accB.Add(b.Feed("text"))
	accA.Add(a.Finish())
	accB.Add(b.Finish())
	ma, mb := accA.Message(a), accB.Message(b)
	if len(ma.ToolCalls) != 1 || ma.ToolCalls[0].Name != "f" || mb.ToolCalls != nil || *mb.Content != "plain text" {
		t.Errorf("got %+v and %+v, want choice 0 to call f and choice 1 to be plain text", ma, mb)
	}
	if a.FinishReason("stop") != "tool_calls" || b.FinishReason("stop") != "stop" || a.FinishReason("length") != "length" {
		t.Errorf("finish reasons %q %q %q, want tool_calls stop length", a.FinishReason("stop"), b.FinishReason("stop"), a.FinishReason("length"))
	}
}

// TestBoundedHolding streams long outputs in 1 KiB pieces and checks how much a stream holds:
// plain text, reasoning and committed arguments are passed on as they come; an uncommitted
// call is held only up to MaxCallBytes, then becomes content.
func TestBoundedHolding(t *testing.T) {
	const limit = 16 << 10
	const piece = 1 << 10
	long := strings.Repeat("abc <tool_cal x ", 1<<14) // 256 KiB with near-markers
	tests := []struct {
		name, reasoning, tool string
		req                   RequestInfo
		text                  string
		bound                 int
		wantCalls             int
	}{
		{"content", "", ToolHermes, toolsReq, long, 64, 0},
		{"reasoning", ReasoningQwen3, "", RequestInfo{}, long + "</think>" + long, 64, 0},
		{"committed arguments", "", ToolHermes, toolsReq,
			`<tool_call>{"name": "f", "arguments": {"s": "` + strings.Repeat("x\\u00e9", 1<<16) + `"}}</tool_call>`, 64, 1},
		{"name that never ends", "", ToolHermes, toolsReq, `<tool_call>{"name": "` + strings.Repeat("n", 4*limit), 2*limit + 2*piece, 0},
		{"arguments before the name", "", ToolHermes, toolsReq,
			`<tool_call>{"arguments": [` + strings.Repeat("1, ", 2*limit) + `1], "name": "f"}</tool_call>`, 2*limit + 2*piece, 0},
		{"llama arguments", "", ToolLlama3JSON, toolsReq, `{"name": "f", "parameters": [` + strings.Repeat("1.50, ", 1<<15) + `2]}`, 64, 1},
		{"harmony", ReasoningGptOss, ToolOpenAI, toolsReq, "<|channel|>analysis<|message|>" + long + "<|end|>", 64, 0},
		{"deepseek name", "", ToolDeepSeekV3, toolsReq, dsCallsBegin + dsCallBegin + "function" + dsSep + strings.Repeat("n", 4*limit), 2*limit + 2*piece, 0},
		{"step3 call", "", ToolStep3, toolsReq, s3CallsBegin + s3CallBegin + `<steptml:invoke name="f">` + strings.Repeat("p", 4*limit) + s3CallEnd, limit + 2*piece, 1},
		{"dsml string", "", ToolDeepSeekV32, toolsReq, dsFCStart + dsInvokeTag + ` name="f">` + dsParamTag + ` name="s" string="true">` + strings.Repeat("\u00e9", 4*limit), 64, 1},
		{"dsml held value", "", ToolDeepSeekV32, toolsReq, dsFCStart + dsInvokeTag + ` name="f">` + dsParamTag + ` name="s" string="false">` + strings.Repeat("1", 4*limit), limit + 2*piece, 1},
		{"dsml tag", "", ToolDeepSeekV32, toolsReq, dsFCStart + dsInvokeTag + ` name="` + strings.Repeat("n", 4*limit), limit + 2*piece, 0},
		{"dsml orphan whitespace", "", ToolDeepSeekV32, RequestInfo{ToolsGiven: true, Tools: benchTools},
			dsOrphan + `get_weather">` + dsInvokeEnd + strings.Repeat(" ", 4*limit) + "x", limit + 2*piece, 1},
		{"step3 header", "", ToolStep3, toolsReq, s3CallsBegin + s3CallBegin + `<steptml:invoke name="` + strings.Repeat("n", 4*limit), limit + 2*piece, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestParsers(t, tt.reasoning, tt.tool, withMaxCallBytes(limit))
			var parts []string
			for s := tt.text; len(s) > 0; {
				n := min(piece, len(s))
				parts = append(parts, s[:n])
				s = s[n:]
			}
			m, _, held := streamParts(p, tt.req, parts)
			if held > tt.bound {
				t.Errorf("held %d bytes, want at most %d", held, tt.bound)
			}
			if len(m.ToolCalls) != tt.wantCalls {
				t.Errorf("got %d calls, want %d", len(m.ToolCalls), tt.wantCalls)
			}
		})
	}
}
