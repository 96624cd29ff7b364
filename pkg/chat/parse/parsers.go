package parse

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// ErrUnknownParser is wrapped by NewParsers for a reasoning or tool parser name it does not know.
var ErrUnknownParser = errors.New("chat: unknown parser")

// toolMode is how a stream treats tool calls for one request.
type toolMode uint8

const (
	toolsOff      toolMode = iota // no tool parsing: everything after reasoning is content
	toolsAuto                     // the tool parser's own format
	toolsNamed                    // named tool_choice: the output is the arguments
	toolsRequired                 // tool_choice "required": a JSON array of {name, parameters}
)

func (p *Parsers) toolMode(req RequestInfo) toolMode {
	if !req.ToolsGiven || (req.ToolChoice == "none" && req.NamedTool == "") {
		return toolsOff
	}
	switch {
	case req.NamedTool != "":
		return toolsNamed
	case req.ToolChoice == "required":
		return toolsRequired
	case p.tool == "":
		return toolsOff
	}
	return toolsAuto
}

// Reasoning parser names, as vLLM spells them (vllm/reasoning/__init__.py).
const (
	ReasoningQwen3      = "qwen3"
	ReasoningDeepSeekR1 = "deepseek_r1"
	ReasoningGptOss     = "openai_gptoss"
	ReasoningDeepSeekV3 = "deepseek_v3" // V3.1+: R1's rules when the request turns thinking on, else none
	ReasoningGLM45      = "glm45"
	ReasoningGLM47      = "glm47"
	ReasoningKimiK2     = "kimi_k2"
	ReasoningMiniMaxM2  = "minimax_m2"
	// ReasoningMiniMaxM2AppendThink keeps reasoning in the content, "<think>" put back in front.
	ReasoningMiniMaxM2AppendThink = "minimax_m2_append_think"
	ReasoningMistral              = "mistral"
	ReasoningStep3                = "step3"
	ReasoningSeedOSS              = "seed_oss"
	// ReasoningGranite splits Granite 3.2+ output at its plain-text markers ("Here is my
	// thought process:" ... "Here is my response:").
	ReasoningGranite = "granite"
)

// thinkSpecs maps the marker-delimited reasoning parsers to their rules (think.go).
var thinkSpecs = map[string]*thinkSpec{
	ReasoningQwen3: &specQwen3, ReasoningDeepSeekR1: &specThink, ReasoningDeepSeekV3: &specThink,
	ReasoningGLM45: &specThink, ReasoningGLM47: &specThink, ReasoningKimiK2: &specKimi,
	ReasoningMiniMaxM2: &specThink, ReasoningMistral: &specMistralR, ReasoningStep3: &specStep3,
	ReasoningSeedOSS: &specSeedOSS, ReasoningGranite: &specGranite,
}

// Tool-call parser names, as vLLM spells them (vllm/tool_parsers/__init__.py).
const (
	ToolHermes     = "hermes"
	ToolLlama3JSON = "llama3_json"
	ToolDeepSeekV3 = "deepseek_v3"
	ToolMistral    = "mistral"
	ToolOpenAI     = "openai"
	ToolQwen3Coder = "qwen3_coder"
	ToolQwen3XML   = "qwen3_xml"
	ToolGLM45      = "glm45"
	ToolGLM47      = "glm47"
	ToolKimiK2     = "kimi_k2"
	// ToolDeepSeekV31 parses DeepSeek V3.1's calls (and V3.2's when not DSML).
	ToolDeepSeekV31 = "deepseek_v31"
	// ToolDeepSeekV32 parses DeepSeek V3.2's DSML calls.
	ToolDeepSeekV32 = "deepseek_v32"
	ToolSeedOSS     = "seed_oss"
	ToolMiniMaxM2   = "minimax_m2"
	ToolGranite     = "granite"
	ToolPythonic    = "pythonic"
	// ToolLlama4Pythonic is pythonic with Llama 4's <|python_start|> tags.
	ToolLlama4Pythonic = "llama4_pythonic"
	// ToolStep3 parses Step3's <steptml:invoke> calls.
	ToolStep3 = "step3"
)

var reasoningNames = func() map[string]bool {
	m := map[string]bool{ReasoningGptOss: true, ReasoningMiniMaxM2AppendThink: true}
	for n := range thinkSpecs {
		m[n] = true
	}
	return m
}()

var toolNames = map[string]bool{ToolHermes: true, ToolLlama3JSON: true, ToolDeepSeekV3: true, ToolMistral: true, ToolOpenAI: true,
	ToolQwen3Coder: true, ToolQwen3XML: true, ToolGLM45: true, ToolGLM47: true,
	ToolKimiK2: true, ToolDeepSeekV31: true, ToolSeedOSS: true, ToolMiniMaxM2: true, ToolGranite: true,
	ToolPythonic: true, ToolLlama4Pythonic: true, ToolStep3: true, ToolDeepSeekV32: true}

// ReasoningParserNames lists the reasoning parsers NewParsers accepts, sorted.
func ReasoningParserNames() []string { return sortedNames(reasoningNames) }

// ToolParserNames lists the tool-call parsers NewParsers accepts, sorted.
func ToolParserNames() []string { return sortedNames(toolNames) }

func sortedNames(m map[string]bool) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func validNames(m map[string]bool) string { return strings.Join(sortedNames(m), ", ") }

// DefaultMaxCallBytes is the default bound on the undecided text of one tool call.
const DefaultMaxCallBytes = 1 << 20

// Parsers is a validated pair of a reasoning parser and a tool-call parser (either may be
// absent). It is immutable and safe for concurrent use; each response choice gets its own Stream.
type Parsers struct {
	reasoning string
	tool      string
	harmony   bool
	rawArgs   bool
	maxCall   int
	strip     []string
	stripSet  bool
	rand      func() uint64
}

