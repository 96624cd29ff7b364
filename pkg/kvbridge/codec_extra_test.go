package kvbridge

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// vllmStored is a BlockStored event of 3 blocks of 2 tokens as current vLLM sends it (array
// form, with group_idx and kv_cache_spec_kind after extra_keys), lora_name and extra_keys as
// given.
func vllmStored(lora string, extra func(mp) mp) mp {
	m := mp{}.arr(3).f(1).arr(1).arr(11).str("BlockStored").arr(3).u(7).u(8).u(9).nil_().tokens(6).u(2).nil_().str("GPU")
	if lora == "" {
		m = m.nil_()
	} else {
		m = m.str(lora)
	}
	return extra(m).u(0).str("full_attention").nil_() // then the batch's rank: none
}

// TestExtraKeysDecode: multimodal extra keys decode to one hash per block in both of vLLM's
// forms ([identifier, offset] pairs now, bare identifiers in earlier releases: the same hash),
// the adapter name is left out, map form reads them too, and extra keys that are not one per
// block are not used.
func TestExtraKeysDecode(t *testing.T) {
	a, ab := indexer.ExtraKeysHash("mm-a"), indexer.ExtraKeysHash("mm-a", "mm-b")
	want := []uint64{0, a, ab}
	for _, tt := range []struct {
		name    string
		payload mp
		want    []uint64
	}{
		{"bare identifiers", vllmStored("", func(m mp) mp {
			return m.arr(3).nil_().arr(1).str("mm-a").arr(2).str("mm-a").str("mm-b")
		}), want},
		{"pairs with offsets", vllmStored("", func(m mp) mp {
			return m.arr(3).arr(0).arr(1).arr(2).str("mm-a").u(1).arr(2).arr(2).str("mm-a").i(-1).arr(2).str("mm-b").u(0)
		}), want},
		{"adapter name left out", vllmStored("ad", func(m mp) mp {
			return m.arr(3).arr(1).str("ad").arr(2).str("ad").str("mm-a").arr(3).str("ad").str("mm-a").str("mm-b")
		}), want},
		{"no extra keys", vllmStored("", func(m mp) mp { return m.arr(3).nil_().nil_().nil_() }), nil},
		{"nil", vllmStored("", func(m mp) mp { return m.nil_() }), nil},
		{"not one per block", vllmStored("", func(m mp) mp { return m.arr(2).nil_().arr(1).str("mm-a") }), nil},
		{"map-shaped entry skipped", vllmStored("", func(m mp) mp {
			return m.arr(3).mapHdr(1).str("mm").str("x").arr(1).str("mm-a").arr(2).str("mm-a").str("mm-b")
		}), want},
		{"map event, extra_keys before lora_name", mp{}.arr(3).f(1).arr(1).mapHdr(6).str("type").str("BlockStored").
			str("extra_keys").arr(3).arr(1).str("ad").arr(2).str("ad").str("mm-a").arr(3).str("mm-a").str("ad").str("mm-b").
			str("block_hashes").arr(3).u(7).u(8).u(9).str("token_ids").tokens(6).str("block_size").u(2).str("lora_name").str("ad").nil_(), want},
	} {
		var got indexer.Batch
		rej, err := decodeBatchRejected(tt.payload, &got)
		if err != nil || rej != 0 || len(got.Events) != 1 {
			t.Fatalf("%s: decode: %d events, %d rejected, %v", tt.name, len(got.Events), rej, err)
		}
		if !cmp.Equal(got.Events[0].Extra, tt.want, equateEmpty) {
			t.Errorf("%s: extra %v, want %v", tt.name, got.Events[0].Extra, tt.want)
		}
	}
	// A badly typed identifier rejects the event, not the batch.
	var got indexer.Batch
	rej, err := decodeBatchRejected(vllmStored("", func(m mp) mp { return m.arr(3).nil_().arr(1).raw(0xd9).nil_() }), &got)
	if err == nil && rej != 1 {
		t.Errorf("a truncated identifier: %d rejected, %v", rej, err)
	}
}
