package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// maxFileSize bounds what LoadFile reads: the largest real tokenizer.json files are ~35 MB.
const maxFileSize = 256 << 20

// LoadDir loads dir/tokenizer.json and, when present, dir/tokenizer_config.json (a model
// directory as published on the Hugging Face hub).
func LoadDir(dir string) (*Tokenizer, error) {
	return LoadFile(filepath.Join(dir, "tokenizer.json"))
}

// LoadPath loads the tokenizer a command's flag names: a model directory's (as LoadDir) or a
// tokenizer.json file (as LoadFile), whichever path is. An empty path returns nil and a nil
// error, meaning "no tokenizer" (the caller decides whether that is allowed). Errors are
// LoadDir's or LoadFile's, which name the file.
func LoadPath(path string) (*Tokenizer, error) {
	if path == "" {
		return nil, nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return LoadDir(path)
	}
	return LoadFile(path)
}

// LoadFile loads a tokenizer.json. A tokenizer_config.json next to it, when present, adds its
// special tokens, add_bos_token/add_eos_token, bos/eos tokens and chat template. Errors wrap
// os errors for unreadable files, and ErrUnsupported for features this package does not
// implement exactly.
func LoadFile(path string) (*Tokenizer, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", path, err)
	}
	var cfg []byte
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	if c, err := readBounded(cfgPath); err == nil {
		cfg = c
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: load %s: %w", cfgPath, err)
	}
	t, err := Load(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", path, err)
	}
	return t, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("is a directory")
	}
	if st.Size() > maxFileSize {
		return nil, fmt.Errorf("file is %d bytes, larger than the %d byte limit", st.Size(), maxFileSize)
	}
	buf := bytes.NewBuffer(make([]byte, 0, st.Size()+1))
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
}

type addedTokenJSON struct {
	ID         *uint32 `json:"id"`
	Content    string  `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized bool    `json:"normalized"`
	Special    bool    `json:"special"`
}

type modelJSON struct {
	Type                    string   `json:"type"`
	Dropout                 *float64 `json:"dropout"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
	ByteFallback            bool     `json:"byte_fallback"`
	FuseUnk                 bool     `json:"fuse_unk"`
	UnkToken                *string  `json:"unk_token"`
	IgnoreMerges            bool     `json:"ignore_merges"`
	Vocab                   map[string]uint32
	rawVocab                []byte // the vocab when it is not an object (other model types)
	hasMerges               bool
	mergeLines              []string    // "a b" form
	mergePairs              [][2]string // ["a", "b"] form
}

