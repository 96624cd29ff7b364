package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// DefaultMaxPromptBytes bounds a rendered prompt when Options.MaxPromptBytes is zero: far
// beyond any context window (1M tokens are about 4 MB of text).
const DefaultMaxPromptBytes = 32 << 20

// Options configure a Renderer like the matching `vllm serve` flags. The zero value is
// `vllm serve MODEL --enable-auto-tool-choice --tool-call-parser X`: requests with tools
// are accepted, the content format is detected, there are no default template kwargs and
// request templates are refused.
type Options struct {
	// ChatTemplate is --chat-template: a file path, or the template itself when the text
	// holds '{', '}' or a newline. It replaces the model directory's templates.
	ChatTemplate string
	// TrustRequestChatTemplate is --trust-request-chat-template: requests may carry their
	// own chat_template. Such templates are untrusted and render only in Sandbox.
	TrustRequestChatTemplate bool
	// Sandbox renders untrusted (request) templates; required when
	// TrustRequestChatTemplate is set.
	Sandbox *Sandbox
	// ContentFormat is --chat-template-content-format: "auto" or "" (detect, §4),
	// "string" or "openai".
	ContentFormat string
	// DefaultTemplateKwargs is --default-chat-template-kwargs, a JSON object (nil: none).
	DefaultTemplateKwargs json.RawMessage
	// NoToolParser models a server started without --enable-auto-tool-choice and
	// --tool-call-parser: tool_choice other than "none" is refused with vLLM's messages.
	NoToolParser bool
	// ModelType overrides config.json's model_type ("gpt_oss" renders with Harmony).
	ModelType string
	// Tokenizer is the model's tokenizer; nil loads tokenizer.json from the model directory.
	Tokenizer *tokenizer.Tokenizer
	// Now is the clock of strftime_now and of Harmony's "Current date" (nil: time.Now).
	Now func() time.Time
	// MaxPromptBytes bounds a rendered prompt (0: DefaultMaxPromptBytes).
	MaxPromptBytes int
	// Multimodal is --multimodal: "auto" or "" (the model directory says, IsMultimodalDir),
	// "on" or "off". A text-only model refuses media parts as vLLM does.
	Multimodal string
	// MediaLimits is --limit-mm-per-prompt: items per modality (absent: DefaultMediaLimit).
	MediaLimits map[string]int
	// MaxMediaBytes bounds the decoded bytes of one data: URL (0: DefaultMaxMediaBytes).
	MaxMediaBytes int
}

// Result is a rendered chat request: the prompt text and its token ids, as the engine
// computes them.
type Result struct {
	Prompt   string
	TokenIDs []uint32
	// Media are the request's media items in prompt order (multimodal models only).
	Media []MediaItem
	// Exact is how many leading TokenIDs are exactly the engine's: all of them without media;
	// with media, those before the first media placeholder token (the engine expands each
	// placeholder into a count of tokens the gateway does not compute).
	Exact int
	// MediaAt is the index in TokenIDs of each media item's placeholder token, when the
	// model's placeholder ids are known and the prompt holds one per item (else nil).
	MediaAt []int
	// Unrendered says why the prompt was not rendered although the engine will serve the
	// request ("" when it was): Prompt and TokenIDs are then empty.
	Unrendered string
}

// Renderer turns chat requests into prompts for one model. It is built once from a model
// directory, is immutable afterwards (but for a bounded cache of decoded tool schemas,
// schemacache.go) and safe for concurrent use; it must not be copied.
type Renderer struct {
	tok       *tokenizer.Tokenizer
	opts      Options
	now       func() time.Time
	maxPrompt int
	specials  []special
	specialVs []specialValue // specials as template values
	// defaultT and toolT are the model's templates (toolT is the "tool_use" one of a named
	// set, used when the request has tools); nil when the model has none.
	defaultT, toolT *compiled
	// processorT is a multimodal model's processor template (chat_template.json), used for
	// requests without tools.
	processorT *compiled
	defaults   json.RawMessage
	harmony    *harmonyEncoding // non-nil for gpt-oss
	schemas    schemaCache      // tool schemas for templates that share values
	strftime   jinja.Value
	modelType  string
	// multimodal models accept media parts; mediaTokens are the placeholder token ids of
	// config.json (where exactness ends); maxMedia bounds one data: URL.
	multimodal  bool
	mediaTokens []uint32
	maxMedia    int
	vision      visionCounter // placeholder counts of images (nil: unknown family)
	gemma       *gemmaImages  // Gemma 3's image expansion (nil for other models)
}

