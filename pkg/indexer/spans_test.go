package indexer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSpanExtra: each block's extra keys are the identifiers of the items whose placeholder
// range overlaps it, in order, as vLLM's _gen_mm_extra_hash_keys assigns them. The cases are
// the two examples of vLLM PR #11646 and PR #12603: T0 T1 P00 P01 | P02 P03 P04 T2 | T3 P10 P11
// P12 (block 4, items at 2+5 and 9+3) gives aaa, aaa, bbb; two items at 0+3 and 3+3 in one
// block of 6 give both, and a block past every item none.
func TestSpanExtra(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spans []ExtraSpan
		bs, n int
		want  [][]string
	}{
		{"vllm #11646", []ExtraSpan{{2, 7, "aaa"}, {9, 12, "bbb"}}, 4, 3, [][]string{{"aaa"}, {"aaa"}, {"bbb"}}},
		{"vllm #12603", []ExtraSpan{{0, 3, "hash1"}, {3, 6, "hash2"}}, 6, 2, [][]string{{"hash1", "hash2"}, nil}},
		{"text before, an item ending on a block edge", []ExtraSpan{{8, 16, "x"}}, 8, 3, [][]string{nil, {"x"}, nil}},
	} {
		got := AppendSpanExtra(nil, tt.spans, tt.bs, tt.n)
		want := make([]uint64, len(tt.want))
		for i, keys := range tt.want {
			want[i] = ExtraKeysHash(keys...)
			var in []string
			for _, s := range SpansIn(tt.spans, i*tt.bs, (i+1)*tt.bs) {
				in = append(in, s.Key)
			}
			if !cmp.Equal(in, keys) {
				t.Errorf("%s: block %d: SpansIn gives %v, want %v", tt.name, i, in, keys)
			}
		}
		if !cmp.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", tt.name, got, want)
		}
	}
}

// TestLookupMediaKeys: a request scored with the engine's view of its media (MediaKeys)
// matches every block an engine stored with the image's identifier, past the image; without
// it, or with another image's identifier on the same placeholder ids, only the blocks before
// the image. Score forgets the media once used.
func TestLookupMediaKeys(t *testing.T) {
	e := newLookupEnv(t)
	toks := e.toks // 10 blocks; an image covers tokens 40..79 (blocks 2 to 4)
	spans := []ExtraSpan{{40, 80, "uuid-a"}}
	extra := AppendSpanExtra(nil, spans, 16, 10)
	keys := AppendBlockKeysExtra(nil, toks, 16, "", extra)
	if r := e.l.Index.Apply(0, []Event{{Kind: EventStored, Hashes: keys, Tokens: toks, BlockSize: 16, Extra: extra}}); r.Stored != 10 {
		t.Fatalf("stored %+v", r)
	}
	ws := []LookupWorker{{IDs: []WorkerID{0}, EventFed: true}}
	var s LookupScratch
	score := func(m *MediaKeys) int {
		s.Media = m
		out := e.l.Score(&s, toks, "", ws, nil, false)
		if s.Media != nil {
			t.Fatal("Score kept the media for the next request")
		}
		return out[0].Events
	}
	for _, tt := range []struct {
		name string
		m    *MediaKeys
		want int
	}{
		{"same image", &MediaKeys{Tokens: toks, Spans: spans}, 10},
		{"no media view", nil, 2},
		{"other image", &MediaKeys{Tokens: toks, Spans: []ExtraSpan{{40, 80, "uuid-b"}}}, 2},
		{"view of another length", &MediaKeys{Tokens: toks[:80], Spans: spans}, 2},
	} {
		if got := score(tt.m); got != tt.want {
			t.Errorf("%s: %d blocks matched, want %d", tt.name, got, tt.want)
		}
	}
	if got := s.Keys(16); !cmp.Equal(got, AppendBlockKeys(nil, toks, 16, "")) {
		t.Error("the last Score's keys are not the plain keys")
	}
}
