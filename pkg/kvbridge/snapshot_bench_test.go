package kvbridge

import (
	"testing"

	"github.com/kvgate/kvgate/api/common"
)

// benchChains returns n stored batches of one 16-block chain each (16-token blocks) with
// distinct hashes, and the matching removals.
func benchChains(n int) (stored, removed []*common.KvEventBatch) {
	h := int64(1)
	for range n {
		var hs []int64
		st := &common.KvBlocksStored{}
		for range 16 {
			tok := make([]uint32, 16)
			for k := range tok {
				tok[k] = uint32(h) + uint32(k)
			}
			st.Blocks = append(st.Blocks, &common.KvBlock{BlockHash: h, BlockSize: 16, TokenIds: tok})
			hs = append(hs, h)
			h++
		}
		stored = append(stored, &common.KvEventBatch{Events: []*common.KvCacheEvent{{Data: &common.KvCacheEvent_Stored{Stored: st}}}})
		removed = append(removed, protoRemoved(hs...))
	}
	return stored, removed
}

// BenchmarkBlockSetApply is the bridge's cost per published block of keeping the block set:
// a 16-block chain stored and later removed, in a set holding about 64k blocks.
func BenchmarkBlockSetApply(b *testing.B) {
	const window = 4096 // chains alive at once: 65536 blocks
	stored, removed := benchChains(window * 2)
	s := newBlockSet(DefaultSnapshotMaxBlocks)
	for i := range window {
		applySet(s, stored[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := window + i%window
		applySet(s, stored[k])
		applySet(s, removed[k-window])
		if i%window == window-1 {
			// Swap roles: the chains just stored become the ones removed next.
			stored, removed = append(stored[window:], stored[:window]...), append(removed[window:], removed[:window]...)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/16, "ns/block")
}

// BenchmarkSnapshot is the cost of one snapshot of a 262144-block set (DefaultSnapshotMaxBlocks):
// freeze is what runs under the bridge's lock, build the encoding after it.
func BenchmarkSnapshot(b *testing.B) {
	stored, _ := benchChains(DefaultSnapshotMaxBlocks / 16)
	s := newBlockSet(DefaultSnapshotMaxBlocks)
	for _, st := range stored {
		applySet(s, st)
	}
	b.Run("freeze", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = s.freeze()
		}
	})
	f := []rankSet{{0, s.freeze()}}
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = buildSnapshot(f, 1<<20, 0)
		}
	})
}