var (
	rangeValue      = jinja.NewCallable("range", rangeGlobal)
	trimValue       = jinja.NewCallable("trim", trimFilter)
	spaceValue      = jinja.NewCallable("isspace", isspaceFilter)
	addValue        = jinja.NewCallable("+", addFilter)
	subValue        = jinja.NewCallable("-", subFilter)
	iterValue       = jinja.NewCallable("for", iterFilter)
	catValue        = jinja.NewCallable("+", catFilter)
	tildeValue      = jinja.NewCallable("~", tildeFilter)
	modValue        = jinja.NewCallable("%", modFilter)
	fmtValue        = jinja.NewCallable("format", formatFilter)
	joinValue       = jinja.NewCallable("join", joinFilter)
	replValue       = jinja.NewCallable("replace", replaceFilter)
	lenValue        = jinja.NewCallable("length", lengthFilter)
	testValue       = jinja.NewCallable("is", testFilter)
	mulValue        = jinja.NewCallable("*", mulFilter)
	divValue        = jinja.NewCallable("/", divFilter)
	fdivValue       = jinja.NewCallable("//", floorDivFilter)
	powValue        = jinja.NewCallable("**", powFilter)
	negValue        = jinja.NewCallable("-", negFilter)
	ltValue         = jinja.NewCallable("<", ltFilter)
	leValue         = jinja.NewCallable("<=", leFilter)
	gtValue         = jinja.NewCallable(">", gtFilter)
	geValue         = jinja.NewCallable(">=", geFilter)
	eqValue         = jinja.NewCallable("==", eqFilter)
	neValue         = jinja.NewCallable("!=", neFilter)
	inValue         = jinja.NewCallable("in", inFilter)
	notInValue      = jinja.NewCallable("not in", notInFilter)
	intValue        = jinja.NewCallable("int", bigIntFilter)
	chainValue      = jinja.NewCallable(chainFilterName, chainFilter)
	bigLitValue     = jinja.NewCallable("int", bigLiteral)
	selectValue     = jinja.NewCallable("select", selectFilter("select", false, true))
	rejectValue     = jinja.NewCallable("reject", selectFilter("reject", false, false))
	selectattrValue = jinja.NewCallable("selectattr", selectFilter("selectattr", true, true))
	rejectattrValue = jinja.NewCallable("rejectattr", selectFilter("rejectattr", true, false))
	floatValue      = jinja.NewCallable("float", bigFloatFilter)
	absValue        = jinja.NewCallable("abs", bigAbsFilter)
	roundValue      = jinja.NewCallable("round", bigRoundFilter)
	sumValue        = jinja.NewCallable("sum", bigSumFilter)
	maxValue        = jinja.NewCallable("max", bigMaxFilter)
	minValue        = jinja.NewCallable("min", bigMinFilter)
	strValue        = jinja.NewCallable("str", strFilter)
	stringVal       = jinja.NewCallable("string", stringFilter)
)

// privateFilter is one render variable behind a private filter name.
type privateFilter struct {
	name  string
	value jinja.Value
}

// privateFilters are the render variables behind the private filter names the source
// rewrites use (template.go's sourceRewrites).
var privateFilters = []privateFilter{
	{trimFilterName, trimValue}, {isspaceFilterName, spaceValue}, {addFilterName, addValue},
	{subFilterName, subValue}, {iterFilterName, iterValue}, {catFilterName, catValue},
	{tildeFilterName, tildeValue}, {modFilterName, modValue}, {formatFilterName, fmtValue},
	{joinFilterName, joinValue}, {replaceFilterName, replValue}, {lengthFilterName, lenValue},
	{testFilterName, testValue}, {mulFilterName, mulValue}, {divFilterName, divValue},
	{floorDivFilterName, fdivValue}, {powFilterName, powValue}, {negFilterName, negValue},
	{ltFilterName, ltValue}, {leFilterName, leValue}, {gtFilterName, gtValue}, {geFilterName, geValue},
	{strFilterName, strValue}, {stringFilterName, stringVal}, {tojsonFilterName, tojsonValue},
	{eqFilterName, eqValue}, {neFilterName, neValue}, {inFilterName, inValue}, {notInFilterName, notInValue},
	{intFilterName, intValue}, {floatFilterName, floatValue}, {absFilterName, absValue}, {roundFilterName, roundValue},
	{sumFilterName, sumValue}, {maxFilterName, maxValue}, {minFilterName, minValue},
	{chainFilterName, chainValue}, {bigLiteralName, bigLitValue},
	{selectFilterName, selectValue}, {rejectFilterName, rejectValue},
	{selectattrFilterName, selectattrValue}, {rejectattrFilterName, rejectattrValue},
}

