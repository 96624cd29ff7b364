package kvbridge

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// FuzzDecodeBatch: no input panics or grows memory beyond the input; every accepted payload
// re-encodes (array and map forms) to one that decodes to the same batch.
func FuzzDecodeBatch(f *testing.F) {
	for _, file := range []string{"sim-array-live.jsonl", "sim-map-live.jsonl", "sim-array-parent-cycle.jsonl"} {
		for _, frames := range loadFixture(f, file) {
			f.Add(frames[2])
		}
	}
	s := sampleBatch()
	f.Add(EncodeBatch(nil, &s, EncodeOptions{MapEvents: true, BytesHashes: true, Envelope: EnvelopeMap}))
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var b indexer.Batch
		rank, hasRank, peekErr := peekRank(payload)
		if err := DecodeBatch(payload, &b); err != nil {
			return
		}
		if peekErr != nil || hasRank != b.HasDPRank || rank != b.DPRank {
			t.Fatalf("peekRank: got (%d, %v, %v), decoded rank (%d, %v)", rank, hasRank, peekErr, b.DPRank, b.HasDPRank)
		}
		if len(b.Events) > len(payload) {
			t.Fatalf("%d events from %d bytes", len(b.Events), len(payload))
		}
		want := cloneBatch(&b)
		for _, opts := range []EncodeOptions{{}, {MapEvents: true, BytesHashes: true, Envelope: EnvelopeMap}} {
			enc := EncodeBatch(nil, &want, opts)
			var got indexer.Batch
			rej, err := decodeBatchRejected(enc, &got)
			if err != nil || rej != 0 {
				t.Fatalf("re-decode with %+v: got (%d, %v), want (0, nil)", opts, rej, err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateNaNs()); diff != "" {
				t.Fatalf("re-decode with %+v (-want +got):\n%s", opts, diff)
			}
		}
	})
}

// FuzzParseFrames: the live and replay frame parsers never panic, and a parsed replay
// terminator always has the all-ones sequence.
func FuzzParseFrames(f *testing.F) {
	for _, file := range []string{"sim-array-replay-from4.jsonl", "sim-map-replay-from1000000.jsonl"} {
		for _, fr := range loadFixture(f, file) {
			f.Add(uint8(len(fr)), fr[0], fr[1], fr[2], fr[3])
		}
	}
	for _, fr := range loadFixture(f, "sim-array-live.jsonl")[:2] {
		f.Add(uint8(3), fr[0], fr[1], fr[2], []byte(nil))
	}
	f.Fuzz(func(t *testing.T, n uint8, a, b, c, d []byte) {
		frames := [][]byte{a, b, c, d}[:int(n)%5]
		if m, err := ParseReplayReply(frames); err == nil && m.End != (m.Seq == ReplayEndSeq) {
			t.Fatalf("End %v for seq %#x", m.End, m.Seq)
		}
		if m, err := ParseLive(frames); err == nil && len(frames) != 3 {
			t.Fatalf("live message accepted with %d frames: %+v", len(frames), m)
		}
	})
}
