package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ardanlabs/jinja"
)

// maxTemplateFile bounds a template or tokenizer_config.json read from disk.
const maxTemplateFile = 64 << 20

// specialTokenKeys are the tokenizer attributes transformers passes to every template when
// set (special_tokens_map), in its order.
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// modelFiles is what a model directory tells the renderer.
type modelFiles struct {
	// templates by name: "default", and "tool_use" etc. when tokenizer_config.json holds a
	// list of named templates. chat_template.jinja, when present, is the only template.
	templates map[string]string
	specials  []special
	modelType string
	// multimodal says the directory describes a multimodal model: config.json has a
	// vision_config or audio_config, or a preprocessor_config.json or processor_config.json
	// exists. mediaTokens are config.json's placeholder token ids; processorTemplate is
	// chat_template.json's template (the processor's).
	multimodal        bool
	mediaTokens       []uint32
	processorTemplate string
	// preprocessor is preprocessor_config.json as read; tokensPerImage is
	// processor_config.json's image_seq_length, else config.json's mm_tokens_per_image
	// (placeholder counts, placeholders.go); boi, eoi and imageToken are config.json's
	// boi_token_index, eoi_token_index and image_token_index (Gemma 3's expansion, gemma3.go).
	preprocessor         []byte
	tokensPerImage       int
	boi, eoi, imageToken uint32
}

// special is one special-token variable: a string, or a list of strings
// (additional_special_tokens).
type special struct {
	name   string
	value  string
	list   []string
	isList bool
}

func (s special) jinjaValue() jinja.Value {
	if !s.isList {
		return jinja.NewString(s.value)
	}
	items := make([]jinja.Value, len(s.list))
	for i, x := range s.list {
		items[i] = jinja.NewString(x)
	}
	return jinja.NewList(items)
}

// specialValue is a special-token variable made once: a string value is immutable and shared
// by every render; a list is not (the library lets templates append to lists), so each render
// gets a copy of its items.
type specialValue struct {
	name   string
	value  jinja.Value   // string specials
	items  []jinja.Value // list specials
	isList bool
}

func (s special) prepare() specialValue {
	v := s.jinjaValue()
	if s.isList {
		return specialValue{name: s.name, items: v.AsList().Items, isList: true}
	}
	return specialValue{name: s.name, value: v}
}

func (s *specialValue) renderValue() jinja.Value {
	if s.isList {
		return jinja.NewList(slices.Clone(s.items))
	}
	return s.value
}

