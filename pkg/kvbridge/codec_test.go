package kvbridge

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

var equateEmpty = cmpopts.EquateEmpty()

// sampleBatch covers every field: parent, no parent, LoRA, medium, removal, clear, large hashes.
func sampleBatch() indexer.Batch {
	return indexer.Batch{
		Timestamp: 1796016851.25, DPRank: 2, HasDPRank: true,
		Events: []indexer.Event{
			{Kind: indexer.EventStored, Hashes: []uint64{math.MaxUint64, 1 << 63, 7}, Tokens: seqTokens(70000, 12),
				BlockSize: 4, Medium: "GPU"},
			{Kind: indexer.EventStored, Hashes: []uint64{42}, Parent: 7, HasParent: true, Tokens: []uint32{1, 2, 3, math.MaxUint32},
				BlockSize: 4, LoraID: -3, HasLoraID: true, LoraName: "adapter-a", Medium: "CPU"},
			{Kind: indexer.EventRemoved, Hashes: []uint64{1 << 63, 5}, Medium: "GPU"},
			{Kind: indexer.EventRemoved, Hashes: []uint64{9}},
			{Kind: indexer.EventCleared},
		},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, mapEvents := range []bool{false, true} {
		for _, bytesHashes := range []bool{false, true} {
			for _, env := range []EnvelopeFormat{Envelope3, Envelope2, EnvelopeMap} {
				for _, zeroParent := range []bool{false, true} {
					opts := EncodeOptions{MapEvents: mapEvents, BytesHashes: bytesHashes, Envelope: env, ZeroParent: zeroParent}
					if env == EnvelopeMap && zeroParent {
						opts.RankKey = "attn_dp_rank"
					}
					t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
						in := sampleBatch()
						payload := EncodeBatch(nil, &in, opts)
						var got indexer.Batch
						rej, err := decodeBatchRejected(payload, &got)
						if err != nil || rej != 0 {
							t.Fatalf("decode: got (%d, %v), want (0, nil)", rej, err)
						}
						want := in
						if env == Envelope2 {
							want.DPRank, want.HasDPRank = 0, false
						}
						if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
							t.Errorf("round trip (-want +got):\n%s", diff)
						}
					})
				}
			}
		}
	}
}

// TestEncodeFormatsCrossCheck: the same batch encoded as array and as map events decodes to
// equal batches, and the payloads really differ in shape.
func TestEncodeFormatsCrossCheck(t *testing.T) {
	in := sampleBatch()
	in.HasDPRank, in.DPRank = false, 0
	arr := EncodeBatch(nil, &in, EncodeOptions{})
	mp := EncodeBatch(nil, &in, EncodeOptions{MapEvents: true, BytesHashes: true})
	if string(arr) == string(mp) {
		t.Fatal("array and map payloads are identical")
	}
	var a, m indexer.Batch
	if err := DecodeBatch(arr, &a); err != nil {
		t.Fatal(err)
	}
	if err := DecodeBatch(mp, &m); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cloneBatch(&a), cloneBatch(&m), equateEmpty); diff != "" {
		t.Errorf("array vs map (-array +map):\n%s", diff)
	}
	if a.HasDPRank {
		t.Error("nil rank decoded as set")
	}
}

