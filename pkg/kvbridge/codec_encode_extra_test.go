package kvbridge

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// TestEncodeExtraKeys: a stored event whose blocks have multimodal extra keys is written with
// vLLM's extra_keys field after lora_name (nil for a block without keys; bare identifiers, or
// [identifier, offset] pairs), byte for byte the shape of vLLM's array event, and decodes back
// to one extra-keys hash per block in both forms; an event without keys keeps its 8 fields.
func TestEncodeExtraKeys(t *testing.T) {
	keys := map[uint64][]ExtraKey{8: {{"mm-a", 1}}, 9: {{"mm-a", -1}, {"mm-b", 0}}}
	b := indexer.Batch{Timestamp: 1, Events: []indexer.Event{{Kind: indexer.EventStored, Hashes: []uint64{7, 8, 9}, Tokens: []uint32{1, 2, 3, 4, 5, 6}, BlockSize: 2, Medium: "GPU"}}}
	head := mp{}.arr(3).f(1).arr(1).arr(9).str("BlockStored").arr(3).u(7).u(8).u(9).nil_().tokens(6).i(2).nil_().str("GPU").nil_()
	for _, tt := range []struct {
		name  string
		pairs bool
		want  mp
	}{
		{"bare identifiers", false, append(mp(nil), head...).arr(3).nil_().arr(1).str("mm-a").arr(2).str("mm-a").str("mm-b").nil_()},
		{"pairs", true, append(mp(nil), head...).arr(3).nil_().arr(1).arr(2).str("mm-a").i(1).arr(2).arr(2).str("mm-a").i(-1).arr(2).str("mm-b").i(0).nil_()},
	} {
		opts := EncodeOptions{ExtraKeys: func(h uint64) []ExtraKey { return keys[h] }, ExtraKeyPairs: tt.pairs}
		got := EncodeBatch(nil, &b, opts)
		if !bytes.Equal(got, tt.want) {
			t.Errorf("%s:\ngot  %x\nwant %x", tt.name, got, []byte(tt.want))
		}
		for _, mapEvents := range []bool{false, true} {
			opts.MapEvents = mapEvents
			var dec indexer.Batch
			if err := DecodeBatch(EncodeBatch(nil, &b, opts), &dec); err != nil || len(dec.Events) != 1 {
				t.Fatalf("%s (map %v): decode: %v", tt.name, mapEvents, err)
			}
			want := []uint64{0, indexer.ExtraKeysHash("mm-a"), indexer.ExtraKeysHash("mm-a", "mm-b")}
			if !cmp.Equal(dec.Events[0].Extra, want) {
				t.Errorf("%s (map %v): extra %x, want %x", tt.name, mapEvents, dec.Events[0].Extra, want)
			}
		}
	}
	plain := EncodeBatch(nil, &b, EncodeOptions{ExtraKeys: func(uint64) []ExtraKey { return nil }})
	if !bytes.Equal(plain, EncodeBatch(nil, &b, EncodeOptions{})) {
		t.Error("an event without extra keys is not written as before")
	}
}
