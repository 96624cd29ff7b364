package tokenizer

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// This file holds what only character-level ("SentencePiece style") BPE models need: Llama 2,
// Gemma. Their tokenizer.json has no ByteLevel pre-tokenizer: the normalizer turns spaces into
// "▁" (and may prepend one), the BPE symbols are characters, and characters missing from the
// vocabulary become byte-fallback tokens "<0xNN>".

// normOp is one normalizer step: a Unicode normalization form, a Prepend (only to non-empty
// text), or a literal Replace.
type normOp struct {
	form     norm.Form
	isForm   bool
	prepend  string
	from, to string
}

// isNormalized reports whether normalization would leave s unchanged (the common case, checked
// without allocating).
func (t *Tokenizer) isNormalized(s string) bool {
	for _, op := range t.norms {
		switch {
		case op.isForm:
			if op.form.QuickSpanString(s) != len(s) {
				return false
			}
		case op.prepend != "":
			if s != "" {
				return false
			}
		default:
			if strings.Contains(s, op.from) {
				return false
			}
		}
	}
	return true
}

// appendNormalized appends the normalized s to dst. Steps after the first work on a copy.
func (t *Tokenizer) appendNormalized(dst []byte, s string) []byte {
	start := len(dst)
	dst = append(dst, s...)
	for _, op := range t.norms {
		cur := string(dst[start:])
		dst = dst[:start]
		switch {
		case op.isForm:
			dst = op.form.AppendString(dst, cur)
		case op.prepend != "":
			if cur != "" {
				dst = append(dst, op.prepend...)
			}
			dst = append(dst, cur...)
		default:
			dst = append(dst, strings.ReplaceAll(cur, op.from, op.to)...)
		}
	}
	return dst
}

// encodeSPWord is BPE::merge_word of tokenizers for a character vocabulary: each character is a
// symbol if the vocabulary has it, else its bytes' fallback tokens, else unk (fused with a
// preceding unk when fuse_unk). Characters the model cannot represent at all are dropped, as
// there.
func (t *Tokenizer) encodeSPWord(st *encState, w string) {
	if t.ignoreMerges {
		if id, ok := t.vocab[w]; ok {
			st.out = append(st.out, id)
			return
		}
	}
	cacheable := len(w) <= maxCachedWord
	var h uint64
	if cacheable {
		var e *cacheEntry
		if e, h = t.cache.get(w); e != nil {
			st.out = append(st.out, e.ids...)
			return
		}
	}
	ids := st.ids[:0]
	pendingUnk := false
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		ch := w[i : i+n]
		i += n
		if id, ok := t.vocab[ch]; ok {
			if pendingUnk {
				ids = append(ids, uint32(t.unkID))
				pendingUnk = false
			}
			ids = append(ids, id)
			continue
		}
		if t.byteFallback && t.hasByteTokens(ch) {
			// tokenizers adds these without first flushing a pending unk (it is added later).
			for k := 0; k < len(ch); k++ {
				ids = append(ids, uint32(t.byteID[ch[k]]))
			}
			continue
		}
		if t.unkID >= 0 {
			if pendingUnk && !t.fuseUnk {
				ids = append(ids, uint32(t.unkID))
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		ids = append(ids, uint32(t.unkID))
	}
	start := len(st.out)
	st.out = t.mergeSymbols(st, ids, st.out)
	if cacheable {
		t.cache.put(h, w, st.out[start:])
	}
}

func (t *Tokenizer) hasByteTokens(ch string) bool {
	for k := 0; k < len(ch); k++ {
		if t.byteID[ch[k]] < 0 {
			return false
		}
	}
	return true
}

// decodeSP decodes with the SentencePiece-style decoder chain.
func (t *Tokenizer) decodeSP(ids []uint32, skipSpecial bool) (string, error) {
	for _, id := range ids {
		if int(id) >= len(t.idKnown) {
			return "", &unknownIDError{id}
		}
	}
	d := t.NewStreamDecoderSpecial(skipSpecial)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	return b.String(), nil
}

// addSP is StreamDecoder.Add for the SentencePiece-style decoder chain Replace("▁", " "),
// ByteFallback, Fuse, Strip(" ", n, 0). ByteFallback turns a run of byte tokens into its text
// when the whole run is valid UTF-8 and into one U+FFFD per byte otherwise, so a run is held until
// it ends; Strip removes up to n leading spaces of the whole text.
func (d *StreamDecoder) addSP(id uint32) string {
	t := d.t
	if !t.idKnown[id] || (d.skipSpecial && t.special[id]) {
		return ""
	}
	if b := t.byteTok[id]; b > 0 {
		d.pending = append(d.pending, byte(b-1))
		return ""
	}
	d.buf = d.flushByteRun(d.buf[:0])
	d.buf = append(d.buf, t.decBytes[t.decOff[id]:t.decOff[id+1]]...)
	return d.strip(d.buf)
}

func (d *StreamDecoder) flushByteRun(dst []byte) []byte {
	if len(d.pending) == 0 {
		return dst
	}
	if utf8.Valid(d.pending) {
		dst = append(dst, d.pending...)
	} else {
		for range d.pending {
			dst = append(dst, "\uFFFD"...)
		}
	}
	d.pending = d.pending[:0]
	return dst
}

func (d *StreamDecoder) strip(b []byte) string {
	for d.stripLeft > 0 && len(b) > 0 {
		if b[0] != ' ' {
			d.stripLeft = 0
			break
		}
		b = b[1:]
		d.stripLeft--
	}
	return string(b)
}
