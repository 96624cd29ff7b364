package api_test

// Wire-compatibility tests: every message below is built byte by byte with protowire from the
// field tables of wire/smg-grpc.md (field number + wire type), never by marshalling kvgate's
// own types, and then decoded with the generated code. A wrong field number, scalar kind,
// oneof membership or presence in api/proto shows up as a decode difference.

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
	"github.com/kvgate/kvgate/api/vllm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// msg is a tiny protowire builder: each method appends one field as the wire doc tables say.
type msg []byte

func (b msg) varint(num protowire.Number, v uint64) msg {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// int64v encodes a proto int64/int32 the standard way: two's complement as a 10-byte varint
// for negative values (not zig-zag, which would be sint64).
func (b msg) int64v(num protowire.Number, v int64) msg { return b.varint(num, uint64(v)) }

func (b msg) boolv(num protowire.Number, v bool) msg { return b.varint(num, protowire.EncodeBool(v)) }

func (b msg) double(num protowire.Number, v float64) msg {
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

func (b msg) float(num protowire.Number, v float32) msg {
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, math.Float32bits(v))
}

func (b msg) bytes(num protowire.Number, v []byte) msg {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func (b msg) str(num protowire.Number, v string) msg { return b.bytes(num, []byte(v)) }

func (b msg) sub(num protowire.Number, m msg) msg { return b.bytes(num, []byte(m)) }

// packed encodes a packed repeated varint field (proto3's default for repeated scalars).
func (b msg) packed(num protowire.Number, vs ...uint64) msg {
	var p []byte
	for _, v := range vs {
		p = protowire.AppendVarint(p, v)
	}
	return b.bytes(num, p)
}

// packedI64 encodes a packed repeated int64 field.
func (b msg) packedI64(num protowire.Number, vs ...int64) msg {
	u := make([]uint64, len(vs))
	for i, v := range vs {
		u[i] = uint64(v)
	}
	return b.packed(num, u...)
}

func ptr[T any](v T) *T { return &v }

func decode(t *testing.T, data msg, into proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(data, into); err != nil {
		t.Fatalf("unmarshal %T: %v", into, err)
	}
}

func TestKvEventBatchFromWireTables(t *testing.T) {
	// §2.2 KvBlock: 1 block_hash int64, 2 token_ids repeated uint32, 3 block_size int32,
	// 4 lora_id optional int64, 5 cache_level optional int32.
	block1 := msg{}.
		int64v(1, -6148914691236517206). // folded vLLM hash, negative
		packed(2, 1, 2, 300, 70000).
		int64v(3, 4).
		int64v(4, -2)
	// Non-packed repeated token ids must decode too (parsers accept both encodings).
	block2 := msg{}.
		int64v(1, 42).
		varint(2, 5).varint(2, 6).varint(2, 7).varint(2, 8).
		int64v(3, 4).
		int64v(5, 1)
	// §2.2 KvBlocksStored: 1 blocks, 2 parent_block_hash optional int64.
	stored := msg{}.sub(1, block1).sub(1, block2).int64v(2, -9)
	storedRoot := msg{}.sub(1, msg{}.int64v(1, 77).packed(2, 9, 9, 9, 9).int64v(3, 4))
	// Parent explicitly 0 on the wire: presence must be kept (0 is a value, not "unset").
	storedZeroParent := msg{}.sub(1, msg{}.int64v(1, 78).int64v(3, 4)).int64v(2, 0)
	// §2.2 KvBlocksRemoved: 1 block_hashes repeated int64, 2 cache_level optional int32.
	removed := msg{}.packedI64(1, -1, 5, math.MinInt64).int64v(2, 3)
	// §2.2 KvCacheEvent: 1 event_id, oneof data {2 stored, 3 removed, 4 cleared}.
	ev1 := msg{}.varint(1, 1).sub(2, stored)
	ev2 := msg{}.varint(1, 2).sub(3, removed)
	ev3 := msg{}.varint(1, 3).sub(4, msg{})
	ev4 := msg{}.varint(1, 4).sub(2, storedRoot)
	ev5 := msg{}.varint(1, 5).sub(2, storedZeroParent)
	// oneof "last one wins": removed then cleared in one event → cleared.
	ev6 := msg{}.varint(1, 6).sub(3, removed).sub(4, msg{})
	// §2.2 KvEventBatch: 1 sequence_number uint64, 2 timestamp double, 3 events, 4 dp_rank optional int32.
	batch := msg{}.
		varint(1, 1<<40).
		double(2, 1732.5).
		sub(3, ev1).sub(3, ev2).sub(3, ev3).sub(3, ev4).sub(3, ev5).sub(3, ev6).
		int64v(4, 2).
		varint(99, 12345) // a field added by a later upstream version: must be tolerated

	var got common.KvEventBatch
	decode(t, batch, &got)
	want := &common.KvEventBatch{
		SequenceNumber: 1 << 40,
		Timestamp:      1732.5,
		DpRank:         ptr(int32(2)),
		Events: []*common.KvCacheEvent{
			{EventId: 1, Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{
				ParentBlockHash: ptr(int64(-9)),
				Blocks: []*common.KvBlock{
					{BlockHash: -6148914691236517206, TokenIds: []uint32{1, 2, 300, 70000}, BlockSize: 4, LoraId: ptr(int64(-2))},
					{BlockHash: 42, TokenIds: []uint32{5, 6, 7, 8}, BlockSize: 4, CacheLevel: ptr(int32(1))},
				},
			}}},
			{EventId: 2, Data: &common.KvCacheEvent_Removed{Removed: &common.KvBlocksRemoved{
				BlockHashes: []int64{-1, 5, math.MinInt64}, CacheLevel: ptr(int32(3)),
			}}},
			{EventId: 3, Data: &common.KvCacheEvent_Cleared{Cleared: &common.KvCacheCleared{}}},
			{EventId: 4, Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{
				Blocks: []*common.KvBlock{{BlockHash: 77, TokenIds: []uint32{9, 9, 9, 9}, BlockSize: 4}},
			}}},
			{EventId: 5, Data: &common.KvCacheEvent_Stored{Stored: &common.KvBlocksStored{
				ParentBlockHash: ptr(int64(0)),
				Blocks:          []*common.KvBlock{{BlockHash: 78, BlockSize: 4}},
			}}},
			{EventId: 6, Data: &common.KvCacheEvent_Cleared{Cleared: &common.KvCacheCleared{}}},
		},
	}
	if diff := cmp.Diff(want, &got, protocmp.Transform(), protocmp.IgnoreUnknown()); diff != "" {
		t.Errorf("KvEventBatch decode mismatch (-want +got):\n%s", diff)
	}
	// Explicit presence: the root chain has no parent, the zero-parent chain has one.
	if got.Events[3].GetStored().ParentBlockHash != nil {
		t.Errorf("root chain: got parent %d, want unset", got.Events[3].GetStored().GetParentBlockHash())
	}
	if got.Events[4].GetStored().ParentBlockHash == nil {
		t.Errorf("zero-parent chain: got parent unset, want explicit 0")
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Errorf("unknown field 99: got dropped, want kept as unknown bytes")
	}

	// dp_rank absent vs explicit 0.
	var noRank, rank0 common.KvEventBatch
	decode(t, msg{}.varint(1, 5), &noRank)
	decode(t, msg{}.varint(1, 5).int64v(4, 0), &rank0)
	if noRank.DpRank != nil {
		t.Errorf("dp_rank absent: got %d, want unset", noRank.GetDpRank())
	}
	if rank0.DpRank == nil || *rank0.DpRank != 0 {
		t.Errorf("dp_rank 0: got %v, want explicit 0", rank0.DpRank)
	}
}

