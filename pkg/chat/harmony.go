package chat

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// gpt-oss prompts are not rendered from the model's Jinja template: vLLM builds them with
// the Harmony encoder of openai_harmony (render_for_completion). This file reproduces that
// path: vLLM's chat-message → Harmony-message conversion
// (vllm/entrypoints/openai/parser/harmony_utils.py: extract_instructions_from_messages,
// build_harmony_preamble, parse_chat_input_to_harmony_message, auto_drop_analysis_messages,
// render_for_completion) and the encoder's rendering (openai/harmony src/encoding.rs: the
// message header, SystemContent and DeveloperContent sections, json_schema_to_typescript).
//
// Harmony works on tokens: every formatting token (<|start|>, <|channel|>, <|message|>,
// <|end|>, <|call|>) is one id, and each text segment between them is encoded ordinarily
// (tiktoken encode_ordinary), so special-token text written by a user stays text.

// Harmony defaults: SystemContent.new() of the Python package.
const (
	harmonyIdentity        = "You are ChatGPT, a large language model trained by OpenAI."
	harmonyKnowledgeCutoff = "2024-06"
)

type harmonyEncoding struct {
	tok                                     *tokenizer.Tokenizer
	start, end, message, channel, call, con uint32
}

func newHarmonyEncoding(tok *tokenizer.Tokenizer) (*harmonyEncoding, error) {
	h := &harmonyEncoding{tok: tok}
	for _, f := range []struct {
		text string
		id   *uint32
	}{{"<|start|>", &h.start}, {"<|end|>", &h.end}, {"<|message|>", &h.message}, {"<|channel|>", &h.channel}, {"<|call|>", &h.call}, {"<|constrain|>", &h.con}} {
		id, ok := tok.TokenID(f.text)
		if !ok {
			return nil, fmt.Errorf("chat: gpt-oss tokenizer has no %s token", f.text)
		}
		*f.id = id
	}
	return h, nil
}

// hMessage is a Harmony message. Exactly one of text, sys, dev carries the content.
type hMessage struct {
	role        string // user, assistant, system, developer, tool
	name        string // author name (tool messages: "functions.NAME")
	channel     string
	recipient   string
	contentType string
	texts       []string
	sys         *hSystem
	dev         *hDeveloper
}

type hSystem struct {
	effort string // low, medium, high
	date   string
}

type hDeveloper struct {
	instructions    *string
	tools           []openai.ChatTool
	toolsParsedJSON []jinja.Value // parameters, decoded (None when absent)
}

// renderHarmony is vLLM's _make_request_with_harmony for a chat request.
func (r *Renderer) renderHarmony(req *openai.ChatRequest) (Result, *openai.Error) {
	msgs := req.Messages
	var instructions *string
	if len(msgs) > 0 && (msgs[0].Role == "system" || msgs[0].Role == "developer") {
		instructions = flattenInputText(&msgs[0])
		msgs = msgs[1:]
	}
	effort := req.ReasoningEffort
	switch effort {
	case "none":
		return Result{}, openai.BadRequest("reasoning_effort", "Harmony does not support reasoning_effort='none'")
	case "", "low", "medium", "high":
	default:
		return Result{}, openai.BadRequest("reasoning_effort", fmt.Sprintf("reasoning_effort='%s' is not supported by Harmony. Supported values are: high, medium, low.", effort))
	}
	if effort == "" {
		effort = "medium" // SystemContent's default
	}
	hm := []hMessage{{role: "system", sys: &hSystem{effort: effort, date: r.now().Format("2006-01-02")}}}
	if instructions != nil && *instructions != "" || req.Tools != nil {
		dev := &hDeveloper{instructions: instructions, tools: req.Tools}
		for i, t := range req.Tools {
			p := jinja.None()
			if t.Parameters != nil {
				v, err := decodeJSON(t.Parameters)
				if err != nil {
					return Result{}, openai.BadRequest(fmt.Sprintf("tools[%d].function.parameters", i), "tool parameters are not valid JSON")
				}
				p = v
			}
			dev.toolsParsedJSON = append(dev.toolsParsedJSON, p)
		}
		hm = append(hm, hMessage{role: "developer", dev: dev})
	}
	conv, err := harmonyMessages(msgs)
	if err != nil {
		return Result{}, err
	}
	hm = append(hm, autoDropAnalysis(conv)...)

	var text strings.Builder
	ids := make([]uint32, 0, 256)
	hasFunctionTools := req.Tools != nil
	for i := range hm {
		var herr error
		if ids, herr = r.harmony.renderMessage(ids, &text, &hm[i], hasFunctionTools); herr != nil {
			return Result{}, openai.BadRequest("messages", herr.Error())
		}
	}
	ids = append(ids, r.harmony.start)
	text.WriteString("<|start|>")
	if ids, err2 := r.harmony.ordinary(ids, &text, "assistant"); err2 != nil {
		return Result{}, openai.BadRequest("messages", err2.Error())
	} else if len(text.String()) > r.maxPrompt {
		return Result{}, openai.BadRequest("", fmt.Sprintf("the rendered prompt is %d bytes, more than the %d allowed", text.Len(), r.maxPrompt))
	} else {
		return Result{Prompt: text.String(), TokenIDs: ids}, nil
	}
}

