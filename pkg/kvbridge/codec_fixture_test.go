package kvbridge

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// fixtureDir holds the repository copy of the shared fixtures (llm-d-inference-sim captures; see its README.md).
const fixtureDir = "../../testdata/fixtures/kvevents"

// loadFixture returns the multipart messages of one *.jsonl capture.
func loadFixture(t testing.TB, name string) [][][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	var msgs [][][]byte
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec struct {
			Frames []string `json:"frames_b64"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%s line %d: %v", name, i+1, err)
		}
		frames := make([][]byte, len(rec.Frames))
		for j, f := range rec.Frames {
			if frames[j], err = base64.StdEncoding.DecodeString(f); err != nil {
				t.Fatalf("%s line %d frame %d: %v", name, i+1, j, err)
			}
		}
		msgs = append(msgs, frames)
	}
	return msgs
}

// eventCounts tallies decoded events as the README does.
type eventCounts struct {
	Stored, Removed, Cleared, StoredHashes int
}

func countEvents(c *eventCounts, b *indexer.Batch) {
	for _, ev := range b.Events {
		switch ev.Kind {
		case indexer.EventStored:
			c.Stored++
			c.StoredHashes += len(ev.Hashes)
		case indexer.EventRemoved:
			c.Removed++
		case indexer.EventCleared:
			c.Cleared++
		}
	}
}

// cloneBatch deep-copies a decoded batch (decoded slices are reused by the next decode).
func cloneBatch(b *indexer.Batch) indexer.Batch {
	out := *b
	out.Events = make([]indexer.Event, len(b.Events))
	for i, ev := range b.Events {
		ev.Hashes = append([]uint64(nil), ev.Hashes...)
		ev.Tokens = append([]uint32(nil), ev.Tokens...)
		out.Events[i] = ev
	}
	return out
}

func TestDecodeFixturesLive(t *testing.T) {
	tests := []struct {
		file  string
		topic string
		msgs  int
		want  eventCounts
	}{
		{"sim-array-live.jsonl", "kv@127.0.0.1:18001@sim-model", 8, eventCounts{18, 5, 1, 40}},
		{"sim-map-live.jsonl", "kv@127.0.0.1:18002@sim-model", 8, eventCounts{18, 5, 1, 40}},
		{"sim-array-parent-cycle.jsonl", "kv@127.0.0.1:18801@sim-model", 3, eventCounts{3, 2, 0, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			msgs := loadFixture(t, tt.file)
			if len(msgs) != tt.msgs {
				t.Fatalf("messages: got %d, want %d", len(msgs), tt.msgs)
			}
			var got eventCounts
			var b indexer.Batch
			for i, frames := range msgs {
				m, err := ParseLive(frames)
				if err != nil {
					t.Fatalf("message %d: %v", i+1, err)
				}
				if string(m.Topic) != tt.topic {
					t.Errorf("message %d topic: got %q, want %q", i+1, m.Topic, tt.topic)
				}
				if m.Seq != uint64(i+1) {
					t.Errorf("message %d seq: got %d, want %d", i+1, m.Seq, i+1)
				}
				rej, err := decodeBatchRejected(m.Payload, &b)
				if err != nil {
					t.Fatalf("message %d decode: %v", i+1, err)
				}
				if rej != 0 {
					t.Errorf("message %d rejected events: got %d, want 0", i+1, rej)
				}
				if !b.HasDPRank || b.DPRank != 0 {
					t.Errorf("message %d rank: got (%d, %v), want (0, true)", i+1, b.DPRank, b.HasDPRank)
				}
				if b.Timestamp < 1796016800 || b.Timestamp > 1796016900 {
					t.Errorf("message %d ts: got %v, want near 1796016851", i+1, b.Timestamp)
				}
				for j, ev := range b.Events {
					if ev.Kind == indexer.EventStored && len(ev.Tokens) != 16*len(ev.Hashes) {
						t.Errorf("message %d event %d: %d tokens for %d blocks", i+1, j, len(ev.Tokens), len(ev.Hashes))
					}
					if ev.Kind != indexer.EventCleared && ev.Medium != "GPU" {
						t.Errorf("message %d event %d medium: got %q, want GPU", i+1, j, ev.Medium)
					}
					if ev.Kind == indexer.EventRemoved && len(ev.Hashes) != 1 {
						t.Errorf("message %d event %d: removed %d hashes, want 1", i+1, j, len(ev.Hashes))
					}
				}
				countEvents(&got, &b)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("event counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeFixturesShapes checks the specific events the README lists: LoRA at seq 4, the
// first removal at seq 6, the clear at seq 7 (with its exact payload bytes), and the parent
// cycle's re-stored block.
func TestDecodeFixturesShapes(t *testing.T) {
	lora := indexer.Event{
		Kind:      indexer.EventStored,
		Hashes:    []uint64{4625483620616897254, 18043350062859695610, 9780403361130794834},
		BlockSize: 16, LoraID: 1, HasLoraID: true, LoraName: "sim-lora", Medium: "GPU",
	}
	for _, tt := range []struct{ file, seq7hex string }{
		{"sim-array-live.jsonl", "93cb41dac342b6e781869191b0416c6c426c6f636b73436c656172656400"},
		{"sim-map-live.jsonl", "93cb41dac342b6e86a199181a474797065b0416c6c426c6f636b73436c656172656400"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			msgs := loadFixture(t, tt.file)
			var b indexer.Batch
			decode := func(seq int) {
				t.Helper()
				if err := DecodeBatch(msgs[seq-1][2], &b); err != nil {
					t.Fatalf("seq %d: %v", seq, err)
				}
			}
			decode(4)
			got := b.Events[0]
			if diff := cmp.Diff([]uint32{21322, 9986, 25975, 42759}, got.Tokens[:4]); diff != "" {
				t.Errorf("LoRA tokens (-want +got):\n%s", diff)
			}
			got.Tokens = nil
			if diff := cmp.Diff(lora, got); diff != "" {
				t.Errorf("LoRA event (-want +got):\n%s", diff)
			}
			if len(b.Events) != 2 || b.Events[1].HasLoraID || b.Events[1].LoraName != "" {
				t.Errorf("seq 4 second event: got %+v, want a base-model BlockStored", b.Events[1])
			}

			decode(6)
			var kinds []indexer.EventKind
			for _, ev := range b.Events {
				kinds = append(kinds, ev.Kind)
			}
			if n := len(kinds); n != 9 {
				t.Errorf("seq 6 events: got %d, want 9 (4 stored + 5 removed)", n)
			}

			decode(7)
			if diff := cmp.Diff([]indexer.Event{{Kind: indexer.EventCleared}}, b.Events, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("seq 7 (-want +got):\n%s", diff)
			}
			if got := hex.EncodeToString(msgs[6][2]); got != tt.seq7hex {
				t.Errorf("seq 7 payload: got %s, want %s", got, tt.seq7hex)
			}
		})
	}

	t.Run("array seq 6 removal", func(t *testing.T) {
		msgs := loadFixture(t, "sim-array-live.jsonl")
		var b indexer.Batch
		if err := DecodeBatch(msgs[5][2], &b); err != nil {
			t.Fatal(err)
		}
		var first *indexer.Event
		for i := range b.Events {
			if b.Events[i].Kind == indexer.EventRemoved {
				first = &b.Events[i]
				break
			}
		}
		want := indexer.Event{Kind: indexer.EventRemoved, Hashes: []uint64{4170843761274314472}, Medium: "GPU"}
		if first == nil {
			t.Fatal("seq 6 has no BlockRemoved")
		}
		if diff := cmp.Diff(want, *first, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("first removal (-want +got):\n%s", diff)
		}
	})

	t.Run("parent cycle", func(t *testing.T) {
		msgs := loadFixture(t, "sim-array-parent-cycle.jsonl")
		var b indexer.Batch
		if err := DecodeBatch(msgs[2][2], &b); err != nil {
			t.Fatal(err)
		}
		want := []indexer.Event{
			{Kind: indexer.EventRemoved, Hashes: []uint64{11424531917687781530}, Medium: "GPU"},
			{Kind: indexer.EventStored, Hashes: []uint64{2067698922593990494}, Parent: 16575152972265372868, HasParent: true,
				Tokens: seqTokens(100, 16), BlockSize: 16, Medium: "GPU"},
		}
		if diff := cmp.Diff(want, b.Events, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("seq 3 (-want +got):\n%s", diff)
		}
	})
}

func seqTokens(from uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

// readmeFirstBatches is the README's "Decoded: the first 3 batches of each live file", which
// both formats share except for ts. Parent 0 (array) and nil (map) both decode to no parent.
func readmeFirstBatches() []indexer.Batch {
	st := func(hashes []uint64, parent uint64, tokens ...uint32) indexer.Event {
		return indexer.Event{Kind: indexer.EventStored, Hashes: hashes, Parent: parent, HasParent: parent != 0,
			Tokens: tokens, BlockSize: 16, Medium: "GPU"}
	}
	return []indexer.Batch{
		{Seq: 1, HasDPRank: true, Events: []indexer.Event{
			st([]uint64{17717660576376359018, 13990106465266975928, 5275653614411708908}, 0,
				21322, 9986, 25975, 42759, 3264, 4847, 35219, 6268, 24065, 38293, 3901, 33355, 14170, 2557, 5732, 28519, 27505, 4678, 15872, 6044, 36213, 27921, 3973, 37157, 8213, 14730, 41428, 41219, 38307, 4154, 37921, 38474, 26096, 3349, 14588, 3152, 36581, 8827, 19079, 27568, 9553, 35534, 7819, 37515, 20316, 36817, 44795, 11944),
			st([]uint64{2705369253636074847}, 5275653614411708908,
				6853, 38215, 37534, 41971, 12412, 24505, 6485, 35996, 46768, 4214, 37086, 4006, 40667, 13597, 32633, 44690),
		}},
		{Seq: 2, HasDPRank: true, Events: []indexer.Event{
			st([]uint64{10086229144282266995}, 13990106465266975928,
				2669, 43892, 5186, 36674, 37653, 20661, 22390, 45666, 23049, 39052, 32650, 38104, 29997, 4606, 6233, 17790),
			st([]uint64{6473281416638899547}, 10086229144282266995,
				31170, 45781, 43625, 4359, 4076, 48017, 46072, 20390, 42510, 37976, 44745, 29305, 18751, 47064, 25383, 43920),
			st([]uint64{4170843761274314472}, 13990106465266975928,
				15222, 9990, 5538, 11648, 10015, 15301, 43256, 15391, 890, 31882, 38708, 12050, 17319, 18576, 368, 9647),
			st([]uint64{16622580933075565817, 17453737223426116824}, 2705369253636074847,
				34946, 28122, 20687, 30613, 38475, 29799, 23796, 19745, 16380, 11881, 45909, 16097, 5464, 37745, 19777, 34519, 32547, 22610, 47904, 29514, 18970, 40008, 4897, 7837, 33650, 27502, 10910, 49719, 22516, 10060, 32144, 27736),
		}},
		{Seq: 3, HasDPRank: true, Events: []indexer.Event{
			st([]uint64{3276980621235233444, 6889975409960779898}, 0,
				22385, 39469, 3545, 6809, 115, 37244, 10013, 35267, 6749, 23929, 40321, 1771, 4708, 13728, 40343, 24756, 9835, 41676, 16631, 22866, 39570, 23965, 31173, 8150, 7659, 32086, 30639, 31583, 31808, 20537, 5728, 9544),
			st([]uint64{10896956674916727024}, 0,
				793698452, 3421433492, 3396381853, 1869682218, 1477258766, 3586351101, 2938279028, 240225341, 3756115851, 2633133738, 2938279028, 1010175447, 1385456831, 3410955692, 1788406269, 2312110321),
			st([]uint64{5831617464545406942}, 10896956674916727024,
				2405427592, 1690122482, 1004207532, 3782373463, 3666714845, 3454761558, 3845842264, 765179, 1200011912, 1041904410, 2513735939, 2329261444, 3048688199, 3487220540, 1739624234, 2938279028),
		}},
	}
}

func TestDecodeFixturesFirstBatches(t *testing.T) {
	for _, tt := range []struct {
		file string
		ts   []float64
	}{
		{"sim-array-live.jsonl", []float64{1796016851.6057515, 1796016852.6064098, 1796016854.607402}},
		{"sim-map-live.jsonl", []float64{1796016851.6147234, 1796016852.615345, 1796016854.6159356}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			msgs := loadFixture(t, tt.file)
			want := readmeFirstBatches()
			for i := range want {
				want[i].Timestamp = tt.ts[i]
				m, err := ParseLive(msgs[i])
				if err != nil {
					t.Fatal(err)
				}
				var b indexer.Batch
				if err := DecodeBatch(m.Payload, &b); err != nil {
					t.Fatalf("message %d: %v", i+1, err)
				}
				b.Seq = m.Seq
				if diff := cmp.Diff(want[i], b); diff != "" {
					t.Errorf("message %d (-want +got):\n%s", i+1, diff)
				}
			}
		})
	}
}

// TestDecodeFixturesFormatsAgree: both instances report identical BlockStored events in every
// batch (README), so array and map decoding must agree.
func TestDecodeFixturesFormatsAgree(t *testing.T) {
	arr, mp := loadFixture(t, "sim-array-live.jsonl"), loadFixture(t, "sim-map-live.jsonl")
	stored := func(b *indexer.Batch) []indexer.Event {
		var out []indexer.Event
		for _, ev := range cloneBatch(b).Events {
			if ev.Kind == indexer.EventStored {
				out = append(out, ev)
			}
		}
		return out
	}
	var a, m indexer.Batch
	for i := range arr {
		if err := DecodeBatch(arr[i][2], &a); err != nil {
			t.Fatal(err)
		}
		if err := DecodeBatch(mp[i][2], &m); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stored(&a), stored(&m)); diff != "" {
			t.Errorf("batch %d stored events differ (-array +map):\n%s", i+1, diff)
		}
	}
}

func TestDecodeFixturesReplay(t *testing.T) {
	tests := []struct {
		file     string
		live     string
		from     uint64
		batches  int
		want     eventCounts
		wantFrom uint64
	}{
		{"sim-array-replay-from1.jsonl", "sim-array-live.jsonl", 1, 8, eventCounts{18, 5, 1, 40}, 1},
		{"sim-array-replay-from4.jsonl", "sim-array-live.jsonl", 4, 5, eventCounts{9, 5, 1, 0}, 4},
		{"sim-array-replay-from1000000.jsonl", "sim-array-live.jsonl", 1000000, 0, eventCounts{}, 0},
		{"sim-map-replay-from1.jsonl", "sim-map-live.jsonl", 1, 8, eventCounts{18, 5, 1, 40}, 1},
		{"sim-map-replay-from4.jsonl", "sim-map-live.jsonl", 4, 5, eventCounts{9, 5, 1, 0}, 4},
		{"sim-map-replay-from1000000.jsonl", "sim-map-live.jsonl", 1000000, 0, eventCounts{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			msgs := loadFixture(t, tt.file)
			live := loadFixture(t, tt.live)
			if len(msgs) != tt.batches+1 {
				t.Fatalf("lines: got %d, want %d", len(msgs), tt.batches+1)
			}
			var got eventCounts
			var b indexer.Batch
			for i, frames := range msgs {
				if len(frames) != 4 {
					t.Fatalf("line %d: %d frames, want 4", i+1, len(frames))
				}
				r, err := ParseReplayReply(frames)
				if err != nil {
					t.Fatalf("line %d: %v", i+1, err)
				}
				if i == len(msgs)-1 {
					want := ReplayMessage{Topic: []byte{}, Seq: ReplayEndSeq, Payload: []byte{}, End: true}
					if diff := cmp.Diff(want, r); diff != "" {
						t.Errorf("sentinel (-want +got):\n%s", diff)
					}
					continue
				}
				if r.End {
					t.Fatalf("line %d: early terminator", i+1)
				}
				if want := tt.wantFrom + uint64(i); r.Seq != want {
					t.Errorf("line %d seq: got %d, want %d", i+1, r.Seq, want)
				}
				// Frames 1..3 are byte-identical to the live message of the same seq.
				lm := live[r.Seq-1]
				for f := 0; f < 3; f++ {
					if !bytes.Equal(frames[f+1], lm[f]) {
						t.Errorf("line %d frame %d differs from the live message", i+1, f+1)
					}
				}
				if err := DecodeBatch(r.Payload, &b); err != nil {
					t.Fatalf("line %d decode: %v", i+1, err)
				}
				countEvents(&got, &b)
			}
			if tt.want.StoredHashes == 0 {
				got.StoredHashes = 0 // the README states hash totals only for the full files
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("event counts (-want +got):\n%s", diff)
			}
		})
	}
}
