package sim

import (
	"strconv"
)

// TextCodec turns prompt text into token ids and output ids back into text. cmd/simworker
// adapts pkg/tokenizer to it; without one the server accepts token-id prompts only and renders
// output ids as words from a fixed list.
type TextCodec interface {
	// Encode tokenizes a /v1/completions text prompt the way the engine would (special
	// tokens added).
	Encode(text string) ([]uint32, error)
	// NewDetokenizer returns an incremental decoder for one output sequence.
	NewDetokenizer() Detokenizer
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

func appendUint32s(b []byte, ids []uint32) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}