// flattenInputText is vLLM's flatten_input_text_content: a string as is, a list's string
// items and dict "text" values concatenated, nil for null content or a list without text.
func flattenInputText(m *openai.ChatMessage) *string {
	switch m.Content.Kind {
	case openai.ContentString:
		s := m.Content.Text
		return &s
	case openai.ContentParts:
		var b strings.Builder
		found := false
		for _, p := range m.Content.Parts {
			if t, ok := partTextKey(p); ok {
				b.WriteString(t)
				found = true
			}
		}
		if found {
			s := b.String()
			return &s
		}
	}
	return nil
}

// partTextKey is item.get("text") of a content part (a bare string is itself).
func partTextKey(p openai.ContentPart) (string, bool) {
	if p.IsString {
		return p.Text, true
	}
	if p.Type != "refusal" && p.Type != "thinking" && textPartKey(p.Type) {
		return p.Text, !p.TextNull
	}
	v, err := decodeJSON(p.Raw)
	if err != nil || !v.IsDict() {
		return "", false
	}
	t, ok := v.AsDict().Get("text")
	if !ok || !t.IsString() {
		return "", false
	}
	return t.AsString(), true
}

func textPartKey(typ string) bool {
	return typ == "text" || typ == "input_text" || typ == "output_text"
}

// harmonyMessages is parse_chat_inputs_to_harmony_messages over the messages after the
// instructions.
func harmonyMessages(msgs []openai.ChatMessage) ([]hMessage, *openai.Error) {
	names := map[string]string{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Name
		}
	}
	var out []hMessage
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			if c := flattenInputText(m); c != nil && *c != "" {
				out = append(out, hMessage{role: "assistant", channel: "commentary", texts: []string{*c}})
			}
			if m.HasReasoning && m.Reasoning != "" {
				out = append(out, hMessage{role: "assistant", channel: "analysis", texts: []string{m.Reasoning}})
			}
			for j, c := range m.ToolCalls {
				args := ""
				if a := c.Arguments; a != nil && !isNullJSON(a) {
					v, err := decodeJSON(a)
					if err != nil || !v.IsString() {
						return nil, openai.BadRequest(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j), "tool call arguments must be a string")
					}
					args = v.AsString()
				}
				out = append(out, hMessage{role: "assistant", channel: "commentary", recipient: "functions." + c.Name, contentType: "json", texts: []string{args}})
			}
			continue
		case m.Role == "tool":
			content := ""
			if c := flattenInputText(m); c != nil {
				content = *c
			}
			out = append(out, hMessage{role: "tool", name: "functions." + names[m.ToolCallID], channel: "commentary", recipient: "assistant", texts: []string{content}})
			continue
		}
		if m.Role == "assistant" && m.HasReasoning && m.Reasoning != "" {
			out = append(out, hMessage{role: "assistant", channel: "analysis", texts: []string{m.Reasoning}})
		}
		var texts []string
		switch m.Content.Kind {
		case openai.ContentNull:
			texts = []string{""}
		case openai.ContentString:
			texts = []string{m.Content.Text}
		case openai.ContentParts:
			if len(m.Content.Parts) == 0 {
				texts = []string{""} // [] or "" → content "" (Python's `or ""`)
			}
			for j, p := range m.Content.Parts {
				if p.IsString {
					return nil, openai.BadRequest(fmt.Sprintf("messages[%d].content[%d]", i, j), "'str' object has no attribute 'get'")
				}
				if _, ok := textPartTypes[p.Type]; !ok && p.Type != "" {
					return nil, openai.BadRequest(fmt.Sprintf("messages[%d].content[%d]", i, j), fmt.Sprintf("Unsupported chat content part type: '%s'.", p.Type))
				}
				t, _ := partTextKey(p)
				texts = append(texts, t)
			}
		}
		switch {
		case m.Role == "assistant":
			if len(texts) > 0 && texts[0] != "" {
				out = append(out, hMessage{role: "assistant", channel: "final", texts: texts})
			}
		case m.Role == "system" || m.Role == "developer":
			if instr := flattenInputText(m); instr != nil {
				out = append(out, hMessage{role: "developer", dev: &hDeveloper{instructions: instr}})
			}
		case m.Role == "user":
			out = append(out, hMessage{role: "user", texts: texts})
		default:
			return nil, openai.BadRequest(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("Unknown role: '%s'", m.Role))
		}
	}
	return out, nil
}