// New builds a Renderer for the model in dir (tokenizer.json, tokenizer_config.json,
// optional chat_template.jinja and config.json). It fails when a template does not
// compile or a file is malformed; a model without any template is accepted and its
// requests get vLLM's "no chat template" 400.
func New(dir string, opts Options) (*Renderer, error) {
	mf, err := loadModelFiles(dir)
	if err != nil {
		return nil, err
	}
	if opts.Tokenizer == nil {
		if opts.Tokenizer, err = tokenizer.LoadDir(dir); err != nil {
			return nil, fmt.Errorf("chat: %w", err)
		}
	}
	return newRenderer(mf, opts)
}

func newRenderer(mf *modelFiles, opts Options) (*Renderer, error) {
	r := &Renderer{opts: opts, now: opts.Now, maxPrompt: opts.MaxPromptBytes, specials: mf.specials, defaults: opts.DefaultTemplateKwargs}
	if r.now == nil {
		r.now = time.Now
	}
	r.strftime = strftimeGlobal(r.now)
	for _, s := range r.specials {
		r.specialVs = append(r.specialVs, s.prepare())
	}
	if r.maxPrompt <= 0 {
		r.maxPrompt = DefaultMaxPromptBytes
	}
	switch opts.ContentFormat {
	case "", "auto", FormatString, FormatOpenAI:
	default:
		return nil, fmt.Errorf("chat: content format %q is not auto, string or openai", opts.ContentFormat)
	}
	if opts.TrustRequestChatTemplate && opts.Sandbox == nil {
		return nil, errors.New("chat: trusting request chat templates needs a Sandbox to render them in")
	}
	if len(r.defaults) > 0 {
		if firstNonSpace(r.defaults) != '{' || !json.Valid(r.defaults) {
			return nil, errors.New("chat: default chat template kwargs must be a JSON object")
		}
	}
	r.tok = opts.Tokenizer
	var err error
	modelType := opts.ModelType
	if modelType == "" {
		modelType = mf.modelType
	}
	r.modelType = modelType
	if modelType == "gpt_oss" {
		if r.tok == nil {
			return nil, errors.New("chat: gpt-oss (Harmony) rendering needs the model's tokenizer")
		}
		if r.harmony, err = newHarmonyEncoding(r.tok); err != nil {
			return nil, err
		}
		return r, nil
	}
	if err := r.setMultimodal(mf, opts); err != nil {
		return nil, err
	}
	templates := mf.templates
	if opts.ChatTemplate == "" && r.multimodal && mf.processorTemplate != "" {
		if r.processorT, err = compileTemplate(mf.processorTemplate); err != nil {
			return nil, fmt.Errorf("chat: processor template: %w", err)
		}
	}
	if opts.ChatTemplate != "" {
		src, err := loadTemplateOption(opts.ChatTemplate)
		if err != nil {
			return nil, err
		}
		templates = map[string]string{"default": src}
	}
	if src, ok := templates["default"]; ok {
		if r.defaultT, err = compileTemplate(src); err != nil {
			return nil, fmt.Errorf("chat: default template: %w", err)
		}
	}
	if src, ok := templates["tool_use"]; ok {
		if r.toolT, err = compileTemplate(src); err != nil {
			return nil, fmt.Errorf("chat: tool_use template: %w", err)
		}
	}
	return r, nil
}

// ModelType is the model's config.json model_type (or Options.ModelType), "" when unknown; the
// gateway picks default output parsers from it (parse.DefaultParserNames).
func (r *Renderer) ModelType() string { return r.modelType }

// Render builds the prompt of a chat request and tokenizes it as the engine does (§9:
// without adding special tokens unless the request asks). Every failure the request can
// cause, including template errors, is a 400 in the OpenAI shape carrying the message vLLM
// would give; no panic escapes.
func (r *Renderer) Render(req *openai.ChatRequest) (Result, *openai.Error) {
	if r.harmony != nil {
		return r.renderHarmony(req)
	}
	text, media, err := r.renderText(req)
	if err == errNoPlaceholder {
		return Result{Media: media, Unrendered: err.Message}, nil
	}
	if err != nil {
		return Result{}, err
	}
	if r.tok == nil {
		return Result{Prompt: text, Media: media}, nil
	}
	// Encode into a pooled buffer and copy the ids out at their size: how many tokens a text
	// makes varies too much (2 to 5 bytes a token) for one guess to avoid either growing the
	// slice while encoding or keeping twice the memory.
	bp := idsPool.Get().(*[]uint32)
	ids, terr := r.tok.Encode((*bp)[:0], text, req.AddSpecialTokens)
	if terr != nil {
		idsPool.Put(bp)
		return Result{}, openai.BadRequest("messages", terr.Error())
	}
	out := slices.Clone(ids)
	if cap(ids) <= maxPooledIDs {
		*bp = ids
		idsPool.Put(bp)
	}
	res := Result{Prompt: text, TokenIDs: out, Media: media, Exact: len(out)}
	if len(media) > 0 {
		res.Exact, res.MediaAt = r.mediaPositions(out, len(media))
	}
	return res, nil
}

