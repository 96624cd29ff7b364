package kvbridge

import (
	"testing"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// benchBatch is a realistic vLLM scheduler step: 32 BlockStored events of 4 blocks × 16 tokens
// (large vocab ids, so uint32-encoded), u64 hashes, parents, and 8 single-block removals.
func benchBatch() (indexer.Batch, int) {
	var b indexer.Batch
	b.Timestamp, b.HasDPRank = 1796016851.5, true
	blocks := 0
	h := uint64(0x9e3779b97f4a7c15)
	for i := range 32 {
		ev := indexer.Event{Kind: indexer.EventStored, BlockSize: 16, Medium: "GPU", Parent: h, HasParent: i%4 != 0}
		for range 4 {
			h = h*6364136223846793005 + 1442695040888963407
			ev.Hashes = append(ev.Hashes, h)
			for t := range 16 {
				ev.Tokens = append(ev.Tokens, uint32(70000+(h>>40)%80000+uint64(t)))
			}
		}
		blocks += len(ev.Hashes)
		b.Events = append(b.Events, ev)
	}
	for range 8 {
		h = h*6364136223846793005 + 1442695040888963407
		b.Events = append(b.Events, indexer.Event{Kind: indexer.EventRemoved, Hashes: []uint64{h}, Medium: "GPU"})
		blocks++
	}
	return b, blocks
}

func BenchmarkDecode(b *testing.B) {
	for _, tt := range []struct {
		name string
		opts EncodeOptions
	}{
		{"array", EncodeOptions{}},
		{"map", EncodeOptions{MapEvents: true}},
		{"map-bytes", EncodeOptions{MapEvents: true, BytesHashes: true}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			src, blocks := benchBatch()
			payload := EncodeBatch(nil, &src, tt.opts)
			var dst indexer.Batch
			if err := DecodeBatch(payload, &dst); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := DecodeBatch(payload, &dst); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "block-events/s")
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	src, _ := benchBatch()
	buf := EncodeBatch(nil, &src, EncodeOptions{})
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = EncodeBatch(buf[:0], &src, EncodeOptions{})
	}
}