// component is the common shape of normalizers, pre-tokenizers, post-processors and decoders.
type component struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Processors     []json.RawMessage `json:"processors"`
	Decoders       []json.RawMessage `json:"decoders"`
	Pattern        *patternJSON      `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Single         []templatePiece   `json:"single"`
	Prepend        string            `json:"prepend"`
	Content        string            `json:"content"`
	Start          int               `json:"start"`
	Stop           int               `json:"stop"`
	SpecialTokens  map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
	Sep *[2]json.RawMessage `json:"sep"`
	Cls *[2]json.RawMessage `json:"cls"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type templatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type configJSON struct {
	AddBOSToken        *bool                     `json:"add_bos_token"`
	AddEOSToken        *bool                     `json:"add_eos_token"`
	BOSToken           json.RawMessage           `json:"bos_token"`
	EOSToken           json.RawMessage           `json:"eos_token"`
	ChatTemplate       json.RawMessage           `json:"chat_template"`
	AddedTokensDecoder map[string]addedTokenJSON `json:"added_tokens_decoder"`
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

// Load builds a Tokenizer from the contents of tokenizer.json and, optionally (nil to omit),
// tokenizer_config.json.
func Load(tokenizerJSON, configJSONData []byte) (*Tokenizer, error) {
	initClasses()
	f, model, err := parseTokenizerJSON(tokenizerJSON)
	if err != nil {
		return nil, err
	}
	if model == nil {
		return nil, fmt.Errorf("%w: no model", ErrMalformed)
	}
	if model.Type != "" && model.Type != "BPE" {
		return nil, fmt.Errorf("%w: model type %q", ErrUnsupported, model.Type)
	}
	t := &Tokenizer{bos: -1, eos: -1}
	if err := t.loadPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	// Without a ByteLevel pre-tokenizer the BPE vocabulary is over characters (SentencePiece
	// style, e.g. Llama 2 and Gemma), usually with byte fallback.
	t.sp = !t.byteLevel
	if err := t.loadModel(model); err != nil {
		return nil, err
	}
	if err := t.loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.loadDecoder(f.Decoder); err != nil {
		return nil, err
	}
	var cfg configJSON
	if configJSONData != nil {
		if err := json.Unmarshal(configJSONData, &cfg); err != nil {
			return nil, fmt.Errorf("%w: tokenizer_config.json: %w", ErrMalformed, err)
		}
	}
	added := f.AddedTokens
	// transformers also registers added_tokens_decoder entries of tokenizer_config.json.
	if len(cfg.AddedTokensDecoder) > 0 {
		have := map[uint32]bool{}
		for _, a := range added {
			if a.ID != nil {
				have[*a.ID] = true
			}
		}
		keys := make([]string, 0, len(cfg.AddedTokensDecoder))
		for k := range cfg.AddedTokensDecoder {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var id uint32
			if _, err := fmt.Sscan(k, &id); err != nil {
				return nil, fmt.Errorf("%w: tokenizer_config.json: added_tokens_decoder key %q", ErrMalformed, k)
			}
			if have[id] {
				continue
			}
			a := cfg.AddedTokensDecoder[k]
			a.ID = &id
			added = append(added, a)
		}
	}
	if err := t.loadAdded(added); err != nil {
		return nil, err
	}
	if err := t.loadPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := t.loadConfig(&cfg); err != nil {
		return nil, err
	}
	t.cache = newWordCache(1 << 18)
	return t, nil
}

func (t *Tokenizer) loadModel(m *modelJSON) error {
	if m.Vocab == nil || !m.hasMerges {
		return fmt.Errorf("%w: BPE model without vocab or merges", ErrMalformed)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return fmt.Errorf("%w: BPE dropout", ErrUnsupported)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return fmt.Errorf("%w: continuing_subword_prefix", ErrUnsupported)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("%w: end_of_word_suffix", ErrUnsupported)
	}
	t.ignoreMerges = m.IgnoreMerges
	maxID := uint32(0)
	for _, id := range m.Vocab {
		maxID = max(maxID, id)
	}
	if maxID >= 1<<26 {
		return fmt.Errorf("%w: vocab id %d out of range", ErrMalformed, maxID)
	}
	t.idTokens = make([]string, maxID+1)
	t.idKnown = make([]bool, maxID+1)
	if t.sp {
		t.vocab = m.Vocab // the vocabulary is used as spelled
	} else {
		t.vocab = make(map[string]uint32, len(m.Vocab))
	}
	t.oddVocab = map[string]uint32{}
	for s, id := range m.Vocab {
		t.idTokens[id] = s
		t.idKnown[id] = true
		if t.sp {
			continue
		}
		raw, ok := byteLevelDecode(s)
		if !ok {
			// Not reachable from bytes; kept for TokenID and decoding only.
			t.oddVocab[s] = id
			continue
		}
		t.vocab[string(raw)] = id
	}
	t.unkID = -1
	if m.UnkToken != nil {
		if id, ok := m.Vocab[*m.UnkToken]; ok {
			t.unkID = int32(id)
		}
	}
	t.fuseUnk = m.FuseUnk
	t.byteFallback = m.ByteFallback
	for b := range 256 {
		t.byteID[b] = -1
		if t.sp {
			// Byte fallback tokens are spelled "<0x0A>" (Rust's format!("<{b:#04X}>")).
			if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
				t.byteID[b] = int32(id)
			}
			continue
		}
		if id, ok := t.vocab[string([]byte{byte(b)})]; ok {
			t.byteID[b] = int32(id)
		}
	}
	return t.loadMerges(m)
}

