package parse

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kvgate/kvgate/pkg/openai"
)

// deepseek_v32: DeepSeek V3.2's DSML calls, vllm/tool_parsers/deepseekv32_tool_parser.py (the
// streaming path of its classic parser, _process_streaming_buffer).
//
//	content<｜DSML｜function_calls>
//	<｜DSML｜invoke name="NAME">
//	<｜DSML｜parameter name="P" string="true">VALUE</｜DSML｜parameter>
//	</｜DSML｜invoke>
//	</｜DSML｜function_calls>content
//
// Text outside blocks is content (several blocks may follow each other). In a block, whitespace
// is dropped and each `<｜DSML｜invoke\s+name="NAME"\s*>` starts a call (id "call_" + 24 hex),
// ended by "</｜DSML｜invoke>". Its arguments are streamed as vLLM streams them, without
// spaces between entries: "{" or "," then json.dumps(P) and ":", then the value:
//   - string="true": VALUE as a JSON string, sent as it arrives;
//   - string="false" and a schema whose types are all object or array: VALUE raw, as it arrives;
//   - string="false" otherwise: the whole VALUE coerced by the schema's types (dsmlCoerce) and
//     written by json.dumps;
//   - a lone "arguments" or "input" first parameter the schema does not list (when it lists
//     some): held whole and unwrapped when it is an object of listed keys (_repair_param_dict).
//
// A call ends with "}" ("{}" with no parameter). Bounded and malformed input (vLLM's streaming
// parser stops reading at all of these but the first):
//   - a parameter cut off by the end of output ends there and its call is closed; a call
//     still open at the block's end marker or the end of output is closed;
//   - an invoke or parameter tag that cannot match, or is longer than MaxCallBytes, is
//     dropped with the other text in the block that is neither a tag nor whitespace;
//   - a held value longer than MaxCallBytes is sent as a string from then on.
//
// Calls written outside a block, and other models' blocks, are read as dsmlorphan.go says.

const (
	dsFCStart    = "<｜DSML｜function_calls>"
	dsFCEnd      = "</｜DSML｜function_calls>"
	dsInvokeTag  = "<｜DSML｜invoke"
	dsInvokeEnd  = "</｜DSML｜invoke>"
	dsParamTag   = "<｜DSML｜parameter"
	dsParamEnd   = "</｜DSML｜parameter>"
	dsNameAttr   = `name="`
	dsStringAttr = `string="`
)

var dsmlParamEnds = newMarkerSet(dsParamEnd)

const (
	dvText uint8 = iota
	dvBlock
	dvCall
	dvParam
	dvForeign     // another model's block (dsmlorphan.go)
	dvAfterOrphan // after an orphan call (dsmlorphan.go)
)

// Parameter modes of a DSML call.
const (
	dmString uint8 = iota + 1
	dmRaw
	dmBuffered
	dmWrapper
)

// dsmlCall is the call being read: its index, name and schema properties, whether an entry
// of its arguments was sent, and the parameter being read (mode 0: none) with its held value
// (buffered modes) or undecoded UTF-8 tail (string mode).
type dsmlCall struct {
	idx         int
	name        string
	props       map[string]json.RawMessage
	argsStarted bool
	orphan      bool // written outside a block (dsmlorphan.go)
	mode        uint8
	pname       string
	strAttr     bool
	val         []byte
}

func (t *toolStage) stepDSML(e *emitter, b []byte, eof bool) int {
	switch t.st {
	case dvText:
		return t.dsmlContent(e, b, eof)
	case dvForeign:
		return t.dsmlForeign(e, b, eof)
	case dvAfterOrphan:
		return t.dsmlAfterOrphan(e, b, eof)
	case dvBlock, dvCall:
		return t.dsmlTags(e, b, eof)
	}
	n, m := dsmlParamEnds.next(b, eof)
	switch {
	case m == 0:
		t.dsmlEndParam(e)
		t.st = dvCall
		return len(dsParamEnd)
	case n > 0:
		t.dsmlValue(e, b[:n])
	}
	return n
}