func TestCommonSmallMessagesFromWireTables(t *testing.T) {
	tests := []struct {
		name string
		data msg
		into proto.Message
		want proto.Message
	}{
		{"SubscribeKvEventsRequest", msg{}.varint(1, 1234), &common.SubscribeKvEventsRequest{},
			&common.SubscribeKvEventsRequest{StartSequenceNumber: 1234}},
		{"GetTokenizerChunk", msg{}.bytes(1, []byte{0x50, 0x4b, 3, 4}).str(2, "ab12"), &common.GetTokenizerChunk{},
			&common.GetTokenizerChunk{Data: []byte{0x50, 0x4b, 3, 4}, Sha256: "ab12"}},
		{"FlushCacheRequest", msg{}.float(1, 2.5), &common.FlushCacheRequest{},
			&common.FlushCacheRequest{TimeoutS: 2.5}},
		{"FlushCacheResponse", msg{}.boolv(1, true).str(2, "ok"), &common.FlushCacheResponse{},
			&common.FlushCacheResponse{Success: true, Message: "ok"}},
		{"StartProfileRequest",
			msg{}.str(1, "/tmp/p").int64v(2, 0).int64v(3, 5).str(4, "CPU").str(4, "GPU").boolv(5, false).boolv(6, true).boolv(7, true),
			&common.StartProfileRequest{},
			&common.StartProfileRequest{OutputDir: ptr("/tmp/p"), StartStep: ptr(int32(0)), NumSteps: ptr(int32(5)),
				Activities: []string{"CPU", "GPU"}, WithStack: ptr(false), RecordShapes: ptr(true), ProfileByStage: true}},
		{"ShmHandle", msg{}.str(1, "seg").varint(2, 64).varint(3, 1024).str(4, "gw"), &common.ShmHandle{},
			&common.ShmHandle{Name: "seg", Offset: 64, Nbytes: 1024, OwnerId: "gw"}},
		{"RemoteTensorHandle", msg{}.str(1, "nixl").bytes(2, []byte{1}).varint(3, 8), &common.RemoteTensorHandle{},
			&common.RemoteTensorHandle{Transport: "nixl", Descriptor_: []byte{1}, Nbytes: 8}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			decode(t, tc.data, tc.into)
			if diff := cmp.Diff(tc.want, tc.into, protocmp.Transform()); diff != "" {
				t.Errorf("decode mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if common.Modality_VIDEO != 3 || common.Modality_AUDIO != 2 || common.Modality_IMAGE != 1 {
		t.Errorf("Modality numbers: got IMAGE=%d AUDIO=%d VIDEO=%d, want 1 2 3",
			common.Modality_IMAGE, common.Modality_AUDIO, common.Modality_VIDEO)
	}
}

func TestVLLMGenerateFromWireTables(t *testing.T) {
	// §3.3 TokenizedInput: 1 original_text, 2 input_ids (packed uint32).
	tok := msg{}.str(1, "hello").packed(2, 101, 7592, 2088)
	// §3.2 SamplingParams.
	logitBiasEntry := msg{}.int64v(1, 5).float(2, -100) // map<int32,float> entry: key 1, value 2
	sp := msg{}.
		float(1, 0). // optional temperature, explicit 0 = greedy: presence must survive
		float(2, 0.9).
		varint(3, 40).
		float(7, 1).
		varint(8, 16).
		str(10, "</s>").
		packed(11, 2, 3).
		boolv(12, true).boolv(13, true).
		varint(15, 1).
		boolv(20, true). // oneof constraint: json_object
		int64v(22, -1).  // logprobs -1 = all, negative int32 → 10-byte varint
		int64v(24, 1234).
		sub(26, logitBiasEntry).
		int64v(27, -1)
	req := msg{}.
		str(1, "req-1").
		sub(2, tok). // oneof input: tokenized
		sub(4, sp).
		boolv(5, true).
		str(8, `{"do_remote_decode":true}`).
		int64v(9, 0) // optional data_parallel_rank explicitly 0
	var got vllm.GenerateRequest
	decode(t, req, &got)
	want := &vllm.GenerateRequest{
		RequestId: "req-1",
		Input:     &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{OriginalText: "hello", InputIds: []uint32{101, 7592, 2088}}},
		SamplingParams: &vllm.SamplingParams{
			Temperature: ptr(float32(0)), TopP: 0.9, TopK: 40, RepetitionPenalty: 1, MaxTokens: ptr(uint32(16)),
			Stop: []string{"</s>"}, StopTokenIds: []uint32{2, 3}, SkipSpecialTokens: true, SpacesBetweenSpecialTokens: true,
			N: 1, Constraint: &vllm.SamplingParams_JsonObject{JsonObject: true}, Logprobs: ptr(int32(-1)), Seed: ptr(int32(1234)),
			LogitBias: map[int32]float32{5: -100}, TruncatePromptTokens: ptr(int32(-1)),
		},
		Stream:               true,
		KvTransferParamsJson: ptr(`{"do_remote_decode":true}`),
		DataParallelRank:     ptr(int32(0)),
	}
	if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
		t.Errorf("vLLM GenerateRequest decode mismatch (-want +got):\n%s", diff)
	}

	// The text member of the same oneof (field 3).
	var txt vllm.GenerateRequest
	decode(t, msg{}.str(1, "r").str(3, "raw prompt"), &txt)
	if got, want := txt.GetText(), "raw prompt"; got != want || txt.GetTokenized() != nil {
		t.Errorf("oneof input text: got %q (tokenized %v), want %q", got, txt.GetTokenized(), want)
	}

	// §3.5 GenerateResponse: oneof response {1 chunk, 2 complete}; no request_id.
	chunk := msg{}.packed(1, 11, 12).varint(2, 3).varint(3, 2).varint(4, 1).
		sub(5, msg{}.bytes(1, f32s(-0.5, -1.25)).packed(2, 11, 12)).
		varint(7, 1)
	var gotChunk vllm.GenerateResponse
	decode(t, msg{}.sub(1, chunk), &gotChunk)
	wantChunk := &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{
		TokenIds: []uint32{11, 12}, PromptTokens: 3, CompletionTokens: 2, CachedTokens: 1, Index: 1,
		OutputLogprobs: &vllm.OutputLogProbs{TokenLogprobs: []float32{-0.5, -1.25}, TokenIds: []uint32{11, 12}},
	}}}
	if diff := cmp.Diff(wantChunk, &gotChunk, protocmp.Transform()); diff != "" {
		t.Errorf("vLLM chunk decode mismatch (-want +got):\n%s", diff)
	}

	complete := msg{}.packed(1, 12).str(2, "stop").varint(3, 3).varint(4, 1).varint(5, 1).
		varint(8, 1).str(11, "\n\n").str(12, "{}")
	var gotComplete vllm.GenerateResponse
	decode(t, msg{}.sub(2, complete), &gotComplete)
	wantComplete := &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: &vllm.GenerateComplete{
		OutputIds: []uint32{12}, FinishReason: "stop", PromptTokens: 3, CompletionTokens: 1, CachedTokens: 1,
		Index: 1, MatchedStop: &vllm.GenerateComplete_MatchedStopStr{MatchedStopStr: "\n\n"}, KvTransferParamsJson: ptr("{}"),
	}}}
	if diff := cmp.Diff(wantComplete, &gotComplete, protocmp.Transform()); diff != "" {
		t.Errorf("vLLM complete decode mismatch (-want +got):\n%s", diff)
	}

	// Input logprobs: first position has no value (InputTokenLogProb.value optional float).
	inLP := msg{}.sub(1, msg{}).sub(1, msg{}.float(1, -2)).packed(2, 1, 2)
	var gotIn vllm.InputLogProbs
	decode(t, inLP, &gotIn)
	if gotIn.TokenLogprobs[0].Value != nil || gotIn.TokenLogprobs[1].GetValue() != -2 {
		t.Errorf("InputLogProbs: got %v, want [unset, -2]", gotIn.TokenLogprobs)
	}
}