// autoDropAnalysis is vLLM's auto_drop_analysis_messages: analysis messages before the last
// assistant message to the final channel are dropped.
func autoDropAnalysis(msgs []hMessage) []hMessage {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].role == "assistant" && msgs[i].channel == "final" {
			last = i
			break
		}
	}
	out := msgs[:0:0]
	for i, m := range msgs {
		if i < last && m.channel == "analysis" {
			continue
		}
		out = append(out, m)
	}
	return out
}

func (h *harmonyEncoding) ordinary(ids []uint32, text *strings.Builder, s string) ([]uint32, error) {
	text.WriteString(s)
	return h.tok.EncodeOrdinary(ids, s)
}

func (h *harmonyEncoding) token(ids []uint32, text *strings.Builder, id uint32, s string) []uint32 {
	text.WriteString(s)
	return append(ids, id)
}

// renderMessage is encoding.rs Render<Message>: <|start|>, the author, " to=recipient",
// <|channel|>channel, " content_type", <|message|>, the content, <|call|> (assistant to a
// recipient) or <|end|>.
func (h *harmonyEncoding) renderMessage(ids []uint32, text *strings.Builder, m *hMessage, hasFunctionTools bool) ([]uint32, error) {
	var err error
	seg := func(s string) {
		if err == nil {
			ids, err = h.ordinary(ids, text, s)
		}
	}
	ids = h.token(ids, text, h.start, "<|start|>")
	if m.role == "tool" {
		seg(m.name)
	} else {
		seg(m.role)
		if m.name != "" {
			seg(":" + m.name)
		}
	}
	if m.recipient != "" && m.recipient != "all" {
		seg(" to=" + m.recipient)
	}
	if m.channel != "" {
		ids = h.token(ids, text, h.channel, "<|channel|>")
		seg(m.channel)
	}
	if m.contentType != "" {
		if rest, ok := strings.CutPrefix(m.contentType, "<|constrain|>"); ok {
			seg(" ")
			ids = h.token(ids, text, h.con, "<|constrain|>")
			if rest != "" {
				seg(rest)
			}
		} else {
			seg(" " + m.contentType)
		}
	}
	ids = h.token(ids, text, h.message, "<|message|>")
	switch {
	case m.sys != nil:
		seg(systemSection(m.sys, hasFunctionTools))
	case m.dev != nil:
		seg(developerSection(m.dev))
	default:
		for _, t := range m.texts {
			seg(t)
		}
	}
	if err != nil {
		return ids, err
	}
	if m.role == "assistant" && m.recipient != "" {
		return h.token(ids, text, h.call, "<|call|>"), nil
	}
	return h.token(ids, text, h.end, "<|end|>"), nil
}