// idsPool holds Render's encoding buffers; one larger than maxPooledIDs is not kept.
var idsPool = sync.Pool{New: func() any { b := make([]uint32, 0, 4096); return &b }}

const maxPooledIDs = 1 << 18

// RenderText is Render without tokenization: the prompt text only (for gpt-oss, whose
// prompt is built as tokens, the text those tokens decode to).
func (r *Renderer) RenderText(req *openai.ChatRequest) (string, *openai.Error) {
	if r.harmony != nil {
		res, err := r.renderHarmony(req)
		return res.Prompt, err
	}
	text, _, err := r.renderText(req)
	return text, err
}

// renderText renders req's prompt text and returns its media items (validated and counted
// first, so that a bad item is refused before any rendering).
func (r *Renderer) renderText(req *openai.ChatRequest) (string, []MediaItem, *openai.Error) {
	if err := r.checkToolParser(req); err != nil {
		return "", nil, err
	}
	var media []MediaItem
	if r.multimodal {
		var err *openai.Error
		if media, err = r.collectMedia(req); err != nil {
			return "", nil, err
		}
		r.sizeMedia(media)
	}
	reqTemplate, hasReqTemplate, err := requestTemplate(req)
	if err != nil {
		return "", nil, err
	}
	if hasReqTemplate {
		if !r.opts.TrustRequestChatTemplate {
			return "", nil, openai.BadRequest("chat_template", "Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.")
		}
		text, err := r.opts.Sandbox.render(r.sandboxConfig(), req, reqTemplate)
		if err != nil && err.Message == errNoPlaceholder.Message {
			err = errNoPlaceholder
		}
		return text, media, err
	}
	t := r.defaultT
	if req.Tools == nil && r.processorT != nil {
		t = r.processorT // a multimodal model's processor template wins without tools (§6)
	}
	if req.Tools != nil && r.toolT != nil {
		t = r.toolT
	}
	if t == nil {
		return "", nil, openai.BadRequest("", "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one.")
	}
	text, rerr := r.renderCompiled(req, t)
	return text, media, rerr
}

// requestTemplate is the template a request brings: chat_template, else a string
// chat_template_kwargs.chat_template.
func requestTemplate(req *openai.ChatRequest) (string, bool, *openai.Error) {
	if req.HasChatTemplate {
		return req.ChatTemplate, true, nil
	}
	if req.ChatTemplateKwargs == nil {
		return "", false, nil
	}
	kw, err := decodeJSON(req.ChatTemplateKwargs)
	if err != nil {
		return "", false, openai.BadRequest("chat_template_kwargs", "chat_template_kwargs is not valid JSON")
	}
	v, ok := kw.AsDict().Get("chat_template")
	if !ok || v.IsNone() {
		return "", false, nil
	}
	if !v.IsString() {
		return "", false, openai.BadRequest("chat_template_kwargs", "chat_template_kwargs.chat_template must be a string")
	}
	return v.AsString(), true, nil
}

// checkToolParser applies vLLM's tool_choice checks for a server without a tool parser.
func (r *Renderer) checkToolParser(req *openai.ChatRequest) *openai.Error {
	if !r.opts.NoToolParser {
		return nil
	}
	switch req.ToolChoice.Mode {
	case openai.ToolChoiceNone, "":
		return nil
	case openai.ToolChoiceAuto:
		return openai.BadRequest("tool_choice", `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`)
	case openai.ToolChoiceRequired:
		return openai.BadRequest("tool_choice", `tool_choice="required" requires --tool-call-parser to be set`)
	}
	return openai.BadRequest("tool_choice", fmt.Sprintf(`tool_choice=function "%s" requires --tool-call-parser to be set`, req.ToolChoice.Name))
}

// renderCompiled renders a trusted template in process. A render of the plain variant in
// which an arithmetic filter made a big integer (2 ** 64) is rendered again, from freshly
// built values, with the big variant that compares it exactly: a render is pure, so the
// first one leaves nothing behind.
func (r *Renderer) renderCompiled(req *openai.ChatRequest, t *compiled) (string, *openai.Error) {
	out, again, err := r.renderVariant(req, t, false)
	if again {
		out, _, err = r.renderVariant(req, t, true)
	}
	return out, err
}