func TestVLLMManagementFromWireTables(t *testing.T) {
	tests := []struct {
		name string
		data msg
		into proto.Message
		want proto.Message
	}{
		{"HealthCheckResponse", msg{}.boolv(1, true).str(2, "ok"), &vllm.HealthCheckResponse{},
			&vllm.HealthCheckResponse{Healthy: true, Message: "ok"}},
		{"AbortRequest", msg{}.str(1, "a").str(1, "b"), &vllm.AbortRequest{}, &vllm.AbortRequest{RequestIds: []string{"a", "b"}}},
		{"GetModelInfoResponse",
			msg{}.str(1, "m").boolv(2, true).varint(3, 8192).varint(4, 32000).str(6, "served").str(7, "tok").
				str(9, "LlamaForCausalLM").packed(10, 2, 128001).str(14, `{"temperature":0.6}`),
			&vllm.GetModelInfoResponse{},
			&vllm.GetModelInfoResponse{ModelPath: "m", IsGeneration: true, MaxContextLength: 8192, VocabSize: 32000,
				ServedModelName: "served", TokenizerPath: "tok", Architectures: []string{"LlamaForCausalLM"},
				EosTokenIds: []int32{2, 128001}, DefaultSamplingParamsJson: `{"temperature":0.6}`}},
		{"GetServerInfoResponse",
			msg{}.varint(1, 3).str(6, "NixlConnector").str(7, "kv_both").int64v(9, 2).str(10, "boot:42"),
			&vllm.GetServerInfoResponse{},
			&vllm.GetServerInfoResponse{ActiveRequests: 3, KvConnector: "NixlConnector", KvRole: "kv_both",
				DataParallelSize: 2, ShmNamespaceId: "boot:42"}},
		{"GetLoadsResponse",
			msg{}.str(1, "2026-01-01T00:00:00Z").int64v(3, 1).
				sub(4, msg{}.int64v(1, 0).int64v(2, 3).int64v(3, 4).int64v(4, 7).double(7, 0.25).int64v(11, 256)),
			&vllm.GetLoadsResponse{},
			&vllm.GetLoadsResponse{Timestamp: "2026-01-01T00:00:00Z", DpRankCount: 1, Loads: []*vllm.SchedulerLoad{
				{NumRunningReqs: 3, NumWaitingReqs: 4, NumTotalReqs: 7, TokenUsage: 0.25, MaxRunningRequests: 256}}}},
		{"TensorData inline", msg{}.bytes(1, []byte{1, 2}).packed(2, 2, 1).str(3, "uint32"), &vllm.TensorData{},
			&vllm.TensorData{Payload: &vllm.TensorData_Inline{Inline: []byte{1, 2}}, Shape: []uint32{2, 1}, Dtype: "uint32"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			decode(t, tc.data, tc.into)
			if diff := cmp.Diff(tc.want, tc.into, protocmp.Transform()); diff != "" {
				t.Errorf("decode mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTokenSpeedFromWireTables(t *testing.T) {
	// §4.3 TokenizedInput: input_ids is field 1 here (vLLM: 2).
	tok := msg{}.packed(1, 1, 2, 3).str(2, "abc")
	sp := msg{}.float(1, 0.7).int64v(3, -1).varint(8, 32).varint(9, 0).boolv(13, true).boolv(14, true).
		str(18, `{"type":"object"}`).varint(23, 1<<63)
	req := msg{}.str(1, "ts-1").sub(2, tok).sub(3, sp).boolv(4, true).int64v(5, -1).int64v(6, 2).boolv(8, true).
		sub(11, msg{}.str(1, "10.0.0.1").int64v(2, 8998).int64v(3, 1<<62))
	var got tokenspeed.GenerateRequest
	decode(t, req, &got)
	want := &tokenspeed.GenerateRequest{
		RequestId: "ts-1",
		Tokenized: &tokenspeed.TokenizedInput{InputIds: []uint32{1, 2, 3}, OriginalText: "abc"},
		SamplingParams: &tokenspeed.SamplingParams{
			Temperature: ptr(float32(0.7)), TopK: ptr(int32(-1)), MaxNewTokens: ptr(uint32(32)),
			SkipSpecialTokens: true, SpacesBetweenSpecialTokens: true,
			Constraint:   &tokenspeed.SamplingParams_JsonSchema{JsonSchema: `{"type":"object"}`},
			SamplingSeed: ptr(uint64(1 << 63)),
		},
		ReturnLogprob: true, LogprobStartLen: ptr(int32(-1)), TopLogprobsNum: 2, Stream: true,
		KvBootstrapInfo: &tokenspeed.KvBootstrapInfo{BootstrapHost: "10.0.0.1", BootstrapPort: 8998, BootstrapRoom: 1 << 62},
	}
	if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
		t.Errorf("TokenSpeed GenerateRequest decode mismatch (-want +got):\n%s", diff)
	}

	// The same bytes read as a vLLM TokenizedInput land in the swapped fields: the packed ids
	// (field 1) become original_text and the text "abc" (field 2) reads as packed ids 97 98 99.
	var asVLLM vllm.TokenizedInput
	decode(t, tok, &asVLLM)
	wantVLLM := &vllm.TokenizedInput{OriginalText: "\x01\x02\x03", InputIds: []uint32{'a', 'b', 'c'}}
	if diff := cmp.Diff(wantVLLM, &asVLLM, protocmp.Transform()); diff != "" {
		t.Errorf("TokenSpeed tokenized bytes read as vLLM (-want +got):\n%s", diff)
	}

	// §4.4 GenerateResponse: 1 request_id, oneof {2 chunk, 3 complete}.
	complete := msg{}.packed(1, 9).str(2, "length").varint(3, 3).varint(4, 32).varint(5, 2).varint(7, 128001).varint(9, 2)
	var gotResp tokenspeed.GenerateResponse
	decode(t, msg{}.str(1, "ts-1").sub(3, complete), &gotResp)
	wantResp := &tokenspeed.GenerateResponse{RequestId: "ts-1", Response: &tokenspeed.GenerateResponse_Complete{
		Complete: &tokenspeed.GenerateComplete{OutputIds: []uint32{9}, FinishReason: "length", PromptTokens: 3,
			CompletionTokens: 32, CachedTokens: 2, MatchedStop: &tokenspeed.GenerateComplete_MatchedTokenId{MatchedTokenId: 128001}, Index: 2}}}
	if diff := cmp.Diff(wantResp, &gotResp, protocmp.Transform()); diff != "" {
		t.Errorf("TokenSpeed complete decode mismatch (-want +got):\n%s", diff)
	}
	var gotChunk tokenspeed.GenerateResponse
	decode(t, msg{}.str(1, "x").sub(2, msg{}.packed(1, 5).varint(3, 4).varint(6, 1)), &gotChunk)
	if c := gotChunk.GetChunk(); c == nil || c.CompletionTokens != 4 || c.Index != 1 {
		t.Errorf("TokenSpeed chunk: got %v, want completion_tokens 4 index 1", c)
	}

	// §4.7 SchedulerLoad: TokenSpeed numbering (token_usage at 8, max_running_requests at 7).
	var load tokenspeed.SchedulerLoad
	decode(t, msg{}.int64v(7, 64).double(8, 0.5).sub(12, msg{}.int64v(4, 1000)).int64v(14, 99), &load)
	if load.MaxRunningRequests != 64 || load.TokenUsage != 0.5 || load.GetMemory().GetTokenCapacity() != 1000 || load.NumWaitingUncachedTokens != 99 {
		t.Errorf("TokenSpeed SchedulerLoad: got %v", &load)
	}
	// TensorData: shape 1, dtype 2, inline 3.
	var td tokenspeed.TensorData
	decode(t, msg{}.packed(1, 4).str(2, "bfloat16").bytes(3, []byte{9}), &td)
	if td.Dtype != "bfloat16" || td.GetInline()[0] != 9 || td.Shape[0] != 4 {
		t.Errorf("TokenSpeed TensorData: got %v", &td)
	}
}

func TestSGLangFromWireTables(t *testing.T) {
	sp := msg{}.float(1, 1).float(2, 1).int64v(3, -1).varint(8, 10).str(9, "x").varint(17, 1).boolv(19, true)
	req := msg{}.str(1, "sg").sub(2, msg{}.str(1, "t").packed(2, 4, 5)).sub(4, sp).boolv(17, true).int64v(16, 1).str(15, "lora-a")
	var got sglang.GenerateRequest
	decode(t, req, &got)
	want := &sglang.GenerateRequest{
		RequestId: "sg", Tokenized: &sglang.TokenizedInput{OriginalText: "t", InputIds: []uint32{4, 5}},
		SamplingParams: &sglang.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxNewTokens: ptr(uint32(10)),
			Stop: []string{"x"}, N: 1, IgnoreEos: true},
		Stream: true, DataParallelRank: 1, LoraId: "lora-a",
	}
	if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
		t.Errorf("SGLang GenerateRequest decode mismatch (-want +got):\n%s", diff)
	}
	var resp sglang.GenerateResponse
	decode(t, msg{}.str(1, "sg").sub(2, msg{}.packed(1, 6).varint(3, 5).varint(8, 0).varint(9, 2)), &resp)
	if c := resp.GetChunk(); c == nil || c.CompletionTokens != 5 || c.ReasoningTokens != 2 {
		t.Errorf("SGLang chunk: got %v, want completion 5 reasoning 2", c)
	}
	var done sglang.GenerateResponse
	decode(t, msg{}.str(1, "sg").sub(3, msg{}.str(2, "stop").varint(8, 2).varint(11, 3).varint(12, 1)), &done)
	if c := done.GetComplete(); c == nil || c.GetMatchedTokenId() != 2 || c.Index != 3 || c.ReasoningTokens != 1 {
		t.Errorf("SGLang complete: got %v, want matched token 2 index 3 reasoning 1", c)
	}
	var load sglang.SchedulerLoad
	decode(t, msg{}.double(7, 0.75).int64v(11, 8).sub(16, msg{}.int64v(1, 3)).int64v(17, 5), &load)
	if load.TokenUsage != 0.75 || load.MaxRunningRequests != 8 || load.GetQueues().GetWaiting() != 3 || load.NumWaitingUncachedTokens != 5 {
		t.Errorf("SGLang SchedulerLoad: got %v", &load)
	}
}

// TestServicePaths checks the HTTP/2 method paths and streaming shapes of §1.3.
func TestServicePaths(t *testing.T) {
	type method struct {
		name   string
		stream bool
	}
	tests := []struct {
		desc    grpc.ServiceDesc
		service string
		methods []method
	}{
		{vllm.VllmEngine_ServiceDesc, "vllm.grpc.engine.VllmEngine", []method{
			{"Generate", true}, {"Embed", false}, {"HealthCheck", false}, {"Abort", false}, {"GetModelInfo", false},
			{"GetServerInfo", false}, {"GetLoads", false}, {"GetTokenizer", true}, {"SubscribeKvEvents", true}}},
		{tokenspeed.TokenSpeedScheduler_ServiceDesc, "tokenspeed.grpc.scheduler.TokenSpeedScheduler", []method{
			{"Generate", true}, {"HealthCheck", false}, {"Abort", false}, {"GetModelInfo", false}, {"GetServerInfo", false},
			{"GetLoads", false}, {"FlushCache", false}, {"StartProfile", false}, {"StopProfile", false},
			{"GetTokenizer", true}, {"SubscribeKvEvents", true}}},
		{sglang.SglangScheduler_ServiceDesc, "sglang.grpc.scheduler.SglangScheduler", []method{
			{"Generate", true}, {"Embed", false}, {"HealthCheck", false}, {"Abort", false}, {"GetModelInfo", false},
			{"GetServerInfo", false}, {"GetLoads", false}, {"FlushCache", false}, {"StartProfile", false},
			{"StopProfile", false}, {"GetTokenizer", true}, {"SubscribeKvEvents", true}, {"LoadLoRAAdapter", false},
			{"UnloadLoRAAdapter", false}, {"ListLoadedLoRAAdapters", false}}},
	}
	for _, tc := range tests {
		t.Run(tc.service, func(t *testing.T) {
			if tc.desc.ServiceName != tc.service {
				t.Errorf("service name: got %q, want %q", tc.desc.ServiceName, tc.service)
			}
			got := map[string]bool{}
			for _, m := range tc.desc.Methods {
				got[m.MethodName] = false
			}
			for _, s := range tc.desc.Streams {
				if !s.ServerStreams || s.ClientStreams {
					t.Errorf("%s: got client=%v server=%v streaming, want server-streaming only", s.StreamName, s.ClientStreams, s.ServerStreams)
				}
				got[s.StreamName] = true
			}
			want := map[string]bool{}
			for _, m := range tc.methods {
				want[m.name] = m.stream
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("methods (name → server-streaming) mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if got, want := vllm.VllmEngine_SubscribeKvEvents_FullMethodName, "/vllm.grpc.engine.VllmEngine/SubscribeKvEvents"; got != want {
		t.Errorf("full method: got %q, want %q", got, want)
	}
}

// f32s packs float32 values as a packed repeated float field payload (fixed32 each).
func f32s(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = protowire.AppendFixed32(b, math.Float32bits(v))
	}
	return b
}
