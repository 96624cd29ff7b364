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

// Delta is one streamed increment of an assistant message. Empty strings mean "nothing of that
// kind in this increment"; a Delta with no field set carries nothing and need not be sent.
type Delta struct {
	Reasoning string
	Content   string
	ToolCalls []ToolCallDelta
}

// Empty reports whether d carries nothing.
func (d Delta) Empty() bool { return d.Reasoning == "" && d.Content == "" && len(d.ToolCalls) == 0 }

// ToolCallDelta is one entry of a streamed delta's tool_calls. A call's first entry carries
// Index, ID, Type ("function") and Name and no arguments; later entries carry Index and an
// Arguments fragment only, as vLLM's server streams them.
type ToolCallDelta struct {
	Index     int
	ID        string
	Type      string
	Name      string
	Arguments string
}

// Message is a whole parsed assistant message. A nil Content or Reasoning is JSON null.
type Message struct {
	Content   *string
	Reasoning *string
	ToolCalls []ToolCall
}

// ToolCall is one parsed tool call; Arguments is the JSON text sent as function.arguments.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// RequestInfo is what a parser needs to know about the request whose output it parses.
// The zero value is a request without tools whose prompt leaves reasoning open.
type RequestInfo struct {
	// ToolsGiven is true when the request has a non-empty tools list.
	ToolsGiven bool
	// ToolChoice is the request's tool_choice when it is a string: "", "auto", "none" or
	// "required" ("" means absent, which vLLM treats as "auto" when tools are given).
	ToolChoice string
	// NamedTool is the function name of a named tool_choice ({"type":"function",...}); it
	// overrides ToolChoice.
	NamedTool string
	// ReasoningEnded is true when the prompt already closes reasoning, so the whole output is
	// content: Qwen3 templates with enable_thinking=false end the prompt with
	// "<think>\n\n</think>\n\n" (see PromptEndsReasoning).
	ReasoningEnded bool
}

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
)

// Tool-call parser names, as vLLM spells them (vllm/tool_parsers/__init__.py).
const (
	ToolHermes     = "hermes"
	ToolLlama3JSON = "llama3_json"
	ToolDeepSeekV3 = "deepseek_v3"
	ToolMistral    = "mistral"
	ToolOpenAI     = "openai"
)

var reasoningNames = map[string]bool{ReasoningQwen3: true, ReasoningDeepSeekR1: true, ReasoningGptOss: true}

var toolNames = map[string]bool{ToolHermes: true, ToolLlama3JSON: true, ToolDeepSeekV3: true, ToolMistral: true, ToolOpenAI: true}

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

// WithRand sets the source of the random tool-call ids (default math/rand/v2). Tests pass a
// deterministic one.
func WithRand(r func() uint64) Option { return func(p *Parsers) { p.rand = r } }

// WithRawArguments makes JSON tool-call arguments stream verbatim, as the model wrote them,
// instead of re-formatted as vLLM's non-streaming json.dumps does.
func WithRawArguments() Option { return func(p *Parsers) { p.rawArgs = true } }

// WithMaxCallBytes bounds the undecided text one tool call may hold (default 1 MiB); n <= 0
// keeps the default.
func WithMaxCallBytes(n int) Option {
	return func(p *Parsers) {
		if n > 0 {
			p.maxCall = n
		}
	}
}

// WithStripTokens replaces the special-token strings that are removed from the text before
// parsing when the gateway decodes with special tokens kept (default: the end-of-turn tokens of
// the parser's model family, see special.go). nil strips nothing.
func WithStripTokens(tokens []string) Option {
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
	if !p.SkipSpecialTokens(req) && len(p.strip) > 0 {
		s.strip = newStripStage(p.strip)
	}
	if p.harmony {
		s.harmony = newHarmonyStage(p, s.mode)
		return s
	}
	if p.reasoning != "" && !req.ReasoningEnded {
		s.think = &thinkStage{qwen: p.reasoning == ReasoningQwen3}
	}
	s.tools = newToolStage(p, s.mode, req.NamedTool)
	return s
}

// Parse parses a whole response text; the result equals what a Stream accumulates from any
// split of the same text.
func (p *Parsers) Parse(req RequestInfo, text string) Message {
	m, _ := p.ParseFinish(req, text, "stop")
	return m
}

// ParseFinish is Parse that also maps the engine's finish reason as the stream's FinishReason
// does ("tool_calls" when calls were made and the engine stopped normally), for non-streaming
// responses.
func (p *Parsers) ParseFinish(req RequestInfo, text, engineFinish string) (Message, string) {
	s := p.NewStream(req)
	var acc accumulator
	acc.Add(s.Feed(text))
	acc.Add(s.Finish())
	return acc.Message(s), s.FinishReason(engineFinish)
}

// Stream is the parsing state of one response choice. Feed and Finish return increments;
// FinishReason answers after Finish. The zero value is not usable: use Parsers.NewStream.
type Stream struct {
	p        *Parsers
	mode     toolMode
	strip    *stripStage
	think    *thinkStage
	tools    *toolStage
	harmony  *harmonyStage
	out      emitter
	finished bool
}

// Feed consumes text decoded since the last call and returns what can be sent now.
func (s *Stream) Feed(text string) Delta {
	if s.finished || text == "" {
		return Delta{}
	}
	s.push(text, false)
	return s.out.take()
}

// Finish ends the stream: text held back (marker prefixes, an unterminated call) is resolved
// as end of output. Later Feed calls are ignored.
func (s *Stream) Finish() Delta {
	if s.finished {
		return Delta{}
	}
	s.push("", true)
	s.finished = true
	return s.out.take()
}