// renderVariant renders with the plain variant, or the big one when forceBig is set or the
// request holds a big integer. again reports a plain render during which a big integer
// was made, by this render or (rarely, at the cost of one more render) a concurrent one.
func (r *Renderer) renderVariant(req *openai.ChatRequest, t *compiled, forceBig bool) (_ string, again bool, _ *openai.Error) {
	format := r.opts.ContentFormat
	if format == "" || format == "auto" {
		format = t.format
	}
	var schemas *schemaCache
	if t.shares {
		schemas = &r.schemas
	}
	vars, cfm, big, err := r.buildVars(req, format, schemas, t.filters)
	if err != nil {
		return "", false, err
	}
	if big || forceBig { // only requests holding a big integer pay for comparing them (bigeq.go)
		if v := t.bigVariant(); v != t {
			t = v
			for _, f := range t.filters {
				vars[f.name] = f.value
			}
		}
	}
	if t.macros {
		setMacroDepth(vars)
	}
	plain := !big && !forceBig && t.big != nil
	made := bigIntsMade.Load()
	out, rerr := execTemplate(t.tmpl, vars)
	if plain && bigIntsMade.Load() != made {
		return "", true, nil
	}
	if rerr != nil {
		return "", false, openai.BadRequest("", rerr.Error())
	}
	if len(out) > r.maxPrompt {
		return "", false, openai.BadRequest("", fmt.Sprintf("the rendered prompt is %d bytes, more than the %d allowed", len(out), r.maxPrompt))
	}
	if cfm != nil {
		out, err := cfm.cut(out)
		return out, false, err
	}
	return out, false, nil
}

// execTemplate renders with the library, turning a panic into an error: templates are
// code, and a library bug on an odd input must cost one request, not the process.
func execTemplate(t *jinja.Template, vars map[string]jinja.Value) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("chat template rendering failed: %v", p)
		}
	}()
	return t.RenderValues(vars)
}

// continueTag is transformers' continue_final_message marker.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// continueFinal remembers the final message text for the continue_final_message cut.
type continueFinal struct{ final string }

// cut is transformers' render_jinja_template tail for continue_final_message (§7).
func (c *continueFinal) cut(out string) (string, *openai.Error) {
	tag := pyStrip(continueTag)
	if !strings.Contains(out, pyStrip(c.final)) || !strings.Contains(out, tag) {
		return "", openai.BadRequest("", "continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.")
	}
	loc := strings.LastIndex(out, tag)
	if strings.HasPrefix(out[loc:], continueTag) {
		return out[:loc], nil
	}
	return pyRStrip(out[:loc]), nil
}

// notTemplateVars are apply_chat_template's own parameters: kwargs so named configure the
// call and never reach the template.
var notTemplateVars = map[string]bool{
	"conversation": true, "tools": true, "documents": true, "chat_template": true, "add_generation_prompt": true,
	"continue_final_message": true, "tokenize": true, "padding": true, "truncation": true, "max_length": true,
	"return_tensors": true, "return_dict": true, "return_assistant_tokens_mask": true, "tokenizer_kwargs": true,
}

// mergeKwargs merges the request's template kwargs in vLLM's order (§7): the defaults, tools,
// chat_template_kwargs, the generation flags, documents and reasoning_effort. big reports that a
// decoded JSON value holds an integer beyond int64.
func (r *Renderer) mergeKwargs(req *openai.ChatRequest, schemas *schemaCache) (merged orderedVars, big bool, perr *openai.Error) {
	if len(r.defaults) > 0 {
		d, dbig, err := decodeJSONBig(r.defaults)
		if err != nil {
			return merged, false, openai.BadRequest("", "default chat template kwargs are not valid JSON")
		}
		big = big || dbig
		merged.mergeDict(d.AsDict())
	}
	if req.Tools != nil {
		tools, tbig, err := toolDicts(req.Tools, schemas)
		if err != nil {
			return merged, false, err
		}
		big = big || tbig
		merged.merge("tools", tools)
	}
	hasThinkingKwarg := false
	if req.ChatTemplateKwargs != nil {
		kw, kbig, err := decodeJSONBig(req.ChatTemplateKwargs)
		if err != nil {
			return merged, false, openai.BadRequest("chat_template_kwargs", "chat_template_kwargs is not valid JSON")
		}
		big = big || kbig
		hasThinkingKwarg = kw.AsDict().Has("enable_thinking")
		merged.mergeDict(kw.AsDict())
	}
	merged.merge("add_generation_prompt", jinja.NewBool(req.AddGenerationPrompt))
	merged.merge("continue_final_message", jinja.NewBool(req.ContinueFinalMessage))
	if req.Documents != nil {
		docs, dbig, err := decodeJSONBig(req.Documents)
		if err != nil {
			return merged, false, openai.BadRequest("documents", "documents is not valid JSON")
		}
		big = big || dbig
		merged.merge("documents", docs)
	}
	if req.ReasoningEffort != "" {
		merged.merge("reasoning_effort", jinja.NewString(req.ReasoningEffort))
		if !hasThinkingKwarg {
			merged.merge("enable_thinking", jinja.NewBool(req.ReasoningEffort != "none"))
		}
	}
	return merged, big, nil
}

