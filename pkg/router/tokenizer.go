package router

import (
	"github.com/kvgate/kvgate/pkg/engine"
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
	engine.Detokenizer
}

// FromTokenizer adapts a loaded HF tokenizer to the router's Tokenizer.
func FromTokenizer(t *tokenizer.Tokenizer) Tokenizer { return hfTokenizer{t} }

type hfTokenizer struct{ t *tokenizer.Tokenizer }

func (h hfTokenizer) Encode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	return h.t.Encode(dst, text, addSpecial)
}

func (h hfTokenizer) VocabSize() int { return h.t.VocabSize() }

func (h hfTokenizer) NewDecoder(skipSpecial bool) engine.StreamDecoder {
	return h.t.NewStreamDecoderSpecial(skipSpecial)
}

var (
	_ Tokenizer            = hfTokenizer{}
	_ engine.StreamDecoder = (*tokenizer.StreamDecoder)(nil)
)
