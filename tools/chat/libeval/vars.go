package main

// A Go port of the variable-building half of /work/main/tools/chat/gen.py
// (check_request, parse_content, convert_message, convert_tool, merge_kwargs,
// render_request up to the render call, and the continue_final_message post-processing).
// The content format is taken from the golden file (gen.py's detect_content_format result).

import (
	"regexp"
	"strings"
	"unicode"
)

// rejected: a request gen.py refuses before any template runs (Rejected), or a
// pre-render ValueError/TypeError of render_request. Not a library test.
type rejected struct{ msg string }

func (r *rejected) Error() string { return r.msg }

type renderVars struct {
	vars  []string // names in order
	vals  map[string]*J
	cfm   bool
	final string // final_message (cfm)
}

func (rv *renderVars) put(k string, v *J) {
	if _, ok := rv.vals[k]; !ok {
		rv.vars = append(rv.vars, k)
	}
	rv.vals[k] = v
}

func (rv *renderVars) asObj() *J {
	o := jobj()
	for _, k := range rv.vars {
		o.set(k, rv.vals[k])
	}
	return o
}

const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

var applyParams = map[string]bool{"conversation": true, "tools": true, "documents": true, "chat_template": true,
	"add_generation_prompt": true, "continue_final_message": true, "tokenize": true, "padding": true, "truncation": true,
	"max_length": true, "return_tensors": true, "return_dict": true, "return_assistant_tokens_mask": true, "tokenizer_kwargs": true}