// buildVars builds the template variables of §7: kwargs merged in vLLM's order, the
// conversation of §3, tools of §5, special tokens, and the environment's globals. Tool
// schemas come from schemas when it is not nil (the template does not change its values);
// filters are the private filters the template calls (compiled.filters). big reports that
// a decoded JSON value holds an integer beyond int64.
func (r *Renderer) buildVars(req *openai.ChatRequest, format string, schemas *schemaCache, filters []privateFilter) (vars map[string]jinja.Value, cfm *continueFinal, big bool, perr *openai.Error) {
	merged, big, perr := r.mergeKwargs(req, schemas)
	if perr != nil {
		return nil, nil, false, perr
	}
	conv, cbig, err := r.conversation(req.Messages, format)
	if err != nil {
		return nil, nil, false, err
	}
	big = big || cbig
	vars = make(map[string]jinja.Value, 4+len(filters)+len(r.specials)+len(merged.keys))
	// The globals hold no state, so one value serves every render.
	vars["range"] = rangeValue
	vars["strftime_now"] = r.strftime
	for _, f := range filters {
		vars[f.name] = f.value
	}
	for i := range r.specialVs {
		vars[r.specialVs[i].name] = r.specialVs[i].renderValue()
	}
	for i, k := range merged.keys {
		if k == "messages" {
			return nil, nil, false, openai.BadRequest("chat_template_kwargs", "jinja2.environment.Template.render() got multiple values for keyword argument 'messages'")
		}
		if !notTemplateVars[k] {
			vars[k] = merged.vals[i]
		}
	}
	tools, ok := merged.get("tools")
	if !ok {
		tools = jinja.None()
	} else if !tools.IsNone() {
		// transformers accepts JSON schemas (dicts) or Python functions as tools.
		for _, t := range listItems(tools) {
			if !t.IsDict() {
				return nil, nil, false, openai.BadRequest("tools", "Tools should either be a JSON schema, or a callable function with type hints and a docstring suitable for auto-conversion to a schema.")
			}
		}
	}
	docs, ok := merged.get("documents")
	if !ok {
		docs = jinja.None()
	} else if !docs.IsNone() {
		for _, d := range listItems(docs) {
			if !d.IsDict() {
				return nil, nil, false, openai.BadRequest("documents", "Documents should be a list of dicts with 'title' and 'text' keys!")
			}
		}
	}
	vars["tools"] = tools
	vars["documents"] = docs
	agp, _ := merged.get("add_generation_prompt")
	vars["add_generation_prompt"] = agp

	if req.ContinueFinalMessage {
		if cfm, err = appendContinueTag(conv); err != nil {
			return nil, nil, false, err
		}
	}
	vars["messages"] = jinja.NewList(conv)
	return vars, cfm, big, nil
}

// listItems returns the items of a list value (nil for anything else).
func listItems(v jinja.Value) []jinja.Value {
	if v.IsList() {
		return v.AsList().Items
	}
	return nil
}

// appendContinueTag marks the final message for continue_final_message (§7).
func appendContinueTag(conv []jinja.Value) (*continueFinal, *openai.Error) {
	if len(conv) == 0 {
		return nil, openai.BadRequest("messages", "list index out of range")
	}
	last := conv[len(conv)-1].AsDict()
	content, _ := last.Get("content")
	switch {
	case content.IsString():
		last.Set("content", jinja.NewString(content.AsString()+continueTag))
		return &continueFinal{final: content.AsString()}, nil
	case content.IsList():
		items := content.AsList().Items
		for i := len(items) - 1; i >= 0; i-- {
			if !items[i].IsDict() {
				continue
			}
			p := items[i].AsDict()
			if text, ok := p.Get("text"); ok && text.IsString() {
				p.Set("text", jinja.NewString(text.AsString()+continueTag))
				return &continueFinal{final: text.AsString()}, nil
			}
		}
		return nil, openai.BadRequest("messages", "continue_final_message is set but we could not find any text to continue in the final message!")
	}
	return nil, openai.BadRequest("messages", "unsupported operand type(s) for +: 'NoneType' and 'str'")
}

// orderedVars is vLLM's merge_kwargs accumulator: later values win unless they are None or
// the string "auto" (those never override, §7).
type orderedVars struct {
	keys []string
	vals []jinja.Value
}

