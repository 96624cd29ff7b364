package tokenizer

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// Errors reported by this package; test with errors.Is.
var (
	// ErrUnsupported: the tokenizer.json uses a feature (model type, normalizer, pre-tokenizer
	// pattern, ...) that this package does not implement exactly.
	ErrUnsupported = errors.New("tokenizer: unsupported")
	// ErrMalformed: tokenizer.json or tokenizer_config.json is not valid.
	ErrMalformed = errors.New("tokenizer: malformed tokenizer file")
	// ErrInvalidUTF8: the text to encode is not valid UTF-8. Engines receive text through JSON or
	// Python str, which cannot hold invalid UTF-8 (JSON decoders substitute U+FFFD), so there is
	// no engine answer to copy: callers that want Python's errors="replace" behaviour should
	// convert first (strings.ToValidUTF8 replaces each invalid run with one U+FFFD).
	ErrInvalidUTF8 = errors.New("tokenizer: text is not valid UTF-8")
	// ErrUnknownID: Decode was given an id outside the vocabulary.
	ErrUnknownID = errors.New("tokenizer: unknown token id")
)

type unknownIDError struct{ id uint32 }

func (e *unknownIDError) Error() string { return fmt.Sprintf("%v: %d", ErrUnknownID, e.id) }
func (e *unknownIDError) Unwrap() error { return ErrUnknownID }

// Tokenizer encodes and decodes text with a Hugging Face tokenizer.json. It is immutable after
// LoadFile/LoadDir/Load returned it and safe for concurrent use by any number of goroutines; the
// zero value is not usable.
type Tokenizer struct {
	// Model.
	vocab        map[string]uint32 // raw bytes of a token -> id (byte-level tokens only)
	oddVocab     map[string]uint32 // vocab strings outside the byte-level alphabet
	byteID       [256]int32        // id of each single byte (byte-fallback token in sp mode), or -1
	sp           bool              // character-level BPE (SentencePiece style) instead of byte-level
	unkID        int32             // sp mode: id of unk_token, or -1
	fuseUnk      bool
	byteFallback bool
	// spSplit: sp words may be split before "▁" except after the runes in spNoSplitAfter.
	spSplit        bool
	spNoSplitAfter map[rune]bool
	merges         *mergeTable
	ignoreMerges   bool
	cache          *wordCache

	// Pipeline.
	norms     []normOp
	stages    []preStage
	byteLevel bool

	// Added tokens.
	added          []addedToken
	addedByContent map[string]uint32
	trieRaw        *trie // added tokens with normalized=false, matched on the raw text
	trieNorm       *trie // normalized=true, matched on normalized text

	// Special tokens added by Encode(..., true).
	prefix, suffix []uint32
	bos, eos       int64

	// Decoding.
	idTokens           []string // token string by id as in tokenizer.json ("" when unused)
	idKnown            []bool
	special            []bool
	decBytes           []byte
	decOff             []uint32
	byteLevelDecoder   bool
	decoderUnsupported string
	// SentencePiece-style decoder: Replace(from -> to), ByteFallback, Fuse, Strip(start spaces).
	decReplaceFrom, decReplaceTo string
	decByteFallback              bool
	decStripStart                int
	byteTok                      []int16 // byte+1 for byte-fallback tokens when decByteFallback

	chatTemplate string
}

// preStage is one pre-tokenizer step: split each piece with match (nil: no split), after
// prepending a space to pieces that do not start with one when prefixSpace is set.
type preStage struct {
	match       matcher
	find        finder // optional fast path for match
	dropGaps    bool   // drop the text between matches instead of keeping it as pieces
	mergePrev   bool   // each match ends the piece that precedes it (MergedWithPrevious)
	prefixSpace bool
	// cl100kDigits is matchCL100K's maxDigits when match is matchQwen2 or matchLlama3 (else
	// 0): the scan loop then calls it directly, not through the func value.
	cl100kDigits int
}

// encState is per-call scratch space, pooled so that Encode does not allocate.
type encState struct {
	out   []uint32
	ids   []uint32
	ranks []uint64
	next  []int32
	prev  []int32
	alive []bool
	heap  []uint64
	norm  []byte
	norm2 []byte
}

var statePool = sync.Pool{New: func() any { return new(encState) }}

// maxScratch bounds the scratch capacity kept in the pool after a huge input.
const maxScratch = 1 << 16