var textKeys = map[string]string{"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}

func checkRequest(req *J) error {
	if truthy(req.get("stream_options")) && !truthy(req.get("stream")) {
		return &rejected{"Stream options can only be defined when `stream=True`."}
	}
	if t := req.get("tools"); t != nil && t.K == jArr && len(t.Arr) == 0 {
		return &rejected{"`tools` must not be an empty array. Either provide at least one tool or omit the field entirely."}
	}
	tc := req.get("tool_choice")
	if !(isNone(tc) || tc.K == jStr && tc.S == "none") && isNone(req.get("tools")) {
		return &rejected{"When using `tool_choice`, `tools` must be set."}
	}
	agp := req.get("add_generation_prompt")
	if truthy(req.get("continue_final_message")) && (agp == nil || truthy(agp)) {
		return &rejected{"Cannot set both `continue_final_message` and `add_generation_prompt` to True."}
	}
	kw := req.get("chat_template_kwargs")
	if !isNone(req.get("chat_template")) || !isNone(kw.get("chat_template")) {
		return &rejected{"Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template."}
	}
	return nil
}

func parseContent(content *J, format, role string) (*J, error) {
	var parts []*J
	switch {
	case isNone(content):
	case content.K == jStr:
		parts = []*J{jobj().set("type", jstr("text")).set("text", content)}
	default:
		parts = content.Arr
	}
	var texts []string
	for _, p := range parts {
		if p.K == jStr {
			texts = append(texts, p.S)
			continue
		}
		t := p.get("type")
		key, ok := "", false
		if t != nil && t.K == jStr {
			key, ok = textKeys[t.S]
		}
		if !ok {
			return nil, &rejected{"content part type needs a multimodal model"}
		}
		if isNone(p.get(key)) {
			continue
		}
		texts = append(texts, p.get(key).S)
	}
	if format == "string" {
		var nz []string
		for _, t := range texts {
			if t != "" {
				nz = append(nz, t)
			}
		}
		return jstr(strings.Join(nz, "\n")), nil
	}
	if role == "tool" {
		return jstr(strings.Join(texts, "\n")), nil
	}
	out := jarr()
	for _, t := range texts {
		out.Arr = append(out.Arr, jobj().set("type", jstr("text")).set("text", jstr(t)))
	}
	return out, nil
}

func parseArguments(args *J) *J {
	if args == nil || args.K != jStr {
		if args != nil && (args.K == jObj || args.K == jArr) {
			return args
		}
		return jobj()
	}
	v, err := parseJSON([]byte(args.S), true)
	if err != nil {
		return jobj()
	}
	return v
}

func orNull(v *J) *J {
	if v == nil {
		return jnull()
	}
	return v
}

func convertMessage(m *J, format string) (*J, error) {
	role := m.get("role").S
	content, err := parseContent(m.get("content"), format, role)
	if err != nil {
		return nil, err
	}
	out := jobj().set("role", jstr(role)).set("content", content)
	reasoning := m.get("reasoning")
	if isNone(reasoning) {
		reasoning = m.get("reasoning_content")
	}
	switch role {
	case "assistant":
		if tc := m.get("tool_calls"); !isNone(tc) {
			calls := jarr()
			for _, c := range tc.Arr {
				f := c.get("function")
				if f == nil {
					f = jobj()
				}
				typ := c.get("type")
				if typ == nil {
					typ = jstr("function")
				}
				calls.Arr = append(calls.Arr, jobj().set("id", orNull(c.get("id"))).
					set("function", jobj().set("arguments", parseArguments(f.get("arguments"))).set("name", orNull(f.get("name")))).
					set("type", typ))
			}
			if len(calls.Arr) > 0 {
				out.set("tool_calls", calls)
			}
		}
		if !isNone(reasoning) {
			out.set("reasoning", reasoning)
			out.set("reasoning_content", reasoning)
		}
	case "tool":
		if id := m.get("tool_call_id"); !isNone(id) {
			out.set("tool_call_id", id)
		}
	case "developer":
		out.set("tools", orNull(m.get("tools")))
	}
	if n := m.get("name"); n != nil && n.K == jStr {
		out.set("name", n)
	}
	return out, nil
}

func convertTool(t *J) *J {
	f := t.get("function")
	fn := jobj().set("name", f.get("name")).set("description", orNull(f.get("description"))).set("parameters", orNull(f.get("parameters")))
	for _, k := range f.Keys {
		if _, ok := fn.Vals[k]; !ok {
			fn.set(k, f.Vals[k])
		}
	}
	return jobj().set("type", jstr("function")).set("function", fn)
}

// mergeKwargs: defaults | {k: v for k, v in overrides.items() if v not in (None, "auto")}
func mergeKwargs(defaults, overrides *J) *J {
	out := defaults.clone()
	for _, k := range overrides.Keys {
		v := overrides.Vals[k]
		if isNone(v) || v.K == jStr && v.S == "auto" {
			continue
		}
		out.set(k, v)
	}
	return out
}

var identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// templateNames approximates jinja2.meta.find_undeclared_variables by every identifier
// in the source (a superset; the -dumpvars cross-check against gen.py verifies the result).
func templateNames(src string) map[string]bool {
	m := map[string]bool{}
	for _, s := range identRE.FindAllString(src, -1) {
		m[s] = true
	}
	return m
}

// buildVars is render_request up to the render call.
func buildVars(source string, names map[string]bool, special []kv, req *J, format string) (*renderVars, error) {
	req = req.clone()
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	var tools *J
	if t := req.get("tools"); !isNone(t) {
		tools = jarr()
		for _, x := range t.Arr {
			tools.Arr = append(tools.Arr, convertTool(x))
		}
	}
	agp := req.get("add_generation_prompt")
	if agp == nil {
		agp = jbool(true)
	}
	cfmv := req.get("continue_final_message")
	if cfmv == nil {
		cfmv = jbool(false)
	}
	extra := jobj().set("add_generation_prompt", agp).set("continue_final_message", cfmv).
		set("documents", orNull(req.get("documents"))).set("reasoning_effort", orNull(req.get("reasoning_effort")))
	user := req.get("chat_template_kwargs")
	if !truthy(user) {
		user = jobj()
	}
	if re := req.get("reasoning_effort"); !isNone(re) {
		if _, ok := user.Vals["enable_thinking"]; !ok {
			extra.set("enable_thinking", jbool(!(re.K == jStr && re.S == "none")))
		}
	}
	base := jobj().set("tools", orNull(tools)).set("tokenize", jbool(false))
	kwargs := mergeKwargs(mergeKwargs(jobj(), base), mergeKwargs(user, extra))
	kept := jobj()
	for _, k := range kwargs.Keys {
		if names[k] || applyParams[k] {
			kept.set(k, kwargs.Vals[k])
		}
	}
	chat := jarr()
	for _, m := range req.get("messages").Arr {
		cm, err := convertMessage(m, format)
		if err != nil {
			return nil, err
		}
		chat.Arr = append(chat.Arr, cm)
	}
	pop := func(k string, def *J) *J {
		v, ok := kept.Vals[k]
		if !ok {
			return def
		}
		kept.del(k)
		return v
	}
	toolsArg := pop("tools", jnull())
	documents := pop("documents", jnull())
	agpv := pop("add_generation_prompt", jbool(false))
	cfm := pop("continue_final_message", jbool(false))
	for _, k := range append([]string{}, kept.Keys...) {
		if applyParams[k] {
			kept.del(k)
		}
	}
	if toolsArg.K == jArr {
		for _, t := range toolsArg.Arr {
			if t.K != jObj {
				return nil, &rejected{"Tools should either be a JSON schema, ..."}
			}
		}
	}
	if documents.K == jArr {
		for _, d := range documents.Arr {
			if d.K != jObj {
				return nil, &rejected{"Documents should be a list of dicts with 'title' and 'text' keys!"}
			}
		}
	}
	rv := &renderVars{vals: map[string]*J{}}
	if truthy(cfm) {
		rv.cfm = true
		last := chat.Arr[len(chat.Arr)-1]
		c := last.get("content")
		if c.K == jArr {
			found := false
			for i := len(c.Arr) - 1; i >= 0; i-- {
				block := c.Arr[i]
				if t, ok := block.Vals["text"]; ok {
					rv.final = t.S
					block.set("text", jstr(t.S+continueTag))
					found = true
					break
				}
			}
			if !found {
				return nil, &rejected{"continue_final_message is set but we could not find any text to continue in the final message!"}
			}
		} else {
			rv.final = c.S
			last.set("content", jstr(c.S+continueTag))
		}
	}
	rv.put("messages", chat)
	rv.put("tools", toolsArg)
	rv.put("documents", documents)
	rv.put("add_generation_prompt", agpv)
	for _, s := range special {
		rv.put(s.k, s.v)
	}
	for _, k := range kept.Keys {
		rv.put(k, kept.Vals[k])
	}
	return rv, nil
}

func pyIsSpace(r rune) bool    { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }
func pyStrip(s string) string  { return strings.TrimFunc(s, pyIsSpace) }
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }

// finishCFM is render_request's post-processing for continue_final_message.
func finishCFM(rv *renderVars, rendered string) (string, error) {
	if !rv.cfm {
		return rendered, nil
	}
	tag := strings.TrimSpace(continueTag)
	if !strings.Contains(rendered, pyStrip(rv.final)) || !strings.Contains(rendered, tag) {
		return "", &cfmError{}
	}
	loc := strings.LastIndex(rendered, tag)
	if strings.HasPrefix(rendered[loc:], continueTag) {
		return rendered[:loc], nil
	}
	return pyRStrip(rendered[:loc]), nil
}

type cfmError struct{}

func (*cfmError) Error() string {
	return "continue_final_message is set but the final message does not appear in the chat after applying the chat template!"
}