// TestEncodeGolden pins the exact bytes of a small batch in vLLM's array layout and map layout.
func TestEncodeGolden(t *testing.T) {
	b := indexer.Batch{Timestamp: 1.5, HasDPRank: true, Events: []indexer.Event{
		{Kind: indexer.EventStored, Hashes: []uint64{1 << 63}, Tokens: []uint32{1, 300}, BlockSize: 2, Medium: "GPU"},
	}}
	tests := []struct {
		name string
		opts EncodeOptions
		want string
	}{
		{"array", EncodeOptions{},
			// [1.5, [["BlockStored", [2^63], nil, [1, 300], 2, nil, "GPU", nil]], 0]
			"93" + "cb3ff8000000000000" + "91" + "98" + "ab426c6f636b53746f726564" + "91cf8000000000000000" + "c0" +
				"9201cd012c" + "02" + "c0" + "a3475055" + "c0" + "00"},
		{"map events, zero parent, 2-element envelope", EncodeOptions{MapEvents: true, ZeroParent: true, Envelope: Envelope2},
			"92" + "cb3ff8000000000000" + "91" + "88" + "a474797065" + "ab426c6f636b53746f726564" +
				"ac626c6f636b5f686173686573" + "91cf8000000000000000" +
				"b1706172656e745f626c6f636b5f68617368" + "00" +
				"a9746f6b656e5f696473" + "9201cd012c" +
				"aa626c6f636b5f73697a65" + "02" +
				"a76c6f72615f6964" + "c0" + "a66d656469756d" + "a3475055" + "a96c6f72615f6e616d65" + "c0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hex.EncodeToString(EncodeBatch(nil, &b, tt.opts))
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// mp is a tiny msgpack builder for hand-made payloads.
type mp []byte

func (m mp) arr(n uint32) mp    { return msgp.AppendArrayHeader(m, n) }
func (m mp) mapHdr(n uint32) mp { return msgp.AppendMapHeader(m, n) }
func (m mp) str(s string) mp    { return msgp.AppendString(m, s) }
func (m mp) u(v uint64) mp      { return msgp.AppendUint64(m, v) }
func (m mp) i(v int64) mp       { return msgp.AppendInt64(m, v) }
func (m mp) f(v float64) mp     { return msgp.AppendFloat64(m, v) }
func (m mp) nil_() mp           { return msgp.AppendNil(m) }
func (m mp) bin(b []byte) mp    { return msgp.AppendBytes(m, b) }
func (m mp) raw(b ...byte) mp   { return append(m, b...) }
func (m mp) tokens(n int) mp {
	m = m.arr(uint32(n))
	for i := range n {
		m = m.u(uint64(i + 1))
	}
	return m
}

func TestDecodeVariants(t *testing.T) {
	stored := func(hashes []uint64, parent uint64, ntok, bs int) indexer.Event {
		toks := make([]uint32, ntok)
		for i := range toks {
			toks[i] = uint32(i + 1)
		}
		return indexer.Event{Kind: indexer.EventStored, Hashes: hashes, Parent: parent, HasParent: parent != 0, Tokens: toks, BlockSize: bs}
	}
	digest := make([]byte, 32)
	digest[31], digest[24] = 0x05, 0x80
	tests := []struct {
		name     string
		payload  mp
		want     indexer.Batch
		rejected int
	}{
		{
			name:    "array event, only required prefix (SGLang old), 2-element envelope",
			payload: mp{}.arr(2).f(1).arr(1).arr(5).str("BlockStored").arr(1).u(9).nil_().tokens(2).u(2),
			want:    indexer.Batch{Timestamp: 1, Events: []indexer.Event{stored([]uint64{9}, 0, 2, 2)}},
		},
		{
			name: "array event with extra trailing fields and nested extra_keys",
			payload: mp{}.arr(3).f(1).arr(1).arr(14).str("BlockStored").arr(1).u(9).u(3).tokens(2).u(2).nil_().str("GPU").nil_().
				arr(1).arr(2).arr(2).str("mm").u(0).bin([]byte{1, 2}).u(0).str("full_attention").u(4096).str("LOCAL").str("x").
				i(1),
			want: indexer.Batch{Timestamp: 1, DPRank: 1, HasDPRank: true, Events: []indexer.Event{
				func() indexer.Event {
					e := stored([]uint64{9}, 3, 2, 2)
					e.Medium, e.Extra = "GPU", []uint64{indexer.ExtraKeysHash("mm", "\x01\x02")}
					return e
				}()}},
		},
		{
			name: "map event keys in any order, unknown keys, absent parent",
			payload: mp{}.arr(3).f(2).arr(1).mapHdr(6).str("token_ids").tokens(4).str("extra_keys").arr(1).mapHdr(1).str("k").arr(0).
				str("block_size").u(2).str("block_hashes").arr(2).u(1).u(2).str("session_id").str("s").str("type").str("BlockStored").
				nil_(),
			want: indexer.Batch{Timestamp: 2, Events: []indexer.Event{stored([]uint64{1, 2}, 0, 4, 2)}},
		},
		{
			name: "map envelope with attn_dp_rank and unknown key",
			payload: mp{}.mapHdr(4).str("x").arr(1).u(1).str("events").arr(1).mapHdr(1).str("type").str("AllBlocksCleared").
				str("attn_dp_rank").u(3).str("ts").f(5),
			want: indexer.Batch{Timestamp: 5, DPRank: 3, HasDPRank: true, Events: []indexer.Event{{Kind: indexer.EventCleared}}},
		},
		{
			name: "int families and bin hashes fold to 64 bits",
			payload: mp{}.arr(3).f(0).arr(1).arr(3).str("BlockRemoved").
				arr(7).i(-1).raw(0xd0, 0x80).raw(0xcd, 0x01, 0x00).bin(digest).bin([]byte{0x01, 0x02}).str("\x00\x00\x00\x00\x00\x00\x00\x00\x07").raw(0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe).
				str("DISK").
				i(0),
			want: indexer.Batch{HasDPRank: true, Events: []indexer.Event{{Kind: indexer.EventRemoved, Medium: "DISK",
				Hashes: []uint64{math.MaxUint64, uint64(1<<64 - 128), 256, 0x8000000000000005, 0x0102, 7, math.MaxUint64 - 1}}}},
		},
		{
			name: "parent 0 and lora_id negative",
			payload: mp{}.arr(3).f(0).arr(1).arr(8).str("BlockStored").arr(1).u(9).raw(0xcf, 0, 0, 0, 0, 0, 0, 0, 0).tokens(1).u(1).
				i(-2).nil_().str("l").nil_(),
			want: indexer.Batch{HasDPRank: false, Events: []indexer.Event{
				func() indexer.Event {
					e := stored([]uint64{9}, 0, 1, 1)
					e.LoraID, e.HasLoraID, e.LoraName = -2, true, "l"
					return e
				}()}},
		},
		{
			name: "token length mismatch rejects only that event",
			payload: mp{}.arr(3).f(0).arr(3).
				arr(5).str("BlockStored").arr(2).u(1).u(2).nil_().tokens(3).u(2).
				arr(2).str("BlockRemoved").arr(1).u(4).
				arr(5).str("BlockStored").arr(1).u(5).nil_().tokens(2).u(2).
				nil_(),
			want: indexer.Batch{Events: []indexer.Event{
				{Kind: indexer.EventRemoved, Hashes: []uint64{4}},
				stored([]uint64{5}, 0, 2, 2)}},
			rejected: 1,
		},
		{
			name: "wrong field type, zero block size, missing fields and untagged map are rejected; unknown tag skipped",
			payload: mp{}.arr(3).f(0).arr(7).
				arr(5).str("BlockStored").str("not-an-array").nil_().tokens(2).u(2).
				arr(5).str("BlockStored").arr(0).nil_().arr(0).u(0).
				arr(4).str("BlockStored").arr(0).nil_().arr(0).
				arr(1).str("BlockRemoved").
				mapHdr(1).str("block_hashes").arr(0).
				arr(2).str("FutureEvent").arr(1).u(1).
				arr(1).str("AllBlocksCleared").
				nil_(),
			want:     indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventCleared}}},
			rejected: 5,
		},
		{
			name:     "negative token id rejects the event",
			payload:  mp{}.arr(3).f(0).arr(1).arr(5).str("BlockStored").arr(1).u(1).nil_().arr(1).i(-1).u(1).nil_(),
			want:     indexer.Batch{},
			rejected: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got indexer.Batch
			rej, err := decodeBatchRejected(tt.payload, &got)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if rej != tt.rejected {
				t.Errorf("rejected: got %d, want %d", rej, tt.rejected)
			}
			if diff := cmp.Diff(tt.want, got, equateEmpty); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	deep := mp{}.arr(3).f(0).arr(1).arr(9).str("BlockStored").arr(0).nil_().arr(0).u(1).nil_().nil_().nil_()
	for range 200 {
		deep = deep.arr(1)
	}
	deep = deep.nil_().nil_()
	tests := []struct {
		name    string
		payload mp
	}{
		{"empty", mp{}},
		{"scalar envelope", mp{}.u(1)},
		{"short envelope", mp{}.arr(1).f(0)},
		{"truncated", mp{}.arr(3).f(0).arr(2).arr(1).str("AllBlocksCleared")},
		{"trailing bytes", mp{}.arr(2).f(0).arr(0).u(1)},
		{"events not an array", mp{}.arr(2).f(0).str("x")},
		{"4-billion-element events header", mp{}.arr(2).f(0).raw(0xdd, 0xff, 0xff, 0xff, 0xff)},
		{"4-billion-element hashes header", mp{}.arr(2).f(0).arr(1).arr(5).str("BlockStored").raw(0xdd, 0xff, 0xff, 0xff, 0xff)},
		{"4-billion-element map skipped", mp{}.mapHdr(2).str("junk").raw(0xdf, 0xff, 0xff, 0xff, 0xff)},
		{"4-GB string", mp{}.arr(2).f(0).arr(1).raw(0xdb, 0xff, 0xff, 0xff, 0xff)},
		{"deep nesting", deep},
		{"map envelope without events", mp{}.mapHdr(1).str("ts").f(0)},
		{"rank out of range", mp{}.arr(3).f(0).arr(0).u(1 << 40)},
		{"rank of wrong type", mp{}.arr(3).f(0).arr(0).str("0")},
		{"invalid lead byte", mp{}.arr(2).f(0).arr(1).raw(0xc1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b indexer.Batch
			if err := DecodeBatch(tt.payload, &b); !errors.Is(err, ErrMalformed) {
				t.Errorf("got error %v, want one wrapping ErrMalformed", err)
			}
			if cap(b.Events) > 16 {
				t.Errorf("events capacity grew to %d on hostile input", cap(b.Events))
			}
		})
	}
}

// TestDecodeTruncatedFixtures: every strict prefix of every fixture payload is an error, never a
// panic or a success.
func TestDecodeTruncatedFixtures(t *testing.T) {
	var b indexer.Batch
	for _, file := range []string{"sim-array-live.jsonl", "sim-map-live.jsonl"} {
		for i, frames := range loadFixture(t, file) {
			p := frames[2]
			for n := 0; n < len(p); n++ {
				if err := DecodeBatch(p[:n], &b); err == nil {
					t.Fatalf("%s message %d truncated to %d/%d bytes: got nil error", file, i+1, n, len(p))
				}
			}
		}
	}
}

func TestDecodeReusesSlices(t *testing.T) {
	msgs := loadFixture(t, "sim-array-live.jsonl")
	var b indexer.Batch
	for _, m := range msgs { // warm up: grow every slot to the largest shape
		if err := DecodeBatch(m[2], &b); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(50, func() {
		for _, m := range msgs {
			if err := DecodeBatch(m[2], &b); err != nil {
				t.Fatal(err)
			}
		}
	})
	// The LoRA batch (seq 4) interns "sim-lora" in a slot that held a different name in other
	// batches at most once per pass; everything else must be allocation-free.
	if allocs > 1 {
		t.Errorf("allocations per pass over 8 fixture batches: got %v, want ≤ 1", allocs)
	}
}

func TestParseSeq(t *testing.T) {
	tests := []struct {
		in      []byte
		want    uint64
		wantErr bool
	}{
		{[]byte{0, 0, 0, 0, 0, 0, 1, 2}, 258, false},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ReplayEndSeq, false},
		{[]byte{1, 2, 3}, 0, true},
		{make([]byte, 9), 0, true},
		{nil, 0, true},
	}
	for _, tt := range tests {
		got, err := parseSeq(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSeq(%x): got (%d, %v), want (%d, err=%v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	if got := AppendSeq(nil, 258); string(got) != "\x00\x00\x00\x00\x00\x00\x01\x02" {
		t.Errorf("AppendSeq: got %x", got)
	}
}

func TestParseLive(t *testing.T) {
	seq := AppendSeq(nil, 5)
	tests := []struct {
		name    string
		frames  [][]byte
		want    LiveMessage
		wantErr bool
	}{
		{"ok", [][]byte{[]byte("t"), seq, []byte{0x90}}, LiveMessage{Topic: []byte("t"), Seq: 5, Payload: []byte{0x90}}, false},
		{"two frames", [][]byte{seq, []byte{0x90}}, LiveMessage{}, true},
		{"four frames", [][]byte{nil, nil, seq, []byte{0x90}}, LiveMessage{}, true},
		{"short seq", [][]byte{nil, []byte{1}, nil}, LiveMessage{}, true},
		{"non-UTF-8 topic", [][]byte{{0xff, 0xfe}, seq, nil}, LiveMessage{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLive(tt.frames)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err: got %v, want error=%v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if diff := cmp.Diff(tt.want, got, equateEmpty); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseReplayReply(t *testing.T) {
	seq := AppendSeq(nil, 7)
	end := AppendSeq(nil, ReplayEndSeq)
	e := []byte{}
	tests := []struct {
		name    string
		frames  [][]byte
		want    ReplayMessage
		wantErr bool
	}{
		{"dealer, no topic", [][]byte{e, seq, []byte("p")}, ReplayMessage{Seq: 7, Payload: []byte("p")}, false},
		{"dealer, topic", [][]byte{e, []byte("t"), seq, []byte("p")}, ReplayMessage{Topic: []byte("t"), Seq: 7, Payload: []byte("p")}, false},
		{"req, no topic", [][]byte{seq, []byte("p")}, ReplayMessage{Seq: 7, Payload: []byte("p")}, false},
		{"req, topic", [][]byte{[]byte("t"), seq, []byte("p")}, ReplayMessage{Topic: []byte("t"), Seq: 7, Payload: []byte("p")}, false},
		{"terminator, no topic", [][]byte{e, end, e}, ReplayMessage{Seq: ReplayEndSeq, Payload: e, End: true}, false},
		{"terminator, topic", [][]byte{e, e, end, e}, ReplayMessage{Topic: e, Seq: ReplayEndSeq, Payload: e, End: true}, false},
		{"one frame", [][]byte{seq}, ReplayMessage{}, true},
		{"five frames", [][]byte{e, e, e, seq, e}, ReplayMessage{}, true},
		{"bad seq", [][]byte{e, []byte{1}, e}, ReplayMessage{}, true},
		{"non-UTF-8 topic", [][]byte{e, {0xc3, 0x28}, seq, e}, ReplayMessage{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseReplayReply(tt.frames)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err: got %v, want error=%v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, equateEmpty); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFoldAndDigest(t *testing.T) {
	for _, h := range []uint64{0, 1, 1 << 63, math.MaxUint64, 0x0123456789abcdef} {
		d := DeriveDigest(h)
		if got := foldHashBytes(d[:]); got != h {
			t.Errorf("foldHashBytes(DeriveDigest(%#x)): got %#x", h, got)
		}
	}
	if got := foldHashBytes([]byte{1, 2, 3}); got != 0x010203 {
		t.Errorf("short digest: got %#x, want 0x010203", got)
	}
	if got := foldHashBytes(nil); got != 0 {
		t.Errorf("empty digest: got %#x, want 0", got)
	}
}