// systemSection is encoding.rs Render<SystemContent> for vLLM's system message: identity,
// knowledge cutoff and date; reasoning effort; the channel rule.
func systemSection(s *hSystem, hasFunctionTools bool) string {
	channels := "# Valid channels: analysis, commentary, final. Channel must be included for every message."
	if hasFunctionTools {
		channels += "\nCalls to these tools must go to the commentary channel: 'functions'."
	}
	return harmonyIdentity + "\nKnowledge cutoff: " + harmonyKnowledgeCutoff + "\nCurrent date: " + s.date +
		"\n\nReasoning: " + s.effort + "\n\n" + channels
}

// developerSection is encoding.rs Render<DeveloperContent>: "# Instructions", the
// instructions, then the tools section.
func developerSection(d *hDeveloper) string {
	var sections []string
	if d.instructions != nil {
		sections = append(sections, "# Instructions", *d.instructions)
	}
	if len(d.tools) > 0 {
		sections = append(sections, toolsSection(d))
	}
	return strings.Join(sections, "\n\n")
}

// toolsSection is encoding.rs template_tools_section for the one "functions" namespace.
func toolsSection(d *hDeveloper) string {
	lines := []string{"## functions\n", "namespace functions {\n"}
	for i, t := range d.tools {
		for _, l := range rustLines(t.Description) {
			lines = append(lines, "// "+l)
		}
		if p := d.toolsParsedJSON[i]; !p.IsNone() {
			lines = append(lines, fmt.Sprintf("type %s = (_: %s) => any;\n", t.Name, schemaToTypeScript(p, "")))
		} else {
			lines = append(lines, fmt.Sprintf("type %s = () => any;\n", t.Name))
		}
	}
	lines = append(lines, "} // namespace functions")
	return "# Tools\n\n" + strings.Join(lines, "\n")
}

// rustLines is Rust's str::lines: split on "\n", a trailing "\r" dropped from each line, no
// final empty line.
func rustLines(s string) []string {
	if s == "" {
		return nil
	}
	s = strings.TrimSuffix(s, "\n")
	parts := strings.Split(s, "\n")
	for i, p := range parts {
		parts[i] = strings.TrimSuffix(p, "\r")
	}
	return parts
}

// ---- json_schema_to_typescript (encoding.rs), over decoded JSON values ----

func get(v jinja.Value, k string) (jinja.Value, bool) {
	if !v.IsDict() {
		return jinja.Undefined(), false
	}
	return v.AsDict().Get(k)
}

func getStr(v jinja.Value, k string) (string, bool) {
	x, ok := get(v, k)
	if !ok || !x.IsString() {
		return "", false
	}
	return x.AsString(), true
}

func isEnum(v jinja.Value) bool {
	e, ok := get(v, "enum")
	return ok && e.IsList() && e.AsList().Len() > 0
}

func nullable(v jinja.Value) bool {
	n, ok := get(v, "nullable")
	return ok && n.IsBool() && n.AsBool()
}

// defaultComment renders a default the way encoding.rs does in the given context: a string
// default is quoted unless the schema is an enum; other values are serde_json's compact
// Display.
func defaultComment(schema, def jinja.Value) string {
	if def.IsString() {
		if !isEnum(schema) {
			return `default: "` + def.AsString() + `"`
		}
		return "default: " + def.AsString()
	}
	return "default: " + serdeJSON(def)
}

