package indexer

// Extra keys of a request's blocks from its media items (docs/multimodal.md): the engine adds
// an item's identifier to the extra keys of every block whose tokens overlap the item's
// placeholder range, in item order (vLLM kv_cache_utils._gen_mm_extra_hash_keys), and reports
// them in BlockStored.extra_keys; ExtraKeys hashes one block's keys. A request whose ranges and
// identifiers are known gets the keys the engine's events give its blocks.

// ExtraSpan is one media item's token range [Start, End) in a request and its identifier (the
// engine's mm hash: the item's uuid when the request gave one).
type ExtraSpan struct {
	Start, End int
	Key        string
}

// SpansIn returns the spans overlapping tokens [start, end), a sub-slice of spans, which must
// be sorted by Start and not overlap one another.
func SpansIn(spans []ExtraSpan, start, end int) []ExtraSpan {
	i := 0
	for i < len(spans) && spans[i].End <= start {
		i++
	}
	j := i
	for j < len(spans) && spans[j].Start < end {
		j++
	}
	return spans[i:j]
}

// AppendSpanExtra appends to dst the extra-keys hash (ExtraKeys) of each of the first n blocks
// of size bs: 0 for a block no span overlaps.
func AppendSpanExtra(dst []uint64, spans []ExtraSpan, bs, n int) []uint64 {
	for b := range n {
		in := SpansIn(spans, b*bs, (b+1)*bs)
		var x ExtraKeys
		for _, s := range in {
			x.Add([]byte(s.Key))
		}
		dst = append(dst, x.Sum())
	}
	return dst
}

// MediaKeys is the engine's view of a request with media for Lookup.Score: its block keys
// are computed from Tokens (the engine's ids, as long as the tokens scored) with the extra
// keys of Spans, while the Tree (which has no extra keys) is asked about the scored tokens.
type MediaKeys struct {
	Tokens []uint32
	Spans  []ExtraSpan
}

// appendKeys appends the request's block keys at block size bs: from s.Media when set.
func (s *LookupScratch) appendKeys(dst []uint64, tokens []uint32, bs int, ns string) []uint64 {
	m := s.Media
	if m == nil || len(m.Tokens) != len(tokens) {
		return AppendBlockKeys(dst, tokens, bs, ns)
	}
	n := len(tokens) / bs
	s.extra = AppendSpanExtra(s.extra[:0], m.Spans, bs, n)
	return AppendBlockKeysExtra(dst, m.Tokens, bs, ns, s.extra)
}
