package tokenizer

// StreamDecoder turns token ids into text incrementally, for streamed responses. The text it
// returns never ends inside a UTF-8 sequence: bytes of a character split across tokens are held
// back until the character is complete, and bytes that can no longer form a character become
// U+FFFD exactly as Decode would replace them. So the concatenation of every Add result and the
// final Flush equals Decode of all the ids (with the same skipSpecial).
//
// A StreamDecoder belongs to one stream and is not safe for concurrent use; the Tokenizer it
// came from may be shared. The zero value is not usable; get one from NewStreamDecoder.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte // bytes of an incomplete UTF-8 sequence, or a run of byte-fallback tokens
	buf         []byte
	stripLeft   int // leading spaces still to strip (SentencePiece-style decoders)
}

// NewStreamDecoder returns a StreamDecoder that skips special tokens (as vLLM and the OpenAI API
// do by default: skip_special_tokens=true). Use NewStreamDecoderSpecial to keep them.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return t.NewStreamDecoderSpecial(true)
}

// NewStreamDecoderSpecial returns a StreamDecoder that keeps special tokens when skipSpecial is
// false (or skips them when true).
func (t *Tokenizer) NewStreamDecoderSpecial(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial, stripLeft: t.decStripStart}
}

// Add decodes one more token and returns the text that became complete ("" when the token ends
// inside a character, is special and skipped, or is unknown: unknown ids are ignored, since a
// stream has no way to report them mid-way; Decode reports them).
func (d *StreamDecoder) Add(id uint32) string {
	t := d.t
	if t.decoderUnsupported != "" || int(id) >= len(t.idKnown) {
		return ""
	}
	if t.sp {
		return d.addSP(id)
	}
	d.pending = t.appendToken(d.pending, id, d.skipSpecial)
	return d.drain(false)
}

// Flush returns what is still held back (an incomplete character becomes U+FFFD) and resets the
// decoder for reuse.
func (d *StreamDecoder) Flush() string {
	if d.t.sp {
		out := d.strip(d.flushByteRun(d.buf[:0]))
		d.stripLeft = d.t.decStripStart
		return out
	}
	return d.drain(true)
}

func (d *StreamDecoder) drain(final bool) string {
	if len(d.pending) == 0 {
		return ""
	}
	var consumed int
	d.buf, consumed = appendLossy(d.buf[:0], d.pending, final)
	n := copy(d.pending, d.pending[consumed:])
	d.pending = d.pending[:n]
	return string(d.buf)
}