func schemaToTypeScript(schema jinja.Value, indent string) string {
	if oneOf, ok := get(schema, "oneOf"); ok && oneOf.IsList() {
		var b strings.Builder
		for i, variant := range oneOf.AsList().Items {
			if i > 0 {
				b.WriteString("\n" + indent + " | ")
			} else {
				b.WriteString("\n" + indent + " | ")
			}
			ts := schemaToTypeScript(variant, indent+"   ")
			if nullable(variant) && !strings.Contains(ts, "null") {
				ts += " | null"
			}
			b.WriteString(ts)
			var comments []string
			if d, ok := getStr(variant, "description"); ok {
				comments = append(comments, d)
			}
			if def, ok := get(variant, "default"); ok {
				if def.IsString() && !isEnum(variant) {
					comments = append(comments, `default: "`+def.AsString()+`"`)
				} else {
					comments = append(comments, "default: "+serdeJSON(def))
				}
			}
			if len(comments) > 0 {
				b.WriteString(" // " + strings.Join(comments, " "))
			}
		}
		return b.String()
	}
	if types, ok := get(schema, "type"); ok && types.IsList() {
		var ts []string
		for _, t := range types.AsList().Items {
			if t.IsString() {
				s := t.AsString()
				if s == "integer" {
					s = "number"
				}
				ts = append(ts, s)
			}
		}
		if len(ts) > 0 {
			return strings.Join(ts, " | ")
		}
	}
	ty, ok := getStr(schema, "type")
	if !ok {
		if oneOf, ok := get(schema, "oneOf"); ok && oneOf.IsList() {
			var parts []string
			for _, v := range oneOf.AsList().Items {
				parts = append(parts, schemaToTypeScript(v, indent))
			}
			return strings.Join(parts, "\n | ")
		}
		return "any"
	}
	switch ty {
	case "object":
		return objectToTypeScript(schema, indent)
	case "string":
		if e, ok := get(schema, "enum"); ok && e.IsList() {
			var vals []string
			for _, x := range e.AsList().Items {
				if x.IsString() {
					vals = append(vals, `"`+x.AsString()+`"`)
				}
			}
			if len(vals) > 0 {
				return strings.Join(vals, " | ")
			}
		}
		return "string"
	case "number", "integer":
		return "number"
	case "boolean":
		return "boolean"
	case "array":
		if items, ok := get(schema, "items"); ok {
			return schemaToTypeScript(items, indent) + "[]"
		}
		return "Array<any>"
	}
	return "any"
}

// objectToTypeScript writes an object schema as Harmony's TypeScript-like type: its
// description, then one property a line between braces.
func objectToTypeScript(schema jinja.Value, indent string) string {
	var b strings.Builder
	if d, ok := getStr(schema, "description"); ok {
		b.WriteString(indent + "// " + d + "\n")
	}
	b.WriteString("{\n")
	props, ok := get(schema, "properties")
	if ok && props.IsDict() {
		required := map[string]bool{}
		if req, ok := get(schema, "required"); ok && req.IsList() {
			for _, r := range req.AsList().Items {
				if r.IsString() {
					required[r.AsString()] = true
				}
			}
		}
		pd := props.AsDict()
		for _, key := range pd.Keys {
			name := key
			if !required[key] {
				name += "?"
			}
			writeProperty(&b, indent, name, pd.Data[key])
		}
	}
	b.WriteString(indent + "}")
	return b.String()
}

// writeProperty writes one property of an object type: its comments (title, description,
// examples), then name (with "?" when optional) and its type, with the default as a trailing
// comment.
func writeProperty(b *strings.Builder, indent, name string, val jinja.Value) {
	if title, ok := getStr(val, "title"); ok {
		b.WriteString(indent + "// " + title + "\n" + indent + "//\n")
	}
	oneOf, hasOneOf := get(val, "oneOf")
	if !hasOneOf {
		if d, ok := getStr(val, "description"); ok {
			b.WriteString(indent + "// " + d + "\n")
		}
	}
	if ex, ok := get(val, "examples"); ok && ex.IsList() && ex.AsList().Len() > 0 {
		b.WriteString(indent + "// Examples:\n")
		for _, e := range ex.AsList().Items {
			if e.IsString() {
				b.WriteString(indent + "// - \"" + e.AsString() + "\"\n")
			}
		}
	}
	if hasOneOf && oneOf.IsList() {
		writeOneOf(b, indent, name, val, oneOf.AsList().Items)
		return
	}
	b.WriteString(indent + name + ": ")
	ts := schemaToTypeScript(val, indent+"    ")
	if nullable(val) && !strings.Contains(ts, "null") {
		ts += " | null"
	}
	b.WriteString(ts + ",")
	if !hasOneOf {
		if def, ok := get(val, "default"); ok {
			b.WriteString(" // " + defaultComment(val, def))
		}
	}
	b.WriteString("\n")
}