// loadModelFiles reads the templates, special tokens and model type of a model directory.
// Missing files are not errors (a directory may hold only tokenizer.json); unreadable or
// malformed ones are.
func loadModelFiles(dir string) (*modelFiles, error) {
	mf := &modelFiles{templates: map[string]string{}}
	cfg, err := readSmall(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if cfg != nil {
		if err := mf.parseTokenizerConfig(cfg); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", filepath.Join(dir, "tokenizer_config.json"), err)
		}
	}
	// transformers: "the file template clobbers any template in the config".
	if b, err := readSmall(filepath.Join(dir, "chat_template.jinja")); err == nil {
		mf.templates = map[string]string{"default": string(b)}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if b, err := readSmall(filepath.Join(dir, "config.json")); err == nil {
		mf.parseModelConfig(b)
	}
	if err := mf.readProcessorFiles(dir); err != nil {
		return nil, err
	}
	return mf, nil
}

func readSmall(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxTemplateFile {
		return nil, fmt.Errorf("chat: %s is %d bytes, larger than %d", path, st.Size(), maxTemplateFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	return b, nil
}

func (mf *modelFiles) parseTokenizerConfig(b []byte) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	for _, k := range specialTokenKeys {
		if s, ok := tokenContent(cfg[k]); ok {
			mf.specials = append(mf.specials, special{name: k, value: s})
		}
	}
	if v, ok := cfg["additional_special_tokens"]; ok && !isNullJSON(v) {
		var raws []json.RawMessage
		if err := json.Unmarshal(v, &raws); err != nil {
			return fmt.Errorf("additional_special_tokens: %w", err)
		}
		sp := special{name: "additional_special_tokens", isList: true, list: []string{}}
		for _, r := range raws {
			if s, ok := tokenContent(r); ok {
				sp.list = append(sp.list, s)
			}
		}
		mf.specials = append(mf.specials, sp)
	}
	// transformers v5 names model-specific special tokens (image_token, ...) in
	// extra_special_tokens; each becomes a variable of its own.
	if v, ok := cfg["extra_special_tokens"]; ok && firstNonSpace(v) == '{' {
		var named map[string]json.RawMessage
		if err := json.Unmarshal(v, &named); err != nil {
			return fmt.Errorf("extra_special_tokens: %w", err)
		}
		for _, k := range orderedKeys(v) {
			if s, ok := tokenContent(named[k]); ok {
				mf.specials = append(mf.specials, special{name: k, value: s})
			}
		}
	}
	if v, ok := cfg["chat_template"]; ok && !isNullJSON(v) {
		var s string
		if json.Unmarshal(v, &s) == nil {
			mf.templates["default"] = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(v, &named); err != nil {
				return fmt.Errorf("chat_template: %w", err)
			}
			for _, n := range named {
				mf.templates[n.Name] = n.Template
			}
		}
	}
	return nil
}

// tokenContent is a special token's text: a string, or an AddedToken object's content.
func tokenContent(v json.RawMessage) (string, bool) {
	if len(v) == 0 || isNullJSON(v) {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(v, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

func isNullJSON(v []byte) bool { return string(bytes.TrimSpace(v)) == "null" }

func firstNonSpace(v []byte) byte {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// orderedKeys returns the keys of a JSON object in document order.
func orderedKeys(v []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(v))
	var keys []string
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return keys
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
	}
	return keys
}

// loadTemplateOption resolves --chat-template as vLLM's load_chat_template does: text
// holding '{', '}' or a newline is the template itself; anything else is a file path.
func loadTemplateOption(opt string) (string, error) {
	if strings.ContainsAny(opt, "{}\n") {
		return opt, nil
	}
	b, err := readSmall(opt)
	if err != nil {
		return "", fmt.Errorf("chat: --chat-template %q: %w", opt, err)
	}
	return string(b), nil
}

// prepareSource applies Jinja2's lexer rules the library lacks, which are exact
// transformations of the source: "\r\n" and "\r" become "\n", and one trailing newline is
// dropped (keep_trailing_newline=False).
func prepareSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

// compiled is one template ready to render.
type compiled struct {
	source string
	tmpl   *jinja.Template
	format string // detected content format
	// shares: the template never changes a value it is given, so tool schemas decoded for
	// earlier requests can be passed to it (schemacache.go).
	shares bool
	// macros: the template defines macros, whose nesting each render counts (recursion.go).
	macros bool
	// filters: the private filters the rewritten source may call (a superset: every one
	// whose name it contains); only these become render variables, which keeps the
	// variables' map small.
	filters []privateFilter
	// big is the template's big variant (bigeq.go), compiled on first need; nil for a
	// variant itself.
	big *lazyVariant
}

// lazyVariant is a template's big variant, compiled once on first use. Safe for concurrent
// use; must not be copied.
type lazyVariant struct {
	once sync.Once
	t    *compiled
}

// bigVariant returns the template to render a request holding a big integer with: the big
// variant, or t itself when the variant does not compile (it renders the same as t but for
// big integers).
func (t *compiled) bigVariant() *compiled {
	if t.big == nil {
		return t
	}
	t.big.once.Do(func() {
		if v, err := compileWith(t.source, bigSourceRewrites); err == nil {
			t.big.t = v
		}
	})
	if t.big.t == nil {
		return t
	}
	return t.big.t
}

// sourceRewrites turn a template's source into what the library renders as Jinja2 renders
// the original, in this order: whitespace control first (the others add no text and keep
// tag boundaries), the filter renames, then rewriteConcat, which must see the + chains
// before rewriteOperators rewrites the rest, then the print filter around outputs, and last
// the macro depth count (rewriteMacros), whose calls need no print filter.
var sourceRewrites = []func(string) string{
	prepareSource, rewriteWhitespace, rewriteIntLiterals, rewriteSelect, rewriteTrim, rewriteString, rewriteFormat, rewriteJoin,
	rewriteReplace, rewriteLength, rewriteIsspace, rewriteTojson, rewriteIntFilter, rewriteConcat, rewriteOperators, rewriteOutputs,
}

// rewriteIntFilter gives the plain variant the big variant's |int, which returns the exact
// integer of a float beyond int64 (1e20|int) where the library's gives 0.
func rewriteIntFilter(src string) string { return renameFilter(src, "int", intFilterName) }

func compileTemplate(src string) (*compiled, error) {
	t, err := compileWith(src, sourceRewrites)
	if err != nil {
		return nil, err
	}
	t.big = new(lazyVariant)
	return t, nil
}

// compileWith compiles src after the rewrites (sourceRewrites, or bigSourceRewrites).
func compileWith(src string, rewrites []func(string) string) (*compiled, error) {
	rewritten := src
	for _, rw := range rewrites {
		rewritten = rw(rewritten)
	}
	rewritten, macros := rewriteMacros(rewritten)
	t, err := compileRecovered(rewritten)
	if err != nil {
		return nil, err
	}
	var filters []privateFilter
	for _, f := range privateFilters {
		if strings.Contains(rewritten, f.name) {
			filters = append(filters, f)
		}
	}
	return &compiled{source: src, tmpl: t, format: DetectContentFormat(src), shares: !mayMutateValues(rewritten), macros: macros,
		filters: filters}, nil
}

// compileRecovered compiles with the library, turning a panic into an error.
func compileRecovered(src string) (t *jinja.Template, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("chat template does not compile: %v", p)
		}
	}()
	return jinja.Compile(src)
}