// loadMerges builds the merge table from the model's merges, in rank order.
func (t *Tokenizer) loadMerges(m *modelJSON) error {
	// Merges: either ["a b", ...] (older files) or [["a", "b"], ...].
	if len(m.mergePairs) > 0 && len(m.mergeLines) > 0 {
		return fmt.Errorf("%w: merges mix the \"a b\" and [\"a\", \"b\"] forms", ErrMalformed)
	}
	pairs := m.mergePairs
	for i, s := range m.mergeLines {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return fmt.Errorf("%w: merge %d %q is not two tokens", ErrMalformed, i, s)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	t.merges = newMergeTable(len(pairs))
	if t.sp {
		t.spSplitPlan(m.Vocab)
	}
	var cat []byte
	for i, p := range pairs {
		a, okA := m.Vocab[p[0]]
		b, okB := m.Vocab[p[1]]
		cat = append(append(cat[:0], p[0]...), p[1]...)
		c, okC := m.Vocab[string(cat)]
		if !okA || !okB || !okC {
			return fmt.Errorf("%w: merge %d (%q, %q) uses a token missing from the vocab", ErrMalformed, i, p[0], p[1])
		}
		t.merges.put(a, b, uint32(i), c)
	}
	return nil
}

func (t *Tokenizer) loadNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: normalizer: %w", ErrMalformed, err)
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.loadNormalizer(n); err != nil {
				return err
			}
		}
	case "NFC":
		t.norms = append(t.norms, normOp{form: norm.NFC, isForm: true})
	case "NFD":
		t.norms = append(t.norms, normOp{form: norm.NFD, isForm: true})
	case "NFKC":
		t.norms = append(t.norms, normOp{form: norm.NFKC, isForm: true})
	case "NFKD":
		t.norms = append(t.norms, normOp{form: norm.NFKD, isForm: true})
	case "Prepend":
		t.norms = append(t.norms, normOp{prepend: c.Prepend})
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil || *c.Pattern.String == "" {
			return fmt.Errorf("%w: Replace normalizer with a regex pattern", ErrUnsupported)
		}
		t.norms = append(t.norms, normOp{from: *c.Pattern.String, to: c.Content})
	default:
		return fmt.Errorf("%w: normalizer %q", ErrUnsupported, c.Type)
	}
	return nil
}

func (t *Tokenizer) loadPreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: pre_tokenizer: %w", ErrMalformed, err)
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.Pretokenizers {
			if err := t.loadPreTokenizer(p); err != nil {
				return err
			}
		}
	case "Split":
		// Isolated keeps matches and the gaps between them as pieces; Removed with invert keeps
		// only the matches (GPT-4o's file says so for the same pattern).
		dropGaps, mergePrev := false, false
		switch {
		case c.Behavior == "Isolated" && !c.Invert:
		case c.Behavior == "Removed" && c.Invert:
			dropGaps = true
		case c.Behavior == "MergedWithPrevious" && !c.Invert:
			mergePrev = true
		default:
			return fmt.Errorf("%w: Split behavior %q invert=%v", ErrUnsupported, c.Behavior, c.Invert)
		}
		if c.Pattern == nil {
			return fmt.Errorf("%w: Split without pattern", ErrMalformed)
		}
		var m matcher
		var f finder
		switch {
		case c.Pattern.Regex != nil:
			m, f = knownPatterns[*c.Pattern.Regex], knownFinders[*c.Pattern.Regex]
			if m == nil {
				return fmt.Errorf("%w: Split regex %q is not one of the known model patterns", ErrUnsupported, *c.Pattern.Regex)
			}
		case c.Pattern.String != nil && *c.Pattern.String != "":
			lit := *c.Pattern.String
			m = func(s string, i int) int {
				if strings.HasPrefix(s[i:], lit) {
					return i + len(lit)
				}
				return -1
			}
		default:
			return fmt.Errorf("%w: Split with an empty pattern", ErrMalformed)
		}
		st := preStage{match: m, find: f, dropGaps: dropGaps, mergePrev: mergePrev}
		if c.Pattern.Regex != nil {
			st.cl100kDigits = cl100kDigits[*c.Pattern.Regex]
		}
		t.stages = append(t.stages, st)
	case "ByteLevel":
		t.byteLevel = true
		st := preStage{prefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			st.match = matchGPT2
		}
		if st.prefixSpace || st.match != nil {
			t.stages = append(t.stages, st)
		}
	default:
		return fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, c.Type)
	}
	return nil
}