func (o *orderedVars) merge(k string, v jinja.Value) {
	unset := v.IsNone() || v.IsString() && v.AsString() == "auto"
	for i, kk := range o.keys {
		if kk == k {
			if !unset {
				o.vals[i] = v
			}
			return
		}
	}
	if unset {
		return
	}
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

func (o *orderedVars) mergeDict(d *jinja.Dict) {
	for _, k := range d.Keys {
		o.merge(k, d.Data[k])
	}
}

func (o *orderedVars) get(k string) (jinja.Value, bool) {
	for i, kk := range o.keys {
		if kk == k {
			return o.vals[i], true
		}
	}
	return jinja.Undefined(), false
}

// toolDicts is ChatCompletionToolsParam.model_dump() of each tool (§5):
// {"type": "function", "function": {"name", "description"|None, "parameters"|None, extras}}.
// The parameters come from schemas when it is not nil; big reports an integer beyond int64.
func toolDicts(tools []openai.ChatTool, schemas *schemaCache) (v jinja.Value, big bool, perr *openai.Error) {
	items := make([]jinja.Value, len(tools))
	for i, t := range tools {
		fn := jinja.NewDict()
		f := fn.AsDict()
		f.Keys = make([]string, 0, 3+len(t.Extra))
		f.Set("name", jinja.NewString(t.Name))
		if t.HasDescription {
			f.Set("description", jinja.NewString(t.Description))
		} else {
			f.Set("description", jinja.None())
		}
		params := jinja.None()
		if t.Parameters != nil {
			var err error
			var pbig bool
			if schemas != nil {
				params, pbig, err = schemas.decode(t.Parameters)
			} else {
				params, pbig, err = decodeJSONBig(t.Parameters)
			}
			big = big || pbig
			if err != nil {
				return jinja.Undefined(), false, openai.BadRequest(fmt.Sprintf("tools[%d].function.parameters", i), "tool parameters are not valid JSON")
			}
		}
		f.Set("parameters", params)
		for _, m := range t.Extra {
			v, vbig, err := decodeJSONBig(m.Value)
			big = big || vbig
			if err != nil {
				return jinja.Undefined(), false, openai.BadRequest(fmt.Sprintf("tools[%d].function", i), "tool function is not valid JSON")
			}
			f.Set(m.Key, v)
		}
		tool := jinja.NewDict()
		tool.AsDict().Keys = make([]string, 0, 2)
		tool.AsDict().Set("type", jinja.NewString("function"))
		tool.AsDict().Set("function", fn)
		items[i] = tool
	}
	return jinja.NewList(items), big, nil
}

// conversation turns request messages into template messages (§3): each a fresh dict in
// the key order role, content, then tool_calls, reasoning, reasoning_content (assistant),
// tool_call_id (tool) or tools (developer), then name.
// big reports an integer beyond int64 in a tool call's arguments or a developer's tools.
func (r *Renderer) conversation(msgs []openai.ChatMessage, format string) (conv []jinja.Value, big bool, perr *openai.Error) {
	out := make([]jinja.Value, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		var content jinja.Value
		switch {
		case m.Content.Kind == openai.ContentString && (format == FormatString || m.Role == "tool"):
			content = jinja.NewString(m.Content.Text) // contentValue of the one text
		case m.Content.Kind == openai.ContentString:
			content = textParts([]string{m.Content.Text})
		default:
			parts, err := r.contentParts(m, i)
			if err != nil {
				return nil, false, err
			}
			if content, err = r.contentValue(parts, format, m.Role == "tool", fmt.Sprintf("messages[%d].content", i)); err != nil {
				return nil, false, err
			}
		}
		d := jinja.NewDict()
		dict := d.AsDict()
		dict.Keys = make([]string, 0, 6) // role, content, at most three by role, name
		dict.Set("role", stringValue(m.Role))
		dict.Set("content", content)
		switch m.Role {
		case "assistant":
			if m.HasToolCalls && len(m.ToolCalls) > 0 {
				calls := make([]jinja.Value, len(m.ToolCalls))
				for j, c := range m.ToolCalls {
					id := jinja.None()
					if c.HasID {
						id = jinja.NewString(c.ID)
					}
					name := jinja.None()
					if c.HasName {
						name = jinja.NewString(c.Name)
					}
					fn := jinja.NewDict()
					fn.AsDict().Keys = make([]string, 0, 2)
					args, abig := loadsArgumentsBig(c.Arguments)
					big = big || abig
					fn.AsDict().Set("arguments", args)
					fn.AsDict().Set("name", name)
					call := jinja.NewDict()
					call.AsDict().Keys = make([]string, 0, 3)
					call.AsDict().Set("id", id)
					call.AsDict().Set("function", fn)
					call.AsDict().Set("type", stringValue(c.Type))
					calls[j] = call
				}
				dict.Set("tool_calls", jinja.NewList(calls))
			}
			if m.HasReasoning {
				dict.Set("reasoning", jinja.NewString(m.Reasoning))
				dict.Set("reasoning_content", jinja.NewString(m.Reasoning))
			}
		case "tool":
			if m.HasToolCallID {
				dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
			}
		case "developer":
			tools := jinja.None()
			if m.Tools != nil {
				v, tbig, err := decodeJSONBig(m.Tools)
				big = big || tbig
				if err != nil {
					return nil, false, openai.BadRequest(fmt.Sprintf("messages[%d].tools", i), "tools is not valid JSON")
				}
				tools = v
			}
			dict.Set("tools", tools)
		}
		if m.HasName {
			dict.Set("name", jinja.NewString(m.Name))
		}
		out[i] = d
	}
	return out, big, nil
}

// contentParts returns the parts of a message's content in order: texts (null ones dropped;
// a string is one part) and, for a multimodal model, media parts by modality. On a text-only
// model media parts are refused as vLLM refuses them.
func (r *Renderer) contentParts(m *openai.ChatMessage, i int) ([]contentPart, *openai.Error) {
	switch m.Content.Kind {
	case openai.ContentNull:
		return nil, nil
	case openai.ContentString:
		return []contentPart{{text: m.Content.Text}}, nil
	}
	parts := make([]contentPart, 0, len(m.Content.Parts))
	for j := range m.Content.Parts {
		p := &m.Content.Parts[j]
		if p.IsString {
			parts = append(parts, contentPart{text: p.Text})
			continue
		}
		if _, ok := textPartTypes[p.Type]; !ok || r.multimodal && partHasUUID(p) {
			param := fmt.Sprintf("messages[%d].content[%d]", i, j)
			if !r.multimodal {
				if p.Type == "" {
					return nil, openai.BadRequest(param, "content part has no type")
				}
				return nil, openai.BadRequest(param, fmt.Sprintf("content part type %q needs a multimodal model; this model takes text only", p.Type))
			}
			modality, err := partModality(p, param)
			if err != nil {
				return nil, err
			}
			parts = append(parts, contentPart{modality: modality})
			continue
		}
		if p.TextNull {
			continue
		}
		parts = append(parts, contentPart{text: p.Text})
	}
	return parts, nil
}

// contentPart is a text ("" modality) or a media item of a message.
type contentPart struct {
	text     string
	modality string
}

var textPartTypes = map[string]struct{}{"text": {}, "input_text": {}, "output_text": {}, "refusal": {}, "thinking": {}}

// contentValue is a message's content as the template sees it: in string format the
// non-empty texts joined with "\n" (media placeholders in front, stringFormatMedia); in openai
// format a list of text parts and {"type": modality} parts, except for tool messages, whose
// all-text lists are joined back into one string (empty parts included).
func (r *Renderer) contentValue(parts []contentPart, format string, tool bool, param string) (jinja.Value, *openai.Error) {
	var modalities []string
	for _, p := range parts {
		if p.modality != "" {
			modalities = append(modalities, p.modality)
		}
	}
	if format == FormatString {
		var b strings.Builder
		n := 0
		for _, p := range parts {
			if p.modality != "" || p.text == "" && len(parts) > 1 {
				continue
			}
			if n > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.text)
			n++
		}
		if len(modalities) > 0 {
			s, err := r.stringFormatMedia(b.String(), modalities, param)
			return jinja.NewString(s), err
		}
		return jinja.NewString(b.String()), nil
	}
	if tool && len(modalities) == 0 {
		texts := make([]string, len(parts))
		for i, p := range parts {
			texts[i] = p.text
		}
		return jinja.NewString(strings.Join(texts, "\n")), nil
	}
	items := make([]jinja.Value, len(parts))
	for i, p := range parts {
		if p.modality != "" {
			items[i] = modalityPart(p.modality)
		} else {
			items[i] = textPart(p.text)
		}
	}
	return jinja.NewList(items), nil
}

// textParts is texts as a list of {"type": "text", "text": t} parts.
func textParts(texts []string) jinja.Value {
	parts := make([]jinja.Value, len(texts))
	for i, t := range texts {
		parts[i] = textPart(t)
	}
	return jinja.NewList(parts)
}

func textPart(t string) jinja.Value {
	p := jinja.NewDict()
	p.AsDict().Keys = make([]string, 0, 2)
	p.AsDict().Set("type", jinja.NewString("text"))
	p.AsDict().Set("text", jinja.NewString(t))
	return p
}

// stringValue is s as a template value, shared when it is a common string.
func stringValue(s string) jinja.Value {
	if v, ok := commonValues[s]; ok {
		return v
	}
	return jinja.NewString(s)
}