// Option configures NewParsers.
type Option func(*Parsers)

// withRand sets the source of the random tool-call ids (default math/rand/v2). Tests pass a
// deterministic one.
func withRand(r func() uint64) Option { return func(p *Parsers) { p.rand = r } }

// WithRawArguments makes JSON tool-call arguments stream verbatim, as the model wrote them,
// instead of re-formatted as vLLM's non-streaming json.dumps does.
func WithRawArguments() Option { return func(p *Parsers) { p.rawArgs = true } }

// withMaxCallBytes bounds the undecided text one tool call may hold (default 1 MiB); n <= 0
// keeps the default.
func withMaxCallBytes(n int) Option {
	return func(p *Parsers) {
		if n > 0 {
			p.maxCall = n
		}
	}
}

// withStripTokens replaces the special-token strings that are removed from the text before
// parsing when the gateway decodes with special tokens kept (default: the end-of-turn tokens of
// the parser's model family, see special.go). nil strips nothing.
func withStripTokens(tokens []string) Option {
	return func(p *Parsers) { p.strip, p.stripSet = tokens, true }
}

// NewParsers validates a reasoning parser name and a tool-call parser name (vLLM's
// --reasoning-parser and --tool-call-parser values; "" for none). An unknown name gives an error
// wrapping ErrUnknownParser that lists the valid names. openai_gptoss and openai both parse
// gpt-oss Harmony output and combine only with each other (or with none).
func NewParsers(reasoning, tool string, opts ...Option) (*Parsers, error) {
	if reasoning != "" && !reasoningNames[reasoning] {
		return nil, fmt.Errorf("%w: reasoning parser %q (valid: %s)", ErrUnknownParser, reasoning, validNames(reasoningNames))
	}
	if tool != "" && !toolNames[tool] {
		return nil, fmt.Errorf("%w: tool-call parser %q (valid: %s)", ErrUnknownParser, tool, validNames(toolNames))
	}
	h1, h2 := reasoning == ReasoningGptOss, tool == ToolOpenAI
	if (h1 && tool != "" && !h2) || (h2 && reasoning != "" && !h1) {
		return nil, fmt.Errorf("chat: parsers %q and %q do not combine: %s and %s parse gpt-oss Harmony output and pair only with each other",
			reasoning, tool, ReasoningGptOss, ToolOpenAI)
	}
	p := &Parsers{reasoning: reasoning, tool: tool, harmony: h1 || h2, maxCall: DefaultMaxCallBytes}
	for _, o := range opts {
		o(p)
	}
	if p.rand == nil {
		p.rand = rand.Uint64
	}
	if !p.stripSet {
		p.strip = defaultStripTokens(reasoning, tool)
	}
	return p, nil
}

// Reasoning returns the reasoning parser name ("" for none).
func (p *Parsers) Reasoning() string { return p.reasoning }

// Tool returns the tool-call parser name ("" for none).
func (p *Parsers) Tool() string { return p.tool }

// NewStream returns the parsing state of one streamed choice. A Stream is not safe for
// concurrent use.
func (p *Parsers) NewStream(req RequestInfo) *Stream {
	s := &Stream{p: p, mode: p.toolMode(req)}
	s.out.rand = p.rand
	s.out.mistralIDs = p.tool == ToolMistral && s.mode == toolsAuto
	s.out.callIDs = (p.tool == ToolQwen3Coder || p.tool == ToolQwen3XML || p.tool == ToolSeedOSS || p.tool == ToolMiniMaxM2 ||
		p.tool == ToolDeepSeekV32) && s.mode == toolsAuto
	if !p.SkipSpecialTokens(req) && len(p.strip) > 0 {
		s.strip = newStripStage(p.strip)
	}
	if p.harmony {
		s.harmony = newHarmonyStage(p, s.mode)
		return s
	}
	switch {
	case p.reasoning == ReasoningMiniMaxM2AppendThink:
		s.appendThink = true
	case p.thinkOn(req):
		s.think = newThinkStage(thinkSpecs[p.reasoning])
	}
	s.tools = newToolStage(p, s.mode, req)
	return s
}

// thinkOn reports whether a request's output starts with a reasoning stage: a marker parser, a
// prompt that did not close reasoning already, and the request's thinking switch
// (chat_template_kwargs) not off: deepseek_v3 reasons only when it is on (vLLM's
// DeepSeekV3ReasoningParser defaults to its identity parser), kimi_k2 unless it is off.
func (p *Parsers) thinkOn(req RequestInfo) bool {
	if thinkSpecs[p.reasoning] == nil || req.ReasoningEnded {
		return false
	}
	switch p.reasoning {
	case ReasoningDeepSeekV3:
		return req.Thinking == ThinkingOn
	case ReasoningKimiK2:
		return req.Thinking != ThinkingOff
	}
	return true
}

// parse parses a whole response text; the result equals what a Stream accumulates from any
// split of the same text (ParseFinish without the finish reason, for tests).
func (p *Parsers) parse(req RequestInfo, text string) Message {
	m, _ := p.ParseFinish(req, text, "stop")
	return m
}

// ParseFinish parses a whole response text and maps the engine's finish reason as the stream's
// FinishReason does ("tool_calls" when calls were made and the engine stopped normally), for
// non-streaming responses. The message equals what a Stream accumulates from any split of the
// same text.
func (p *Parsers) ParseFinish(req RequestInfo, text, engineFinish string) (Message, string) {
	s := p.NewStream(req)
	var acc accumulator
	acc.Add(s.Feed(text))
	acc.Add(s.Finish())
	return acc.Message(s), s.FinishReason(engineFinish)
}
