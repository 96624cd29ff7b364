package main

import (
	"fmt"
	"strings"

	"github.com/kvgate/kvgate/pkg/sim"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// tokCodec adapts a *tokenizer.Tokenizer to sim.TextCodec.
type tokCodec struct{ t *tokenizer.Tokenizer }

// Encode tokenizes a completion prompt as vLLM does (special tokens added).
func (c tokCodec) Encode(text string) ([]uint32, error) {
	ids, err := c.t.Encode(nil, text, true)
	if err != nil {
		return nil, fmt.Errorf("simworker: tokenize: %w", err)
	}
	return ids, nil
}

// NewDetokenizer returns vLLM's incremental detokenizer (prefix/read offsets): text is only
// emitted once it no longer ends in an incomplete character.
func (c tokCodec) NewDetokenizer() sim.Detokenizer { return &incDetok{t: c.t} }

type incDetok struct {
	t                        *tokenizer.Tokenizer
	ids                      []uint32
	prefixOffset, readOffset int
}

func (d *incDetok) Add(ids []uint32) string {
	d.ids = append(d.ids, ids...)
	prefix, err1 := d.t.Decode(d.ids[d.prefixOffset:d.readOffset], true)
	full, err2 := d.t.Decode(d.ids[d.prefixOffset:], true)
	if err1 != nil || err2 != nil || len(full) <= len(prefix) || strings.HasSuffix(full, "\ufffd") {
		return ""
	}
	d.prefixOffset, d.readOffset = d.readOffset, len(d.ids)
	return full[len(prefix):]
}
