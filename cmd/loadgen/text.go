package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// codec is what the load generator needs from a tokenizer: the prompt's token ids as the
// engine will count them (no special tokens added) and the way back.
type codec interface {
	encode(text string) ([]uint32, error)
	decode(ids []uint32) (string, error)
}

// textBuilder makes prompts of an exact token length out of single-token " word" pieces.
type textBuilder struct {
	tok    codec
	pieces []string // each encodes to exactly one token, also after any other piece
}

// errTooFewWords means the tokenizer splits nearly every common word into several tokens, so
// no varied text of exact length can be built from the word list.
var errTooFewWords = errors.New("loadgen: fewer than 64 common words are single tokens for this tokenizer")

// newTextBuilder keeps the words whose " word" form is one token, then checks additivity on a
// sample sentence so that a tokenizer whose pre-tokenizer merges across words is rejected
// instead of producing prompts of the wrong length.
func newTextBuilder(tok codec) (*textBuilder, error) {
	b := &textBuilder{tok: tok}
	seen := make(map[string]bool)
	for _, w := range commonWords {
		p := " " + w
		if seen[p] {
			continue
		}
		seen[p] = true
		ids, err := tok.encode(p)
		if err != nil {
			return nil, fmt.Errorf("loadgen: encode %q: %w", p, err)
		}
		if len(ids) == 1 {
			b.pieces = append(b.pieces, p)
		}
	}
	if len(b.pieces) < 64 {
		return nil, errTooFewWords
	}
	sample := strings.Join(b.pieces, "")
	ids, err := tok.encode(sample)
	if err != nil {
		return nil, fmt.Errorf("loadgen: encode sample: %w", err)
	}
	if len(ids) != len(b.pieces) {
		return nil, fmt.Errorf("loadgen: %d single-token words encode to %d tokens together; this tokenizer merges across words", len(b.pieces), len(ids))
	}
	return b, nil
}

// text returns n random pieces concatenated: exactly n tokens.
func (b *textBuilder) text(rng *rand.Rand, n int) string {
	var sb strings.Builder
	sb.Grow(n * 8)
	for range n {
		sb.WriteString(b.pieces[rng.IntN(len(b.pieces))])
	}
	return sb.String()
}

// randomIDs returns n token ids drawn uniformly from [lo, hi).
func randomIDs(rng *rand.Rand, n int, lo, hi uint32) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = lo + uint32(rng.IntN(int(hi-lo)))
	}
	return ids
}

// firstPieces returns the first n pieces of a text built by this builder (every piece starts
// with the only space it contains).
func (b *textBuilder) firstPieces(text string, n int) string {
	count := 0
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' {
			if count == n {
				return text[:i]
			}
			count++
		}
	}
	return text
}