// dsmlTags reads the head of a block (dvBlock) or of a call between parameters (dvCall).
func (t *toolStage) dsmlTags(e *emitter, b []byte, eof bool) int {
	if n, wait := skipPySpace(b, eof); n > 0 || wait {
		return n
	}
	fcEnd := markerAt(b, dsFCEnd)
	switch {
	case fcEnd == fullMatch:
		t.dsmlClose(e)
		t.st = dvText
		return len(dsFCEnd)
	case t.st == dvCall && markerAt(b, dsInvokeEnd) == fullMatch:
		orphan := t.ds.orphan
		t.dsmlClose(e)
		t.st = dvBlock
		if orphan {
			t.st = dvAfterOrphan
		}
		return len(dsInvokeEnd)
	}
	tag, st := dsmlTag(b, false, t.limit, eof)
	if st == attrOK {
		t.dsmlClose(e)
		t.ds = dsmlCall{name: string(tag.name), props: dsmlProps(t.tools, string(tag.name))}
		t.ds.idx = e.startCall(t.ds.name)
		t.st = dvCall
		return tag.n
	}
	wait := st == attrWait || fcEnd == partMatch && !eof
	if t.st == dvCall {
		ptag, pst := dsmlTag(b, true, t.limit, eof)
		if pst == attrOK {
			t.dsmlParam(e, string(ptag.name), ptag.str)
			t.st = dvParam
			return ptag.n
		}
		wait = wait || pst == attrWait || markerAt(b, dsInvokeEnd) == partMatch && !eof
	}
	switch {
	case wait:
		return 0
	case b[0] == '<':
		return 1 // dropped: no tag starts here
	}
	if i := bytes.IndexByte(b, '<'); i > 0 {
		return i
	}
	return len(b)
}

// dsmlParam starts parameter name of the current call in the mode vLLM's streaming path picks.
func (t *toolStage) dsmlParam(e *emitter, name string, str bool) {
	d := &t.ds
	d.pname, d.strAttr, d.val = name, str, d.val[:0]
	_, listed := d.props[name]
	switch types := dsmlTypes(d.props[name]); {
	case !d.argsStarted && len(d.props) > 0 && (name == "arguments" || name == "input") && !listed:
		d.mode = dmWrapper
	case str:
		d.mode = dmString
		t.dsmlKey(e, name, true)
	case !rawTypes(types):
		d.mode = dmBuffered
	default:
		d.mode = dmRaw
		t.dsmlKey(e, name, false)
	}
}

// rawTypes is _can_stream_raw_param: every type is object or array.
func rawTypes(types []string) bool {
	for _, ty := range types {
		if ty != "object" && ty != "array" {
			return false
		}
	}
	return true
}

// dsmlKey sends the start of an arguments entry: "{" or ",", the key, ":" and a quote for a
// string value.
func (t *toolStage) dsmlKey(e *emitter, key string, quote bool) {
	d := &t.ds
	out := []byte{','}
	if !d.argsStarted {
		out[0] = '{'
	}
	d.argsStarted = true
	out = append(appendPyString(out, []byte(key)), ':')
	if quote {
		out = append(out, '"')
	}
	e.addArgs(d.idx, out)
}

// dsmlValue takes text of the current parameter's value.
func (t *toolStage) dsmlValue(e *emitter, b []byte) {
	d := &t.ds
	switch d.mode {
	case dmRaw:
		e.addArgs(d.idx, b)
		return
	case dmBuffered, dmWrapper:
		if len(d.val)+len(b) <= t.limit {
			d.val = append(d.val, b...)
			return
		}
		d.mode = dmString // too long to hold: sent as a string from here on
		t.dsmlKey(e, d.pname, true)
	}
	d.val = append(d.val, b...)
	cut := completeRunes(d.val)
	e.addArgs(d.idx, appendPyStringBody(nil, d.val[:cut]))
	d.val = d.val[:copy(d.val, d.val[cut:])]
}

// completeRunes returns the length of b less a UTF-8 sequence cut off at its end.
func completeRunes(b []byte) int {
	for k := len(b) - 1; k >= 0 && k >= len(b)-utf8.UTFMax+1; k-- {
		if utf8.RuneStart(b[k]) {
			if !utf8.FullRune(b[k:]) {
				return k
			}
			break
		}
	}
	return len(b)
}

// dsmlEndParam ends the current parameter (its end marker, or the end of output).
func (t *toolStage) dsmlEndParam(e *emitter) {
	d := &t.ds
	switch d.mode {
	case dmString:
		e.addArgs(d.idx, append(appendPyStringBody(nil, d.val), '"'))
	case dmBuffered, dmWrapper:
		for _, kv := range dsmlRepair(d.pname, d.coerce(), d.props) {
			t.dsmlKey(e, kv.key, false)
			e.addArgs(d.idx, kv.val)
		}
	}
	d.mode, d.val = 0, d.val[:0]
}

// dsmlClose ends the call being read, if any.
func (t *toolStage) dsmlClose(e *emitter) {
	if t.st != dvCall && t.st != dvParam {
		return
	}
	if t.ds.mode != 0 {
		t.dsmlEndParam(e)
	}
	if t.ds.argsStarted {
		e.addArgs(t.ds.idx, []byte{'}'})
	} else {
		e.addArgs(t.ds.idx, []byte("{}"))
	}
	t.ds = dsmlCall{val: t.ds.val[:0]}
}

