package sim

import (
	"fmt"
	"strings"

	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// TextCodec turns prompt text into token ids and output ids back into text. NewTokenizerCodec
// adapts pkg/tokenizer to it; without one the server accepts token-id prompts only and renders
// output ids as words from a fixed list.
type TextCodec interface {
	// Encode tokenizes a /v1/completions text prompt the way the engine would (special
	// tokens added).
	Encode(text string) ([]uint32, error)
	// NewDetokenizer returns an incremental decoder for one output sequence, skipping
	// special tokens or keeping their text.
	NewDetokenizer(skipSpecial bool) Detokenizer
}

// Detokenizer decodes one output sequence incrementally.
type Detokenizer interface {
	// Add consumes new ids and returns the text they complete (possibly "" while a
	// multi-byte character is incomplete).
	Add(ids []uint32) string
}

// wordDetok is the fallback Detokenizer: one space-prefixed word per id.
type wordDetok struct{ buf []byte }

var fallbackWords = [...]string{"the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was",
	"with", "be", "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
	"an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been",
	"if", "more", "when", "will", "would", "who", "so", "no", "cache", "block", "token", "prefix", "route",
	"engine", "worker", "gateway", "event", "batch", "queue", "step", "time", "first", "last"}

func (d *wordDetok) Add(ids []uint32) string {
	d.buf = d.buf[:0]
	for _, id := range ids {
		d.buf = append(d.buf, ' ')
		d.buf = append(d.buf, fallbackWords[id%uint32(len(fallbackWords))]...)
	}
	return string(d.buf)
}

// NewTokenizerCodec returns the TextCodec of a Hugging Face tokenizer: completion prompts are
// encoded as vLLM encodes them (special tokens added) and output is decoded with vLLM's
// incremental detokenizer. The codec is safe for concurrent use; each Detokenizer is not.
func NewTokenizerCodec(t *tokenizer.Tokenizer) TextCodec { return tokCodec{t: t} }

type tokCodec struct{ t *tokenizer.Tokenizer }

func (c tokCodec) Encode(text string) ([]uint32, error) {
	ids, err := c.t.Encode(nil, text, true)
	if err != nil {
		return nil, fmt.Errorf("sim: tokenize: %w", err)
	}
	return ids, nil
}

func (c tokCodec) NewDetokenizer(skipSpecial bool) Detokenizer {
	return &incDetok{t: c.t, skip: skipSpecial}
}

// incDetok is vLLM's incremental detokenizer (prefix and read offsets): text is only emitted
// once it no longer ends in an incomplete character.
type incDetok struct {
	t                        *tokenizer.Tokenizer
	skip                     bool
	ids                      []uint32
	prefixOffset, readOffset int
}

func (d *incDetok) Add(ids []uint32) string {
	d.ids = append(d.ids, ids...)
	prefix, err1 := d.t.Decode(d.ids[d.prefixOffset:d.readOffset], d.skip)
	full, err2 := d.t.Decode(d.ids[d.prefixOffset:], d.skip)
	if err1 != nil || err2 != nil || len(full) <= len(prefix) || strings.HasSuffix(full, "\ufffd") {
		return ""
	}
	d.prefixOffset, d.readOffset = d.readOffset, len(d.ids)
	return full[len(prefix):]
}
