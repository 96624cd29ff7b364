package kvbridge

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/pkg/indexer"
)

func grpcPtr[T any](v T) *T { return &v }

// grpcBlock returns a proto block of size 4 whose tokens are derived from its hash.
func grpcBlock(h int64) *common.KvBlock {
	t := uint32(h)
	return &common.KvBlock{BlockHash: h, TokenIds: []uint32{t, t + 1, t + 2, t + 3}, BlockSize: 4}
}

func grpcStoredEv(parent *int64, hashes ...int64) *common.KvCacheEvent {
	st := &common.KvBlocksStored{ParentBlockHash: parent}
	for _, h := range hashes {
		st.Blocks = append(st.Blocks, grpcBlock(h))
	}
	return &common.KvCacheEvent{Data: &common.KvCacheEvent_Stored{Stored: st}}
}

func grpcRemovedEv(hashes ...int64) *common.KvCacheEvent {
	return &common.KvCacheEvent{Data: &common.KvCacheEvent_Removed{Removed: &common.KvBlocksRemoved{BlockHashes: hashes}}}
}

func grpcClearedEv() *common.KvCacheEvent {
	return &common.KvCacheEvent{Data: &common.KvCacheEvent_Cleared{Cleared: &common.KvCacheCleared{}}}
}

// grpcStoredWant is the indexer event grpcStoredEv converts to.
func grpcStoredWant(parent uint64, hasParent bool, hashes ...int64) indexer.Event {
	e := indexer.Event{Kind: indexer.EventStored, Parent: parent, HasParent: hasParent, BlockSize: 4}
	for _, h := range hashes {
		e.Hashes = append(e.Hashes, uint64(h))
		e.Tokens = append(e.Tokens, grpcBlock(h).TokenIds...)
	}
	return e
}

// grpcCloneBatch deep-copies b (its slices are only valid during a Consumer call).
func grpcCloneBatch(b *indexer.Batch) indexer.Batch {
	out := *b
	out.Events = make([]indexer.Event, len(b.Events))
	for i, e := range b.Events {
		e.Hashes = append([]uint64(nil), e.Hashes...)
		e.Tokens = append([]uint32(nil), e.Tokens...)
		out.Events[i] = e
	}
	return out
}

