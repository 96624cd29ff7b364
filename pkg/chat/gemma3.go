package chat

import (
	"slices"
	"strings"

	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// Gemma 3's image expansion, as vLLM's Gemma3MultiModalProcessor does it on token ids
// (vllm/model_executor/models/gemma3_mm.py; the ids path is the one vLLM takes with its
// processor cache on, the default): each <start_of_image> becomes the ids of the processor's
// full_image_sequence, "\n\n" + boi + image_token × image_seq_length + eoi + "\n\n"
// (transformers processing_gemma3.py), encoded without special tokens; then, over the whole
// prompt, [\n, \n\n] and [\n\n, \n] become \n\n\n and [\n\n, \n\n] becomes \n\n\n\n, so that
// the ids agree with the tokenizer's. An item's placeholder range (what its blocks are keyed
// by) starts at the token its leading "\n\n" ended up in and is as long as the unmerged
// sequence, so two adjacent images overlap by one token: vLLM finds the ranges by splitting
// every \n\n\n and \n\n\n\n back and searching the unmerged sequence in order.

// gemmaImages is a Gemma 3 model's image expansion.
type gemmaImages struct {
	// seq is the full image sequence as the tokenizer encodes it.
	seq []uint32
	// nl are the ids of "\n", "\n\n", "\n\n\n" and "\n\n\n\n"; boi is
	// <start_of_image>, the placeholder the template emits.
	nl  [4]uint32
	boi uint32
}

// newGemmaImages builds the expansion from config.json's boi, image and eoi token ids and
// n image tokens per image; nil when the tokenizer lacks a token it needs.
func newGemmaImages(tok *tokenizer.Tokenizer, boi, image, eoi uint32, n int) *gemmaImages {
	if tok == nil || n <= 0 || n > 1<<16 {
		return nil
	}
	g := &gemmaImages{boi: boi}
	for i := range g.nl {
		id, ok := tok.TokenID(strings.Repeat("\n", i+1))
		if !ok {
			return nil
		}
		g.nl[i] = id
	}
	var names [3]string
	for i, id := range []uint32{boi, image, eoi} {
		s, ok := tok.Token(id)
		if !ok {
			return nil
		}
		names[i] = s
	}
	text := "\n\n" + names[0] + strings.Repeat(names[1], n) + names[2] + "\n\n"
	seq, err := tok.Encode(nil, text, false)
	if err != nil || !slices.Contains(seq, boi) {
		return nil
	}
	g.seq = seq
	return g
}

// merge applies vLLM's three newline merges to ids in place, in order, each left to right
// without overlaps, and returns the merged ids and, for each merged token, the index in ids
// of its first unmerged token.
func (g *gemmaImages) merge(ids []uint32) ([]uint32, []int) {
	from := make([]int, len(ids))
	for i := range from {
		from[i] = i
	}
	for _, m := range [3]struct{ a, b, to uint32 }{{g.nl[0], g.nl[1], g.nl[2]}, {g.nl[1], g.nl[0], g.nl[2]}, {g.nl[1], g.nl[1], g.nl[3]}} {
		w := 0
		for i := 0; i < len(ids); i++ {
			if i+1 < len(ids) && ids[i] == m.a && ids[i+1] == m.b {
				ids[w], from[w] = m.to, from[i]
				i++
			} else {
				ids[w], from[w] = ids[i], from[i]
			}
			w++
		}
		ids, from = ids[:w], from[:w]
	}
	return ids, from
}

// find is vLLM's search for the first n items' ranges in merged ids: every \n\n\n and
// \n\n\n\n split back into two tokens, the sequence searched left to right for the image
// sequence, and each match's start mapped back to the merged token it came from. It returns
// the merged offsets found, fewer than n when the search stops short (vLLM then fails the
// request).
func (g *gemmaImages) find(ids []uint32, n int) []int {
	split := make([]uint32, 0, len(ids)+16)
	orig := make([]int, 0, len(ids)+16)
	for i, id := range ids {
		switch id {
		case g.nl[2]:
			split, orig = append(split, g.nl[0], g.nl[1]), append(orig, i, i)
		case g.nl[3]:
			split, orig = append(split, g.nl[1], g.nl[1]), append(orig, i, i)
		default:
			split, orig = append(split, id), append(orig, i)
		}
	}
	var at []int
	for i := 0; i < len(split) && len(at) < n; {
		if i+len(g.seq) <= len(split) && slices.Equal(split[i:i+len(g.seq)], g.seq) {
			at = append(at, orig[i])
			i += len(g.seq)
			continue
		}
		i++
	}
	return at
}
