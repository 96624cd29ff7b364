package indexer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExtraKeysBlocks: blocks an engine stored with extra keys (an image's identifier on the
// blocks that cover it) match only requests keyed with the same extra keys: never a text
// request with the same token ids, nor another image's; the blocks before them match anyone,
// and a chain continues after them from its parent as usual.
func TestExtraKeysBlocks(t *testing.T) {
	toks := seq(1, 64) // 4 blocks of 16; blocks 1 and 2 hold the image's placeholder tokens
	img1, img2 := ExtraKeysHash("mm-aaa"), ExtraKeysHash("mm-bbb")
	extra := []uint64{0, img1, img1, 0}
	ix := mustNew(t, Config{})
	ix.Apply(0, []Event{
		{Kind: EventStored, Hashes: []uint64{10, 11}, Tokens: toks[:32], BlockSize: 16, Extra: extra[:2]},
		{Kind: EventStored, Hashes: []uint64{12, 13}, Parent: 11, HasParent: true, Tokens: toks[32:], BlockSize: 16, Extra: extra[2:]},
	})
	ix.Apply(1, []Event{{Kind: EventStored, Hashes: []uint64{20, 21, 22, 23}, Tokens: toks, BlockSize: 16}}) // text only
	for _, tt := range []struct {
		name string
		keys []uint64
		want []WorkerMatch
	}{
		{"same image", AppendBlockKeysExtra(nil, toks, 16, "", extra), []WorkerMatch{{0, 4}, {1, 1}}},
		{"text request", AppendBlockKeys(nil, toks, 16, ""), []WorkerMatch{{0, 1}, {1, 4}}},
		{"other image", AppendBlockKeysExtra(nil, toks, 16, "", []uint64{0, img2, img2, 0}), []WorkerMatch{{0, 1}, {1, 1}}},
	} {
		if got := sortMatches(ix.Match(tt.keys, nil)); !cmp.Equal(tt.want, got) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
	// A wrong count of per-block extra keys is not placed.
	if r := ix.Apply(2, []Event{{Kind: EventStored, Hashes: []uint64{30, 31}, Tokens: toks[:32], BlockSize: 16, Extra: []uint64{img1}}}); r.Stored != 0 || r.Skipped != 1 {
		t.Errorf("mismatched extra keys: %+v", r)
	}
}

// TestExtraKeysHashRule pins the hashing rule (docs/multimodal.md): keys joined with a 0x00
// after each, XXH3-64 seed 1337; mixed into the content hash as two LE u64; no keys, no change.
func TestExtraKeysHashRule(t *testing.T) {
	if ExtraKeysHash() != 0 || ExtraContentHash(5, 0) != 5 {
		t.Fatal("no extra keys must leave the key alone")
	}
	if ExtraKeysHash("ab", "c") == ExtraKeysHash("a", "bc") || ExtraKeysHash("a") == ExtraKeysHash("a", "") {
		t.Fatal("key boundaries are not part of the hash")
	}
	c := ContentHash(seq(1, 16))
	if ExtraContentHash(c, ExtraKeysHash("x")) == c || ExtraContentHash(c, 1) == ExtraContentHash(c, 2) {
		t.Fatal("extra keys do not change the content hash")
	}
	// AppendBlockKeysExtra without extra keys is AppendBlockKeys.
	if !cmp.Equal(AppendBlockKeysExtra(nil, seq(1, 48), 16, "ns", []uint64{0, 0}), AppendBlockKeys(nil, seq(1, 48), 16, "ns")) {
		t.Fatal("zero extra keys changed the keys")
	}
}