// finishDSML closes a call cut off by the end of output.
func (t *toolStage) finishDSML(e *emitter) {
	t.dsmlClose(e)
	t.st = dvText
}

// skipPySpace returns the length of the Python whitespace (str.lstrip) at the head of b, and
// whether a character cut off at the end of b (not eof) must wait to be decided.
func skipPySpace(b []byte, eof bool) (int, bool) {
	i := 0
	for i < len(b) {
		if !utf8.FullRune(b[i:]) {
			return i, i == 0 && !eof
		}
		r, n := utf8.DecodeRune(b[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i, false
}

// dsmlTagMatch is a matched tag: its length, the name attribute and the string attribute.
type dsmlTagMatch struct {
	n    int
	name []byte
	str  bool
}

// dsmlTag matches `<｜DSML｜invoke\s+name="NAME"\s*>` (param: `<｜DSML｜parameter\s+name="NAME"
// \s+string="true|false"\s*>`) at the head of b. A tag longer than limit does not match, so
// the answer does not depend on how the text was split; attrWait: more text decides.
func dsmlTag(b []byte, param bool, limit int, eof bool) (dsmlTagMatch, int) {
	m, st := dsmlTagAt(b, param)
	if st == attrWait && (eof || len(b) >= limit) || st == attrOK && m.n > limit {
		st = attrBad
	}
	return m, st
}

func dsmlTagAt(b []byte, param bool) (dsmlTagMatch, int) {
	var m dsmlTagMatch
	open := dsInvokeTag
	if param {
		open = dsParamTag
	}
	i, st := litAt(b, 0, open)
	if st == attrOK {
		i, st = tagSpace(b, i, true)
	}
	if st == attrOK {
		i, st = litAt(b, i, dsNameAttr)
	}
	if st == attrOK {
		q := bytes.IndexByte(b[i:], '"')
		switch {
		case q < 0:
			return m, attrWait
		case q == 0:
			return m, attrBad
		}
		m.name, i = b[i:i+q], i+q+1
		i, st = tagSpace(b, i, param)
	}
	if st == attrOK && param {
		if i, st = litAt(b, i, dsStringAttr); st == attrOK {
			t, st1 := litAt(b, i, `true"`)
			f, st2 := litAt(b, i, `false"`)
			switch {
			case st1 == attrOK:
				i, m.str = t, true
			case st2 == attrOK:
				i = f
			case st1 == attrWait || st2 == attrWait:
				st = attrWait
			default:
				st = attrBad
			}
		}
		if st == attrOK {
			i, st = tagSpace(b, i, false)
		}
	}
	if st == attrOK {
		i, st = litAt(b, i, ">")
	}
	m.n = i
	return m, st
}

// litAt matches the literal s at b[i:].
func litAt(b []byte, i int, s string) (int, int) {
	switch markerAt(b[i:], s) {
	case fullMatch:
		return i + len(s), attrOK
	case partMatch:
		return i, attrWait
	}
	return i, attrBad
}

// tagSpace skips the regex's \s* (\s+ when one is needed) at b[i:]; the end of b waits.
func tagSpace(b []byte, i int, one bool) (int, int) {
	j := i
	for j < len(b) && utf8.FullRune(b[j:]) {
		r, n := utf8.DecodeRune(b[j:])
		if !unicode.IsSpace(r) {
			break
		}
		j += n
	}
	switch {
	case j == len(b) || !utf8.FullRune(b[j:]):
		return j, attrWait
	case one && j == i:
		return j, attrBad
	}
	return j, attrOK
}

// dsmlProps is find_tool_properties: the "properties" of the first tool named name.
func dsmlProps(tools []openai.ChatTool, name string) map[string]json.RawMessage {
	for _, tl := range tools {
		if tl.Name == name {
			var s struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			_ = json.Unmarshal(tl.Parameters, &s)
			return s.Properties
		}
	}
	return nil
}

// dsmlTypes is extract_types_from_schema: the types a parameter schema allows, as written,
// ["string"] when it gives none.
func dsmlTypes(schema json.RawMessage) []string {
	set := map[string]bool{}
	schemaTypes(schema, set, false, 0)
	if len(set) == 0 {
		return []string{"string"}
	}
	types := make([]string, 0, len(set))
	for ty := range set {
		types = append(types, ty)
	}
	return types
}

// dsmlConverted is a converted parameter value: its json.dumps text and, for a string, the string.
type dsmlConverted struct {
	json  []byte
	isStr bool
	str   string
}

// coerce converts the held value of the current parameter: as written for string="true",
// else by coerce_to_schema_type.
func (d *dsmlCall) coerce() dsmlConverted {
	v := string(d.val)
	if d.strAttr {
		return dsmlConverted{json: appendPyString(nil, d.val), isStr: true, str: v}
	}
	return dsmlCoerce(v, dsmlTypes(d.props[d.pname]))
}

// dsmlAliases are coerce_to_schema_type's type aliases.
var dsmlAliases = map[string]string{"str": "string", "text": "string", "varchar": "string", "char": "string",
	"enum": "string", "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer",
	"uint32": "integer", "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
	"float": "number", "float32": "number", "float64": "number", "double": "number", "bool": "boolean",
	"dict": "object", "arr": "array", "list": "array", "sequence": "array"}

// dsmlCoerce is coerce_to_schema_type: the first of null, integer, number, boolean, object,
// array, string among the types that reads the value (number: an int when integral; object and
// array: any finite JSON value); else the value as finite JSON, else the string.
func dsmlCoerce(v string, types []string) dsmlConverted {
	norm := map[string]bool{}
	for _, ty := range types {
		ty = strings.ToLower(strings.TrimFunc(ty, pyIsSpace))
		if a, ok := dsmlAliases[ty]; ok {
			ty = a
		}
		norm[ty] = true
	}
	str := dsmlConverted{json: appendPyString(nil, []byte(v)), isStr: true, str: v}
	low := strings.ToLower(strings.TrimFunc(v, pyIsSpace))
	for _, ty := range []string{"null", "integer", "number", "boolean", "object", "array", "string"} {
		if !norm[ty] {
			continue
		}
		switch ty {
		case "null":
			if strings.ToLower(v) == "null" {
				return dsmlConverted{json: []byte("null")}
			}
		case "string":
			return str
		case "integer":
			if s, ok := pyInt(v); ok {
				return dsmlConverted{json: []byte(s)}
			}
		case "number":
			if out, ok := pyFloatValue(nil, v); ok {
				return dsmlConverted{json: out}
			}
		case "boolean":
			switch low {
			case "true", "1":
				return dsmlConverted{json: []byte("true")}
			case "false", "0":
				return dsmlConverted{json: []byte("false")}
			}
		case "object", "array":
			if out, ok := finiteJSON(v); ok {
				return dsmlConverted{json: out}
			}
		}
	}
	if out, ok := finiteJSON(v); ok {
		return dsmlConverted{json: out}
	}
	return str
}

// finiteJSON is json.dumps(json.loads(v)) when the value holds no NaN or infinity.
func finiteJSON(v string) ([]byte, bool) {
	out, ok := jsonValue(nil, v, false)
	if !ok {
		return nil, false
	}
	in := false
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == 'N' || c == 'I'):
			return nil, false // NaN, Infinity: outside strings json.dumps writes no other capital
		}
	}
	return out, true
}

