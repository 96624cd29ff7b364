package router

import (
	"strings"

	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// Tokenizer is what the router needs of a tokenizer: encoding prompts it routes on (and sends
// to grpc:// workers), the vocabulary size that bounds token-id prompts, and incremental
// decoders for gRPC output. FromTokenizer adapts *tokenizer.Tokenizer.
type Tokenizer interface {
	// Encode appends the ids of text to dst; addSpecial adds the BOS/template tokens as the
	// engines do for /v1/completions.
	Encode(dst []uint32, text string, addSpecial bool) ([]uint32, error)
	// VocabSize returns the number of token ids (ids ≥ it are invalid).
	VocabSize() int
	// NewDecoder returns a fresh incremental decoder, used by one goroutine.
	NewDecoder() StreamDecoder
}

// StreamDecoder turns generated token ids into text incrementally: Add returns the text that
// became final with id (possibly ""), Flush what remains at the end.
type StreamDecoder interface {
	Add(id uint32) string
	Flush() string
}

// FromTokenizer adapts a loaded HF tokenizer to the router's Tokenizer.
func FromTokenizer(t *tokenizer.Tokenizer) Tokenizer { return hfTokenizer{t} }

type hfTokenizer struct{ t *tokenizer.Tokenizer }

func (h hfTokenizer) Encode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	return h.t.Encode(dst, text, addSpecial)
}

func (h hfTokenizer) VocabSize() int { return h.t.VocabSize() }

func (h hfTokenizer) NewDecoder() StreamDecoder { return &offsetDecoder{t: h.t} }

// offsetDecoder decodes incrementally with the prefix/read offsets of HF text-generation-
// inference: it decodes a short window of recent ids twice and emits the difference once it no
// longer ends in an incomplete UTF-8 sequence (U+FFFD), so multi-token characters and
// byte-level merges come out whole. Special tokens are skipped, as engines do by default.
type offsetDecoder struct {
	t                  *tokenizer.Tokenizer
	ids                []uint32
	prefixOff, readOff int
}

func (d *offsetDecoder) Add(id uint32) string {
	d.ids = append(d.ids, id)
	prefix, err1 := d.t.Decode(d.ids[d.prefixOff:d.readOff], true)
	full, err2 := d.t.Decode(d.ids[d.prefixOff:], true)
	if err1 != nil || err2 != nil {
		return ""
	}
	if len(full) > len(prefix) && !strings.HasSuffix(full, "\uFFFD") && strings.HasPrefix(full, prefix) {
		d.prefixOff, d.readOff = d.readOff, len(d.ids)
		return full[len(prefix):]
	}
	return ""
}

func (d *offsetDecoder) Flush() string {
	prefix, err1 := d.t.Decode(d.ids[d.prefixOff:d.readOff], true)
	full, err2 := d.t.Decode(d.ids[d.prefixOff:], true)
	d.prefixOff, d.readOff = len(d.ids), len(d.ids)
	if err1 != nil || err2 != nil || len(full) <= len(prefix) || !strings.HasPrefix(full, prefix) {
		return ""
	}
	return full[len(prefix):]
}
