package main

import (
	"fmt"

	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// hfCodec adapts pkg/tokenizer to codec. Prompt lengths are counted without special tokens:
// the engine may add a BOS token (Llama 3 does, Qwen3 does not), which is the same for every
// request and so shifts all block boundaries alike.
type hfCodec struct {
	t *tokenizer.Tokenizer
}

// loadCodec loads a tokenizer.json file, or the tokenizer of a model directory.
func loadCodec(path string) (*hfCodec, error) {
	t, err := tokenizer.LoadPath(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: tokenizer: %w", err)
	}
	return &hfCodec{t: t}, nil
}

func (c *hfCodec) encode(text string) ([]uint32, error) { return c.t.Encode(nil, text, false) }

func (c *hfCodec) decode(ids []uint32) (string, error) { return c.t.Decode(ids, false) }

var _ codec = (*hfCodec)(nil)
