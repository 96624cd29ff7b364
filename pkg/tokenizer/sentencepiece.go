package tokenizer

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"
	"unsafe"

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
			// ASCII is unchanged by every normalization form, and an ASCII character is a
			// starter that nothing before it combines with: the check can start at the ASCII
			// character before the first non-ASCII byte.
			i := asciiPrefix(s)
			if i > 0 {
				i--
			}
			if i < len(s) && i+op.form.QuickSpanString(s[i:]) != len(s) {
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

// appendNormalized appends the normalized s to dst, using tmp as scratch space between steps,
// and returns both buffers (grown as needed) for reuse.
func (t *Tokenizer) appendNormalized(dst, tmp []byte, s string) ([]byte, []byte) {
	dst = append(dst[:0], s...)
	for _, op := range t.norms {
		tmp = append(tmp[:0], dst...)
		cur := unsafe.String(unsafe.SliceData(tmp), len(tmp)) // read-only view for this step
		dst = dst[:0]
		switch {
		case op.isForm:
			dst = op.form.AppendString(dst, cur)
		case op.prepend != "":
			if cur != "" {
				dst = append(dst, op.prepend...)
			}
			dst = append(dst, cur...)
		default:
			for {
				i := strings.Index(cur, op.from)
				if i < 0 {
					break
				}
				dst = append(append(dst, cur[:i]...), op.to...)
				cur = cur[i+len(op.from):]
			}
			dst = append(dst, cur...)
		}
	}
	return dst, tmp
}

// encodeSPWord is BPE::merge_word of tokenizers for a character vocabulary: each character is a
// symbol if the vocabulary has it, else its bytes' fallback tokens, else unk (fused with a
// preceding unk when fuse_unk). Characters the model cannot represent at all are dropped, as
// there.
func (t *Tokenizer) encodeSPWord(st *encState, w string) {
	if !t.spSplit {
		t.encodeSPPart(st, w)
		return
	}
	// Split before each "▁" that follows another character, unless a vocabulary token spans such
	// a boundary (see spSplitPlan): no merge can then join the parts, so BPE of the whole equals
	// BPE of the parts, which are short and cacheable.
	from, prev := 0, rune(-1)
	for i, r := range w {
		if r == spaceMark && i > from && prev != spaceMark && !t.spNoSplitAfter[prev] {
			t.encodeSPPart(st, w[from:i])
			from = i
		}
		prev = r
	}
	t.encodeSPPart(st, w[from:])
}

// spaceMark is the character SentencePiece models use for a space.
const spaceMark = '\u2581'

// spSplitPlan decides whether encodeSPWord may split words at "▁" boundaries: only with byte
// fallback for every byte (so no unk can be fused across a boundary) and without ignore_merges,
// and never after a character X for which some vocabulary token contains "X▁".
func (t *Tokenizer) spSplitPlan(vocab map[string]uint32) {
	if t.ignoreMerges {
		return
	}
	for _, id := range t.byteID {
		if id < 0 {
			return
		}
	}
	t.spNoSplitAfter = map[rune]bool{}
	for tok := range vocab {
		prev := rune(-1)
		for _, r := range tok {
			if r == spaceMark && prev >= 0 && prev != spaceMark {
				t.spNoSplitAfter[prev] = true
			}
			prev = r
		}
	}
	t.spSplit = true
}

// encodeSPPart encodes one part of a word (see encodeSPWord).
func (t *Tokenizer) encodeSPPart(st *encState, w string) {
	if t.ignoreMerges {
		if id, ok := t.vocab[w]; ok {
			st.out = append(st.out, id)
			return
		}
	}
	cacheable := len(w) <= maxCachedWord
	var h uint64
	if cacheable {
		var ids []uint32
		var ok bool
		if ids, h, ok = t.cache.get(w); ok {
			st.out = append(st.out, ids...)
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

// asciiPrefix returns the length of the longest all-ASCII prefix of s, eight bytes at a time:
// isNormalized's fast path, several times faster than norm's own ASCII skip on ASCII text
// (BenchmarkIsNormalized).
func asciiPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))&0x8080808080808080 != 0 {
			break
		}
	}
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	return i
}