// writeOneOf writes a property whose schema is a oneOf union: the property's description and
// default above it, then one variant a line, each with its own description (unless the line
// above said it) and default as a trailing comment.
func writeOneOf(b *strings.Builder, indent, name string, val jinja.Value, variants []jinja.Value) {
	propDesc, hasPropDesc := getStr(val, "description")
	skip := false
	if hasPropDesc && len(variants) > 0 {
		if vd, ok := getStr(variants[0], "description"); ok && vd == propDesc {
			skip = true
		}
	}
	renderedAbove := false
	if !skip && hasPropDesc {
		b.WriteString(indent + "// " + propDesc + "\n")
		renderedAbove = true
	}
	if def, ok := get(val, "default"); ok {
		b.WriteString(indent + "// " + defaultComment(val, def) + "\n")
	}
	b.WriteString(indent + name + ":\n")
	for i, variant := range variants {
		b.WriteString(indent + " | ")
		ts := schemaToTypeScript(variant, indent+"   ")
		if nullable(variant) && !strings.Contains(ts, "null") {
			ts += " | null"
		}
		b.WriteString(ts)
		var comments []string
		if !(i == 0 && renderedAbove) {
			if vd, ok := getStr(variant, "description"); ok && !(hasPropDesc && vd == propDesc) {
				comments = append(comments, vd)
			}
		}
		if def, ok := get(variant, "default"); ok {
			comments = append(comments, defaultComment(variant, def))
		}
		if len(comments) > 0 {
			b.WriteString(" // " + strings.Join(comments, " "))
		}
		b.WriteString("\n")
	}
	b.WriteString(indent + ",\n")
}

// serdeJSON is serde_json's compact Display of a value (preserve_order): no spaces, floats
// in ryu's shortest form ("1.0", "1e16", "1e-7"), strings escaped as serde_json does.
func serdeJSON(v jinja.Value) string {
	var b strings.Builder
	writeSerde(&b, v)
	return b.String()
}

func writeSerde(b *strings.Builder, v jinja.Value) {
	switch {
	case v.IsNone(), v.IsUndefined():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(ryuFloat(v.AsFloat()))
	case v.IsString():
		b.WriteByte('"')
		for _, r := range v.AsString() {
			switch r {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if r < 0x20 {
					fmt.Fprintf(b, `\u%04x`, r)
				} else {
					b.WriteRune(r)
				}
			}
		}
		b.WriteByte('"')
	case v.IsList():
		b.WriteByte('[')
		for i, x := range v.AsList().Items {
			if i > 0 {
				b.WriteByte(',')
			}
			writeSerde(b, x)
		}
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		b.WriteByte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeSerde(b, jinja.NewString(k))
			b.WriteByte(':')
			writeSerde(b, d.Data[k])
		}
		b.WriteByte('}')
	default:
		if x, ok := bigOf(v); ok && isBigInt(v) {
			// serde_json holds an integer beyond i64 as u64 when it fits, else as f64.
			if x.IsUint64() {
				b.WriteString(x.String())
			} else {
				f, _ := new(big.Float).SetInt(x).Float64()
				b.WriteString(ryuFloat(f))
			}
			return
		}
		b.WriteString("null")
	}
}

// ryuFloat formats a finite float as the ryu crate does (serde_json's f64 Display):
// shortest round-trip digits, decimal notation for exponents in [-5, 16), else d.ddde±x
// with no '+'. Non-finite numbers are null in serde_json.
func ryuFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "null"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±xx
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	n := len(digits)
	kk := exp + 1 // position of the decimal point
	var out string
	switch {
	case n <= kk && kk <= 16:
		out = digits + strings.Repeat("0", kk-n) + ".0"
	case 0 < kk && kk <= 16:
		out = digits[:kk] + "." + digits[kk:]
	case -5 < kk && kk <= 0:
		out = "0." + strings.Repeat("0", -kk) + digits
	case n == 1:
		out = digits + "e" + strconv.Itoa(kk-1)
	default:
		out = digits[:1] + "." + digits[1:] + "e" + strconv.Itoa(kk-1)
	}
	if neg {
		return "-" + out
	}
	return out
}