// Encode appends the token ids of text to dst and returns the extended slice. With addSpecial
// false it is the raw encode (no special tokens are added; special tokens written in text are
// still recognised). With addSpecial true the special tokens of the post-processor (as adjusted by
// tokenizer_config.json's add_bos_token/add_eos_token) are added, as transformers and vLLM do for
// text prompts. Encode allocates only when dst lacks capacity or a word misses the word cache.
// Text must be valid UTF-8 (else ErrInvalidUTF8, and dst is returned unchanged); NUL bytes and
// any other code points are ordinary text. Memory use is linear in len(text).
func (t *Tokenizer) Encode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	if !utf8.ValidString(text) {
		return dst, ErrInvalidUTF8
	}
	st := statePool.Get().(*encState)
	st.out = dst
	if addSpecial {
		st.out = append(st.out, t.prefix...)
	}
	if t.trieRaw.empty() {
		t.encodeNormalizing(st, text)
	} else {
		t.splitAdded(t.trieRaw, text, func(tok int32, piece string) {
			if tok >= 0 {
				st.out = append(st.out, t.added[tok].id)
				return
			}
			t.encodeNormalizing(st, piece)
		})
	}
	if addSpecial {
		st.out = append(st.out, t.suffix...)
	}
	out := st.out
	st.out = nil
	if cap(st.ids) > maxScratch || cap(st.heap) > maxScratch || cap(st.norm) > maxScratch || cap(st.norm2) > maxScratch {
		*st = encState{}
	}
	statePool.Put(st)
	return out, nil
}

// EncodeOrdinary appends the ids of text encoded as ordinary text: added and special tokens
// written in the text are not recognised but encoded like any other characters (tiktoken's
// encode_ordinary). Harmony (gpt-oss) prompts are built this way: formatting tokens are
// inserted as ids and every text segment between them is encoded ordinarily, so a user who
// writes "<|start|>" gets text, not a message boundary. Errors and allocation are as Encode's.
func (t *Tokenizer) EncodeOrdinary(dst []uint32, text string) ([]uint32, error) {
	if !utf8.ValidString(text) {
		return dst, ErrInvalidUTF8
	}
	st := statePool.Get().(*encState)
	st.out = dst
	s := text
	if len(t.norms) > 0 && !t.isNormalized(s) {
		st.norm, st.norm2 = t.appendNormalized(st.norm[:0], st.norm2, s)
		s = unsafe.String(unsafe.SliceData(st.norm), len(st.norm))
	}
	t.preTokenize(st, 0, s)
	out := st.out
	st.out = nil
	if cap(st.ids) > maxScratch || cap(st.heap) > maxScratch || cap(st.norm) > maxScratch || cap(st.norm2) > maxScratch {
		*st = encState{}
	}
	statePool.Put(st)
	return out, nil
}

// encodeNormalizing normalizes a piece of text between non-normalized added tokens, then splits
// it on normalized added tokens and encodes the rest.
func (t *Tokenizer) encodeNormalizing(st *encState, s string) {
	if len(t.norms) > 0 && !t.isNormalized(s) {
		st.norm, st.norm2 = t.appendNormalized(st.norm[:0], st.norm2, s)
		// s aliases st.norm, which is not written again until this piece is fully encoded;
		// nothing below retains s (the word cache copies its keys).
		s = unsafe.String(unsafe.SliceData(st.norm), len(st.norm))
	}
	if t.trieNorm.empty() {
		t.preTokenize(st, 0, s)
		return
	}
	t.splitAdded(t.trieNorm, s, func(tok int32, piece string) {
		if tok >= 0 {
			st.out = append(st.out, t.added[tok].id)
			return
		}
		t.preTokenize(st, 0, piece)
	})
}

// preTokenize runs pre-tokenizer stage k on s and everything after it on each piece.
func (t *Tokenizer) preTokenize(st *encState, k int, s string) {
	if s == "" {
		return
	}
	if k == len(t.stages) {
		t.encodeWord(st, s)
		return
	}
	stage := &t.stages[k]
	if stage.prefixSpace && s[0] != ' ' {
		s = " " + s
	}
	if stage.match == nil {
		t.preTokenize(st, k+1, s)
		return
	}
	// onig find_iter with Isolated behaviour: matches and the gaps between them are pieces.
	if stage.find != nil {
		gap := 0
		for gap < len(s) {
			i, e := stage.find(s, gap)
			if i < 0 {
				break
			}
			if gap < i && !stage.dropGaps {
				t.preTokenize(st, k+1, s[gap:i])
			}
			t.preTokenize(st, k+1, s[i:e])
			gap = e
		}
		if gap < len(s) && !stage.dropGaps {
			t.preTokenize(st, k+1, s[gap:])
		}
		return
	}
	if stage.mergePrev {
		from := 0
		for i := 0; i < len(s); {
			e := stage.match(s, i)
			if e < 0 {
				_, n := decodeRune(s, i)
				i += n
				continue
			}
			t.preTokenize(st, k+1, s[from:e])
			i, from = e, e
		}
		if from < len(s) {
			t.preTokenize(st, k+1, s[from:])
		}
		return
	}
	gap := 0
	last := k+1 == len(t.stages)
	for i := 0; i < len(s); {
		var e int
		if stage.cl100kDigits > 0 {
			e = matchCL100K(s, i, stage.cl100kDigits)
		} else {
			e = stage.match(s, i)
		}
		if e < 0 {
			_, n := decodeRune(s, i)
			i += n
			continue
		}
		if gap < i && !stage.dropGaps {
			t.preTokenize(st, k+1, s[gap:i])
		}
		if last && e > i { // the common case, without the call that would get there
			t.encodeWord(st, s[i:e])
		} else {
			t.preTokenize(st, k+1, s[i:e])
		}
		i, gap = e, e
	}
	if gap < len(s) && !stage.dropGaps {
		t.preTokenize(st, k+1, s[gap:])
	}
}