// dsmlEntry is one arguments entry: key and json.dumps of its value.
type dsmlEntry struct {
	key string
	val []byte
}

// dsmlRepair is _repair_param_dict for the one parameter name: a lone "arguments" or "input"
// the schema does not list, whose value (or the JSON its string holds) is an object of listed
// keys only, gives that object's entries instead.
func dsmlRepair(name string, v dsmlConverted, props map[string]json.RawMessage) []dsmlEntry {
	one := []dsmlEntry{{name, v.json}}
	if _, listed := props[name]; listed || name != "arguments" && name != "input" {
		return one
	}
	src := string(v.json)
	if v.isStr {
		src = v.str
	}
	entries, ok := jsonObjectEntries(src)
	if !ok {
		return one
	}
	for _, kv := range entries {
		if _, listed := props[kv.key]; !listed {
			return one
		}
	}
	return entries
}

// jsonObjectEntries reads src as a finite JSON object: its entries in order, a duplicate key
// keeping its first place and its last value, as a dict does.
func jsonObjectEntries(src string) ([]dsmlEntry, bool) {
	canon, ok := finiteJSON(src)
	if !ok || len(canon) == 0 || canon[0] != '{' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	var out []dsmlEntry
	at := map[string]int{}
	for dec.More() {
		k, err := dec.Token()
		var raw json.RawMessage
		if err != nil || dec.Decode(&raw) != nil {
			return nil, false
		}
		key, _ := k.(string)
		val, ok := jsonValue(nil, string(raw), false)
		if !ok {
			return nil, false
		}
		if i, dup := at[key]; dup {
			out[i].val = val
			continue
		}
		at[key] = len(out)
		out = append(out, dsmlEntry{key, val})
	}
	return out, true
}