func TestProtoDecoderDecode(t *testing.T) {
	neg := int64(-6148914691236517206)
	tests := []struct {
		name          string
		in            *common.KvEventBatch
		want          indexer.Batch
		wantMalformed int
	}{
		{
			name: "stored chain, removed, cleared, rank",
			in: &common.KvEventBatch{SequenceNumber: 9, Timestamp: 1.5, DpRank: grpcPtr(int32(3)), Events: []*common.KvCacheEvent{
				grpcStoredEv(grpcPtr(int64(-9)), neg, 7),
				grpcRemovedEv(-1, 5),
				grpcClearedEv(),
			}},
			want: indexer.Batch{Seq: 9, Timestamp: 1.5, DPRank: 3, HasDPRank: true, Events: []indexer.Event{
				grpcStoredWant(uint64(0xfffffffffffffff7), true, neg, 7),
				{Kind: indexer.EventRemoved, Hashes: []uint64{0xffffffffffffffff, 5}},
				{Kind: indexer.EventCleared},
			}},
		},
		{
			name: "parent unset and parent 0 both mean no parent",
			in: &common.KvEventBatch{SequenceNumber: 1, Events: []*common.KvCacheEvent{
				grpcStoredEv(nil, 1), grpcStoredEv(grpcPtr(int64(0)), 2),
			}},
			want: indexer.Batch{Seq: 1, Events: []indexer.Event{grpcStoredWant(0, false, 1), grpcStoredWant(0, false, 2)}},
		},
		{
			name: "lora id and block size inferred from tokens",
			in: &common.KvEventBatch{SequenceNumber: 2, Events: []*common.KvCacheEvent{{Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{
				Blocks: []*common.KvBlock{{BlockHash: 3, TokenIds: []uint32{1, 2}, LoraId: grpcPtr(int64(-4))}, {BlockHash: 4, TokenIds: []uint32{3, 4}}},
			}}}}},
			want: indexer.Batch{Seq: 2, Events: []indexer.Event{{Kind: indexer.EventStored, Hashes: []uint64{3, 4},
				Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, LoraID: -4, HasLoraID: true}}},
		},
		{
			name: "malformed events skipped, others kept",
			in: &common.KvEventBatch{SequenceNumber: 3, Events: []*common.KvCacheEvent{
				{EventId: 1}, // no data
				{Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{}}}, // no blocks
				{Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{Blocks: []*common.KvBlock{ // short block
					{BlockHash: 1, TokenIds: []uint32{1, 2, 3, 4}, BlockSize: 4}, {BlockHash: 2, TokenIds: []uint32{1}, BlockSize: 4}}}}},
				{Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{Blocks: []*common.KvBlock{ // sizes differ
					{BlockHash: 1, TokenIds: []uint32{1, 2}, BlockSize: 2}, {BlockHash: 2, TokenIds: []uint32{1, 2}, BlockSize: 4}}}}},
				{Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{Blocks: []*common.KvBlock{{BlockHash: 1}}}}}, // no tokens, no size
				grpcRemovedEv(8),
			}},
			want:          indexer.Batch{Seq: 3, Events: []indexer.Event{{Kind: indexer.EventRemoved, Hashes: []uint64{8}}}},
			wantMalformed: 5,
		},
	}
	var d ProtoDecoder
	var got indexer.Batch
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := d.Decode(&got, tc.in)
			if bad != tc.wantMalformed {
				t.Errorf("malformed: got %d, want %d", bad, tc.wantMalformed)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decode mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProtoRoundTrip checks that batchToProto (the bridge's encoder) and ProtoDecoder (the
// client's decoder) agree, including the wire bytes in between.
func TestProtoRoundTrip(t *testing.T) {
	in := indexer.Batch{Seq: 77, Timestamp: 3.25, Events: []indexer.Event{
		{Kind: indexer.EventStored, Hashes: []uint64{1 << 63, 2}, Parent: 5, HasParent: true,
			Tokens: []uint32{1, 2, 3, 4, 5, 6}, BlockSize: 3, LoraID: 7, HasLoraID: true},
		{Kind: indexer.EventStored, Hashes: []uint64{9}, Tokens: []uint32{1, 2, 3}, BlockSize: 3},
		{Kind: indexer.EventRemoved, Hashes: []uint64{1 << 63}},
		{Kind: indexer.EventCleared},
	}}
	pb := batchToProto(2, 41, 100, &in)
	if pb.GetSequenceNumber() != 41 || pb.GetDpRank() != 2 || pb.Events[0].EventId != 100 || pb.Events[3].EventId != 103 {
		t.Fatalf("batchToProto header: got seq %d rank %d ids %d..%d, want 41 2 100..103",
			pb.GetSequenceNumber(), pb.GetDpRank(), pb.Events[0].EventId, pb.Events[3].EventId)
	}
	if got := pb.Events[0].GetStored().Blocks[0].BlockHash; got != -1<<63 {
		t.Errorf("hash 1<<63 on the wire: got %d, want %d", got, int64(-1<<63))
	}
	raw, err := proto.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	var back common.KvEventBatch
	if err := proto.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	var d ProtoDecoder
	var got indexer.Batch
	if bad := d.Decode(&got, &back); bad != 0 {
		t.Errorf("malformed: got %d, want 0", bad)
	}
	want := in
	want.Seq, want.DPRank, want.HasDPRank = 41, 2, true
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}
}

// TestProtoDecoderSteadyStateAllocs checks that decoding reuses its storage: no allocation per
// block once the buffers have grown.
func TestProtoDecoderSteadyStateAllocs(t *testing.T) {
	pb := &common.KvEventBatch{SequenceNumber: 1}
	for i := range 16 {
		pb.Events = append(pb.Events, grpcStoredEv(grpcPtr(int64(i)), int64(i*10), int64(i*10+1), int64(i*10+2)), grpcRemovedEv(int64(i)))
	}
	var d ProtoDecoder
	var b indexer.Batch
	d.Decode(&b, pb)
	allocs := testing.AllocsPerRun(100, func() { d.Decode(&b, pb) })
	if allocs != 0 {
		t.Errorf("allocs per Decode of 64 blocks: got %v, want 0", allocs)
	}
}

func BenchmarkProtoDecode(b *testing.B) {
	pb := &common.KvEventBatch{SequenceNumber: 1}
	blocks := 0
	for i := range 16 {
		pb.Events = append(pb.Events, grpcStoredEv(grpcPtr(int64(i)), int64(i*10), int64(i*10+1), int64(i*10+2), int64(i*10+3)))
		blocks += 4
	}
	raw, err := proto.Marshal(pb)
	if err != nil {
		b.Fatal(err)
	}
	var d ProtoDecoder
	var out indexer.Batch
	var msg common.KvEventBatch
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		// Unmarshal included: it is what the client does per received message.
		if err := proto.Unmarshal(raw, &msg); err != nil {
			b.Fatal(err)
		}
		d.Decode(&out, &msg)
	}
	b.ReportMetric(float64(blocks*b.N)/b.Elapsed().Seconds(), "blocks/s")
}

// FuzzProtoDecode feeds arbitrary bytes through protobuf decoding and the conversion: it must
// never panic, and every stored event it keeps must hold exactly BlockSize tokens per hash.
func FuzzProtoDecode(f *testing.F) {
	seed := &common.KvEventBatch{SequenceNumber: 3, DpRank: grpcPtr(int32(1)), Events: []*common.KvCacheEvent{
		grpcStoredEv(grpcPtr(int64(-1)), 1, 2), grpcRemovedEv(3), grpcClearedEv()}}
	raw, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte{})
	var d ProtoDecoder
	var b indexer.Batch
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg common.KvEventBatch
		if proto.Unmarshal(data, &msg) != nil {
			return
		}
		d.Decode(&b, &msg)
		for _, e := range b.Events {
			if e.Kind == indexer.EventStored && (e.BlockSize <= 0 || len(e.Tokens) != e.BlockSize*len(e.Hashes) || len(e.Hashes) == 0) {
				t.Fatalf("stored event kept with %d tokens, block size %d, %d hashes", len(e.Tokens), e.BlockSize, len(e.Hashes))
			}
		}
	})
}

// BenchmarkProtoConvert measures the conversion alone (no protobuf unmarshalling).
func BenchmarkProtoConvert(b *testing.B) {
	pb := &common.KvEventBatch{SequenceNumber: 1}
	blocks := 0
	for i := range 16 {
		pb.Events = append(pb.Events, grpcStoredEv(grpcPtr(int64(i)), int64(i*10), int64(i*10+1), int64(i*10+2), int64(i*10+3)))
		blocks += 4
	}
	var d ProtoDecoder
	var out indexer.Batch
	b.ReportAllocs()
	for b.Loop() {
		d.Decode(&out, pb)
	}
	b.ReportMetric(float64(blocks*b.N)/b.Elapsed().Seconds(), "blocks/s")
}