func (t *Tokenizer) loadDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: decoder: %w", ErrMalformed, err)
	}
	switch c.Type {
	case "ByteLevel":
		t.byteLevelDecoder = true
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			t.decoderUnsupported = "Replace with a regex"
			break
		}
		t.decReplaceFrom, t.decReplaceTo = *c.Pattern.String, c.Content
	case "ByteFallback":
		t.decByteFallback = true
	case "Fuse":
	case "Strip":
		if c.Content != " " || c.Stop != 0 {
			t.decoderUnsupported = "Strip other than leading spaces"
			break
		}
		t.decStripStart = c.Start
	case "Sequence":
		for _, d := range c.Decoders {
			if err := t.loadDecoder(d); err != nil {
				return err
			}
		}
	default:
		// Encoding does not depend on the decoder; Decode reports ErrUnsupported.
		t.decoderUnsupported = c.Type
	}
	return nil
}

// modelTokenID is the model vocabulary's id of a token spelled as in tokenizer.json.
func (t *Tokenizer) modelTokenID(s string) (uint32, bool) {
	if t.sp {
		id, ok := t.vocab[s]
		return id, ok
	}
	if raw, ok := byteLevelDecode(s); ok {
		if id, ok := t.vocab[string(raw)]; ok {
			return id, true
		}
	}
	id, ok := t.oddVocab[s]
	return id, ok
}

func (t *Tokenizer) loadAdded(added []addedTokenJSON) error {
	t.trieRaw, t.trieNorm = newTrie(), newTrie()
	t.addedByContent = map[string]uint32{}
	// tokenizers does not take added token ids from the file: it re-adds the tokens on load, one
	// by one in file order (TokenizerVisitor::visit_map, AddedVocabulary::add_tokens). A token
	// whose content is in the model vocabulary gets the model's id, any other the next id after
	// the largest added so far (at least the model's vocabulary size). Real files agree with
	// that; when one does not, tokenizers only logs a warning and its ids are what engines use.
	vocabLen := int64(len(t.vocab) + len(t.oddVocab))
	ordered := added
	maxAdded := int64(-1)
	for _, a := range ordered {
		if a.Content == "" {
			continue
		}
		if _, dup := t.addedByContent[a.Content]; dup {
			continue
		}
		var id uint32
		if mid, ok := t.modelTokenID(a.Content); ok {
			id = mid
		} else if maxAdded < 0 {
			id = uint32(vocabLen)
		} else {
			id = uint32(max(maxAdded, vocabLen-1) + 1)
		}
		maxAdded = max(maxAdded, int64(id))
		if id >= 1<<26 {
			return fmt.Errorf("%w: added token id %d out of range", ErrMalformed, id)
		}
		for int(id) >= len(t.idTokens) {
			t.idTokens = append(t.idTokens, "")
			t.idKnown = append(t.idKnown, false)
		}
		t.idTokens[id] = a.Content
		t.idKnown[id] = true
		k := int32(len(t.added))
		t.added = append(t.added, addedToken{id: id, content: a.Content, special: a.Special, lstrip: a.LStrip,
			rstrip: a.RStrip, normalized: a.Normalized, singleWord: a.SingleWord})
		t.addedByContent[a.Content] = id
		if a.Normalized {
			t.trieNorm.insert(t.normalize(a.Content), k)
		} else {
			t.trieRaw.insert(a.Content, k)
		}
	}
	// Decoding table: the ByteLevel decoder maps each token's runes back to bytes, or keeps the
	// token's UTF-8 when some rune is outside the byte alphabet.
	t.special = make([]bool, len(t.idTokens))
	t.byteTok = make([]int16, len(t.idTokens))
	if t.sp && t.decByteFallback {
		addedIDs := map[uint32]bool{}
		for _, a := range t.added {
			addedIDs[a.id] = true
		}
		for b, id := range t.byteID {
			if id >= 0 && !addedIDs[uint32(id)] {
				t.byteTok[id] = int16(b) + 1
			}
		}
	}
	for _, a := range t.added {
		t.special[a.id] = a.special
	}
	t.decOff = make([]uint32, len(t.idTokens)+1)
	for id, s := range t.idTokens {
		if t.sp {
			if t.decReplaceFrom != "" {
				s = strings.ReplaceAll(s, t.decReplaceFrom, t.decReplaceTo)
			}
			t.decBytes = append(t.decBytes, s...)
		} else if raw, ok := byteLevelDecode(s); ok {
			t.decBytes = append(t.decBytes, raw...)
		} else {
			t.decBytes = append(t.decBytes, s...)
		}
		t.decOff[id+1] = uint32(len(t.decBytes))
	}
	return nil
}