// encodeWord appends the BPE ids of one pre-tokenized word (raw bytes).
func (t *Tokenizer) encodeWord(st *encState, w string) {
	if t.sp {
		t.encodeSPWord(st, w)
		return
	}
	if len(w) == 1 {
		if id := t.byteID[w[0]]; id >= 0 {
			st.out = append(st.out, uint32(id))
		}
		return
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[w]; ok {
			st.out = append(st.out, id)
			return
		}
	}
	if len(w) > maxCachedWord {
		st.out = t.bpe(st, w, st.out)
		return
	}
	ids, h, ok := t.cache.get(w)
	if ok {
		if len(ids) == 1 { // most words are one token: skip the copy loop
			st.out = append(st.out, ids[0])
		} else {
			st.out = append(st.out, ids...)
		}
		return
	}
	start := len(st.out)
	st.out = t.bpe(st, w, st.out)
	t.cache.put(h, w, st.out[start:])
}

// Decode returns the text of ids, skipping special added tokens when skipSpecial is set. Like
// the Hugging Face ByteLevel decoder, byte sequences that are not valid UTF-8 (a multi-byte
// character cut by the id sequence) become U+FFFD, one per maximal ill-formed subpart.
// transformers' clean_up_tokenization_spaces is not applied.
func (t *Tokenizer) Decode(ids []uint32, skipSpecial bool) (string, error) {
	if err := t.checkDecoder(); err != nil {
		return "", err
	}
	if t.sp {
		return t.decodeSP(ids, skipSpecial)
	}
	n := 0
	for _, id := range ids {
		if int(id) >= len(t.idKnown) {
			return "", &unknownIDError{id}
		}
		n += int(t.decOff[id+1] - t.decOff[id])
	}
	raw := make([]byte, 0, n)
	for _, id := range ids {
		raw = t.appendToken(raw, id, skipSpecial)
	}
	if utf8.Valid(raw) {
		return string(raw), nil
	}
	out, _ := appendLossy(make([]byte, 0, len(raw)+8), raw, true)
	return string(out), nil
}

func (t *Tokenizer) checkDecoder() error {
	if t.decoderUnsupported != "" {
		return fmt.Errorf("%w: decoder %q", ErrUnsupported, t.decoderUnsupported)
	}
	return nil
}

// appendToken appends the decoded bytes of id (which must be < len(t.idKnown)).
func (t *Tokenizer) appendToken(dst []byte, id uint32, skipSpecial bool) []byte {
	if !t.idKnown[id] || (skipSpecial && t.special[id]) {
		return dst
	}
	return append(dst, t.decBytes[t.decOff[id]:t.decOff[id+1]]...)
}

// VocabSize returns the number of token ids: one more than the largest id of the model vocabulary
// and the added tokens (the size of the model's embedding table needs to be at least this).
func (t *Tokenizer) VocabSize() int { return len(t.idKnown) }

// TokenID returns the id of a token written as in tokenizer.json: an added/special token's
// content (e.g. "<|im_end|>") or a vocabulary entry in the byte-level alphabet (e.g. "Ġthe").
func (t *Tokenizer) TokenID(s string) (uint32, bool) {
	if id, ok := t.addedByContent[s]; ok {
		return id, true
	}
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

// Token returns the token string of id as written in tokenizer.json, and whether id exists.
func (t *Tokenizer) Token(id uint32) (string, bool) {
	if int(id) >= len(t.idKnown) || !t.idKnown[id] {
		return "", false
	}
	return t.idTokens[id], true
}

// IsSpecial reports whether id is an added token marked special (skipped by Decode with
// skipSpecial).
func (t *Tokenizer) IsSpecial(id uint32) bool { return int(id) < len(t.special) && t.special[id] }

// BOS returns the id of tokenizer_config.json's bos_token, if there is one.
func (t *Tokenizer) BOS() (uint32, bool) { return uint32(t.bos), t.bos >= 0 }

// EOS returns the id of tokenizer_config.json's eos_token, if there is one.
func (t *Tokenizer) EOS() (uint32, bool) { return uint32(t.eos), t.eos >= 0 }

// ChatTemplate returns tokenizer_config.json's chat_template (the "default" one when it is a
// list of named templates), or "".
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// SpecialTokensAdded returns copies of the ids Encode(..., true) puts before and after the text.
func (t *Tokenizer) SpecialTokensAdded() (prefix, suffix []uint32) {
	return append([]uint32(nil), t.prefix...), append([]uint32(nil), t.suffix...)
}