func (s *Stream) push(text string, eof bool) {
	if s.strip != nil {
		text = s.strip.run(text, eof)
		if text == "" && !eof {
			return
		}
	}
	if s.harmony != nil {
		s.harmony.run(&s.out, text, eof)
		return
	}
	if s.think != nil {
		s.think.run(s, text, eof)
		if eof {
			s.tools.run(&s.out, "", true)
		}
		return
	}
	s.tools.run(&s.out, text, eof)
}

// content is where the reasoning stage sends the text after reasoning.
func (s *Stream) content(b []byte) {
	if len(b) > 0 {
		s.tools.runBytes(&s.out, b)
	}
}

// FinishReason maps the engine's finish reason ("stop", "length", ...; "" counts as "stop") to
// the one to send: "tool_calls" when at least one call was made for tool_choice auto or
// required and the engine stopped normally, as vLLM's streaming path does (a named tool choice
// keeps "stop").
func (s *Stream) FinishReason(engine string) string {
	if engine == "" {
		engine = "stop"
	}
	if engine == "stop" && s.out.ncalls > 0 && (s.mode == toolsAuto || s.mode == toolsRequired) {
		return "tool_calls"
	}
	return engine
}

// held returns how many bytes of input the stream holds undecided (for the bounded-buffer
// property).
func (s *Stream) held() int {
	n := 0
	if s.strip != nil {
		n += len(s.strip.buf)
	}
	if s.think != nil {
		n += len(s.think.buf)
	}
	if s.tools != nil {
		n += s.tools.held()
	}
	if s.harmony != nil {
		n += s.harmony.held()
	}
	return n
}

// accumulator builds a Message from the deltas of one Stream, as a client concatenates them
// (Parse is built on it, and the tests compare streams with it). The zero value is ready.
type accumulator struct {
	reasoning, content strings.Builder
	hasR, hasC         bool
	calls              []ToolCall
	args               []strings.Builder
}

// Add appends one delta.
func (a *accumulator) Add(d Delta) {
	if d.Reasoning != "" {
		a.reasoning.WriteString(d.Reasoning)
		a.hasR = true
	}
	if d.Content != "" {
		a.content.WriteString(d.Content)
		a.hasC = true
	}
	for _, tc := range d.ToolCalls {
		for tc.Index >= len(a.calls) {
			a.calls = append(a.calls, ToolCall{})
			a.args = append(a.args, strings.Builder{})
		}
		c := &a.calls[tc.Index]
		if tc.ID != "" {
			c.ID = tc.ID
		}
		if tc.Name != "" {
			c.Name = tc.Name
		}
		a.args[tc.Index].WriteString(tc.Arguments)
	}
}

// Message returns the accumulated message. s (may be nil) supplies the request-level rule that
// a named or required tool_choice answers content "" rather than null, as vLLM does.
func (a *accumulator) Message(s *Stream) Message {
	var m Message
	if a.hasR {
		r := a.reasoning.String()
		m.Reasoning = &r
	}
	if a.hasC {
		c := a.content.String()
		m.Content = &c
	} else if s != nil && (s.mode == toolsNamed || s.mode == toolsRequired) {
		c := ""
		m.Content = &c
	}
	for i := range a.calls {
		c := a.calls[i]
		c.Arguments = a.args[i].String()
		m.ToolCalls = append(m.ToolCalls, c)
	}
	return m
}

// DefaultParserNames picks vLLM's recommended parser names from model family hints: a model
// name or path ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-R1") or a config.json model_type
// ("qwen3", "gpt_oss"). The first hint naming a known family decides, so a specific name
// ("Qwen3-Coder-30B", plain content) wins over a generic model_type ("qwen3_moe") given after it.
// Unknown families, and formats this package does not parse (Qwen3-Coder and Qwen3.5 XML calls,
// DeepSeek V3.1+, Llama 4), give "" (plain content).
func DefaultParserNames(hints ...string) (reasoning, tool string) {
	for _, h := range hints {
		if r, t, ok := familyParsers(h); ok {
			return r, t
		}
	}
	return "", ""
}

// familyParsers is DefaultParserNames for one hint; ok reports a known family.
func familyParsers(family string) (reasoning, tool string, ok bool) {
	f := strings.ToLower(family)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(f, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("gpt-oss", "gpt_oss", "gptoss"):
		return ReasoningGptOss, ToolOpenAI, true
	case has("deepseek-v3.1", "deepseek-v3.2", "deepseek_v31", "deepseek_v32", "deepseek-v4", "deepseek_v4"):
		return "", "", true
	case has("deepseek-r1", "deepseek_r1"):
		return ReasoningDeepSeekR1, ToolDeepSeekV3, true
	case has("deepseek-v3", "deepseek_v3"):
		return "", ToolDeepSeekV3, true
	case has("qwen3-coder", "qwen3_coder", "qwen3coder"):
		return "", "", true
	case has("qwen3.5", "qwen3_5", "qwen3.6", "qwen3_6"):
		return ReasoningQwen3, "", true
	case has("qwen3", "qwq"):
		return ReasoningQwen3, ToolHermes, true
	case has("llama-4", "llama4", "llama_4"):
		return "", "", true
	case has("llama-3", "llama3", "llama_3"):
		return "", ToolLlama3JSON, true
	case has("mistral", "mixtral", "ministral", "magistral", "devstral", "codestral"):
		return "", ToolMistral, true
	}
	return "", "", false
}

// PromptEndsReasoning reports whether a rendered prompt already closes reasoning for the
// <think> parsers: its last "</think>" comes after its last "<think>" (vLLM's is_reasoning_end on
// the prompt ids, vllm/reasoning/basic_parsers.py). Set RequestInfo.ReasoningEnded from it.
func PromptEndsReasoning(prompt string) bool {
	end := strings.LastIndex(prompt, thinkEnd)
	return end >= 0 && end > strings.LastIndex(prompt, thinkStart)
}