func (t *Tokenizer) normalize(s string) string {
	if t.isNormalized(s) {
		return s
	}
	out, _ := t.appendNormalized(nil, nil, s)
	return string(out)
}

func (t *Tokenizer) loadPostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: post_processor: %w", ErrMalformed, err)
	}
	switch c.Type {
	case "ByteLevel":
	case "Sequence":
		for _, p := range c.Processors {
			if err := t.loadPostProcessor(p); err != nil {
				return err
			}
		}
	case "TemplateProcessing":
		var pre, post []uint32
		seen := false
		for _, p := range c.Single {
			switch {
			case p.Sequence != nil:
				seen = true
			case p.SpecialToken != nil:
				st, ok := c.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("%w: template special token %q not defined", ErrMalformed, p.SpecialToken.ID)
				}
				if seen {
					post = append(post, st.IDs...)
				} else {
					pre = append(pre, st.IDs...)
				}
			}
		}
		t.prefix = append(pre, t.prefix...)
		t.suffix = append(t.suffix, post...)
	case "RobertaProcessing", "BertProcessing":
		var cls, sep uint32
		if c.Cls == nil || c.Sep == nil || json.Unmarshal(c.Cls[1], &cls) != nil || json.Unmarshal(c.Sep[1], &sep) != nil {
			return fmt.Errorf("%w: %s without cls/sep", ErrMalformed, c.Type)
		}
		t.prefix = append([]uint32{cls}, t.prefix...)
		t.suffix = append(t.suffix, sep)
	default:
		return fmt.Errorf("%w: post-processor %q", ErrUnsupported, c.Type)
	}
	return nil
}

// tokenName reads a tokenizer_config.json token field: a string or {"content": ...}.
func tokenName(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Content != "" {
		return o.Content, true
	}
	return "", false
}

func (t *Tokenizer) loadConfig(c *configJSON) error {
	if name, ok := tokenName(c.BOSToken); ok {
		if id, ok := t.TokenID(name); ok {
			t.bos = int64(id)
		}
	}
	if name, ok := tokenName(c.EOSToken); ok {
		if id, ok := t.TokenID(name); ok {
			t.eos = int64(id)
		}
	}
	// transformers (LlamaTokenizerFast.update_post_processor and successors) rebuilds the
	// post-processor from add_bos_token/add_eos_token when the config sets either of them.
	if c.AddBOSToken != nil || c.AddEOSToken != nil {
		t.prefix, t.suffix = nil, nil
		if c.AddBOSToken != nil && *c.AddBOSToken {
			if t.bos < 0 {
				return fmt.Errorf("%w: add_bos_token without a known bos_token", ErrMalformed)
			}
			t.prefix = []uint32{uint32(t.bos)}
		}
		if c.AddEOSToken != nil && *c.AddEOSToken {
			if t.eos < 0 {
				return fmt.Errorf("%w: add_eos_token without a known eos_token", ErrMalformed)
			}
			t.suffix = []uint32{uint32(t.eos)}
		}
	}
	if !isNull(c.ChatTemplate) {
		var s string
		if json.Unmarshal(c.ChatTemplate, &s) == nil {
			t.chatTemplate = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(c.ChatTemplate, &named); err != nil {
				return fmt.Errorf("%w: chat_template: %w", ErrMalformed, err)
			}
			for _, n := range named {
				if n.Name == "default" || t.chatTemplate == "" {
					t.chatTemplate = n.Template
				}
			}
		}
	}
	return nil
}
