package kvbridge

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	zmq "github.com/pebbe/zmq4"

	"github.com/kvgate/kvgate/internal/testutil/zmqtest"
	"github.com/kvgate/kvgate/pkg/indexer"
)

func TestPublisherLiveFrames(t *testing.T) {
	port := freePorts(t, 2)
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://*:" + strconv.Itoa(port), Topic: "kv@h:1@m", Rank: 1, StartSeq: 5})
	if ep, _ := p.Endpoints(); ep != tcpEP(port+1) && ep != "tcp://0.0.0.0:"+strconv.Itoa(port+1) {
		t.Errorf("rank 1 PUB endpoint: got %s, want port %d", ep, port+1)
	}
	sub := zmqtest.Socket(t, zmq.SUB)
	if err := sub.SetSubscribe("kv@"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Connect(tcpEP(port + 1)); err != nil {
		t.Fatal(err)
	}
	last := syncSub(t, p, sub)
	if last < 5 {
		t.Errorf("seq below StartSeq: %d", last)
	}
	in := storedBatch(77, 76)
	seq, err := p.Publish(in)
	if err != nil {
		t.Fatal(err)
	}
	if seq != last+1 {
		t.Errorf("seq: got %d, want %d", seq, last+1)
	}
	msg := mustRecv(t, sub)
	if len(msg) != 3 {
		t.Fatalf("frames: got %d, want 3", len(msg))
	}
	m, err := ParseLive(msg)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Topic) != "kv@h:1@m" || m.Seq != seq {
		t.Errorf("got topic %q seq %d, want kv@h:1@m %d", m.Topic, m.Seq, seq)
	}
	var got indexer.Batch
	if err := DecodeBatch(m.Payload, &got); err != nil {
		t.Fatal(err)
	}
	want := *in
	want.DPRank, want.HasDPRank = 1, true // the publisher fills its rank, as vLLM does
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
}

// replayFrom asks p's ROUTER for replay from start and returns the replies up to and
// including the terminator, with the raw frame counts.
func replayFrom(t *testing.T, dealer *zmq.Socket, start uint64) (msgs []ReplayMessage, frames []int) {
	t.Helper()
	if _, err := dealer.SendMessage([]byte{}, AppendSeq(nil, start)); err != nil {
		t.Fatal(err)
	}
	for {
		raw := mustRecv(t, dealer)
		m, err := ParseReplayReply(raw)
		if err != nil {
			t.Fatal(err)
		}
		msgs, frames = append(msgs, m), append(frames, len(raw))
		if m.End {
			return msgs, frames
		}
	}
}

func seqsOf(msgs []ReplayMessage) []uint64 {
	var out []uint64
	for _, m := range msgs {
		out = append(out, m.Seq)
	}
	return out
}

func TestPublisherReplay(t *testing.T) {
	for _, topicFrame := range []bool{false, true} {
		t.Run(map[bool]string{false: "without topic frame", true: "with topic frame"}[topicFrame], func(t *testing.T) {
			p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*",
				Topic: "tp", History: 4, ReplayTopicFrame: topicFrame})
			for i := range 6 { // seqs 0..5; the history keeps 2..5
				if _, err := p.Publish(storedBatch(uint64(100+i), 0)); err != nil {
					t.Fatal(err)
				}
			}
			_, rep := p.Endpoints()
			dealer := zmqtest.Socket(t, zmq.DEALER)
			if err := dealer.Connect(rep); err != nil {
				t.Fatal(err)
			}
			// A malformed request (no delimiter) is not answered; the next one is.
			if _, err := dealer.SendMessage(AppendSeq(nil, 0)); err != nil {
				t.Fatal(err)
			}
			wantFrames := 3
			if topicFrame {
				wantFrames = 4
			}
			tests := []struct {
				start uint64
				want  []uint64
			}{
				{0, []uint64{2, 3, 4, 5, ReplayEndSeq}}, // older than the buffer: starts at the oldest
				{4, []uint64{4, 5, ReplayEndSeq}},
				{1000, []uint64{ReplayEndSeq}},
			}
			for _, tt := range tests {
				msgs, frames := replayFrom(t, dealer, tt.start)
				if diff := cmp.Diff(tt.want, seqsOf(msgs)); diff != "" {
					t.Errorf("replay from %d seqs (-want +got):\n%s", tt.start, diff)
				}
				for i, n := range frames {
					if n != wantFrames {
						t.Errorf("replay from %d message %d: %d frames, want %d", tt.start, i, n, wantFrames)
					}
				}
				for _, m := range msgs[:len(msgs)-1] {
					var b indexer.Batch
					if err := DecodeBatch(m.Payload, &b); err != nil {
						t.Fatal(err)
					}
					if got, want := b.Events[0].Hashes[0], 100+m.Seq; got != want {
						t.Errorf("replayed seq %d hash: got %d, want %d", m.Seq, got, want)
					}
					if topicFrame && string(m.Topic) != "tp" {
						t.Errorf("replay topic: got %q, want tp", m.Topic)
					}
				}
				end := msgs[len(msgs)-1]
				if len(end.Payload) != 0 || (topicFrame && len(end.Topic) != 0) {
					t.Errorf("terminator: got %+v, want empty topic and payload", end)
				}
			}
		})
	}
}

func TestPublisherFaults(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*", StartSeq: 1})
	pubEP, rep := p.Endpoints()
	sub := zmqtest.Socket(t, zmq.SUB)
	if err := sub.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Connect(pubEP); err != nil {
		t.Fatal(err)
	}
	syncSub(t, p, sub)
	dealer := zmqtest.Socket(t, zmq.DEALER)
	if err := dealer.Connect(rep); err != nil {
		t.Fatal(err)
	}

	// Restart: the sequence starts over at StartSeq and the history is empty.
	p.Restart()
	if got := p.NextSeq(); got != 1 {
		t.Errorf("NextSeq after Restart: got %d, want 1", got)
	}
	if msgs, _ := replayFrom(t, dealer, 0); len(msgs) != 1 {
		t.Errorf("replay after Restart: got seqs %v, want only the terminator", seqsOf(msgs))
	}

	// DropEvery 3: the 3rd and 6th batches (seqs 3 and 6) are not sent but stay replayable.
	p.SetFaults(PublisherFaults{DropEvery: 3})
	for i := range 7 {
		if _, err := p.Publish(storedBatch(uint64(i+1), 0)); err != nil {
			t.Fatal(err)
		}
	}
	var live []uint64
	for len(live) < 5 {
		m, err := ParseLive(mustRecv(t, sub))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, m.Seq)
	}
	if diff := cmp.Diff([]uint64{1, 2, 4, 5, 7}, live); diff != "" {
		t.Errorf("live seqs with DropEvery 3 (-want +got):\n%s", diff)
	}
	msgs, _ := replayFrom(t, dealer, 1)
	if diff := cmp.Diff([]uint64{1, 2, 3, 4, 5, 6, 7, ReplayEndSeq}, seqsOf(msgs)); diff != "" {
		t.Errorf("replay keeps dropped batches (-want +got):\n%s", diff)
	}

	// DropFromHistory: a permanent hole.
	p.Restart()
	p.SetFaults(PublisherFaults{DropEvery: 2, DropFromHistory: true})
	for i := range 4 {
		if _, err := p.Publish(storedBatch(uint64(i+1), 0)); err != nil {
			t.Fatal(err)
		}
	}
	msgs, _ = replayFrom(t, dealer, 1)
	if diff := cmp.Diff([]uint64{1, 3, ReplayEndSeq}, seqsOf(msgs)); diff != "" {
		t.Errorf("replay with permanent holes (-want +got):\n%s", diff)
	}
}

// TestPublisherConnectMode: a connecting PUB (llm-d's simulator style) reaches a bound SUB.
func TestPublisherConnectMode(t *testing.T) {
	port := freePorts(t, 1)
	sub := zmqtest.Socket(t, zmq.SUB)
	if err := sub.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Bind(tcpEP(port)); err != nil {
		t.Fatal(err)
	}
	p := startPublisher(t, PublisherConfig{Endpoint: tcpEP(port), Topic: "kv@127.0.0.1:1@m", StartSeq: 1})
	syncSub(t, p, sub)
}

func TestPublisherConfigErrors(t *testing.T) {
	for _, cfg := range []PublisherConfig{
		{},
		{Endpoint: "tcp://127.0.0.1:*", Mode: "sideways"},
		{Endpoint: "ipc:///tmp/x", Rank: 1},
		{Endpoint: "tcp://127.0.0.1:*", Replay: "bogus://x"},
	} {
		if p, err := NewPublisher(cfg); err == nil {
			p.Close()
			t.Errorf("NewPublisher(%+v): got nil error", cfg)
		}
	}
}

func TestRankEndpoint(t *testing.T) {
	tests := []struct {
		ep      string
		rank    int
		want    string
		wantErr bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", false},
		{"tcp://*:5557", 2, "tcp://*:5559", false},
		{"tcp://10.0.0.1:5558", 1, "tcp://10.0.0.1:5559", false},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558", false},
		{"inproc://kv", 3, "inproc://kv_dp3", false},
		{"", 3, "", false},
		{"ipc:///tmp/kv", 1, "", true},
		{"tcp://host", 1, "", true},
		{"tcp://h:65535", 1, "", true},
		{"tcp://h:1", -1, "", true},
	}
	for _, tt := range tests {
		got, err := rankEndpoint(tt.ep, tt.rank)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("rankEndpoint(%q, %d): got (%q, %v), want (%q, err=%v)", tt.ep, tt.rank, got, err, tt.want, tt.wantErr)
		}
	}
	if got := connectEndpoint("tcp://*:5557"); got != "tcp://127.0.0.1:5557" {
		t.Errorf("connectEndpoint: got %s", got)
	}
	if !pubShouldBind("tcp://*:1") || !pubShouldBind("inproc://x") || pubShouldBind("tcp://127.0.0.1:1") {
		t.Error("pubShouldBind disagrees with vLLM's rule")
	}
}

// TestPublisherPublishPayload: a pre-encoded payload takes the next seq and the replay history
// like Publish; a held one is in the history but never sent live.
func TestPublisherPublishPayload(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*", History: 8})
	pub, rep := p.Endpoints()
	sub := zmqtest.Socket(t, zmq.SUB)
	if err := sub.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Connect(pub); err != nil {
		t.Fatal(err)
	}
	last := syncSub(t, p, sub)
	enc := func(h uint64) []byte {
		b := storedBatch(h, 0)
		b.DPRank, b.HasDPRank = 0, true
		return EncodeBatch(nil, b, EncodeOptions{})
	}
	for i, hold := range []bool{false, true, false} {
		seq, err := p.PublishPayload(enc(uint64(500+i)), hold)
		if err != nil {
			t.Fatal(err)
		}
		if want := last + 1 + uint64(i); seq != want {
			t.Errorf("payload %d: seq %d, want %d", i, seq, want)
		}
	}
	var live []uint64
	for range 2 {
		m, err := ParseLive(mustRecv(t, sub))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, m.Seq)
	}
	if diff := cmp.Diff([]uint64{last + 1, last + 3}, live); diff != "" {
		t.Errorf("live seqs (-want +got):\n%s", diff)
	}
	if msg := zmqtest.RecvWithin(t, sub, 50*time.Millisecond); msg != nil {
		t.Errorf("a further live message: %q", msg)
	}
	dealer := zmqtest.Socket(t, zmq.DEALER)
	if err := dealer.Connect(rep); err != nil {
		t.Fatal(err)
	}
	msgs, _ := replayFrom(t, dealer, last+1)
	if diff := cmp.Diff([]uint64{last + 1, last + 2, last + 3, ReplayEndSeq}, seqsOf(msgs)); diff != "" {
		t.Errorf("replayed seqs (-want +got):\n%s", diff)
	}
	var b indexer.Batch
	if err := DecodeBatch(msgs[1].Payload, &b); err != nil || b.Events[0].Hashes[0] != 501 {
		t.Errorf("held payload replayed as %+v (%v), want hash 501", b.Events, err)
	}
}

// TestPublisherLinkDown: while the link is down nothing is sent but every batch is numbered and
// kept; once it is up again on the same endpoint, the subscriber reconnects and sees the gap,
// which the history repairs.
func TestPublisherLinkDown(t *testing.T) {
	p := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*", History: 1000})
	pub, rep := p.Endpoints()
	sub := zmqtest.Socket(t, zmq.SUB)
	if err := sub.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Connect(pub); err != nil {
		t.Fatal(err)
	}
	last := syncSub(t, p, sub)
	if err := p.SetLinkDown(true); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := p.Publish(storedBatch(uint64(600+i), 0)); err != nil {
			t.Fatal(err)
		}
	}
	if msg := zmqtest.RecvWithin(t, sub, 50*time.Millisecond); msg != nil {
		t.Fatalf("received %q while the link was down", msg)
	}
	deadline := time.Now().Add(defaultTestTimeout)
	for err := p.SetLinkDown(false); err != nil; err = p.SetLinkDown(false) {
		if time.Now().After(deadline) {
			t.Fatalf("link up again: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, _ := p.Endpoints(); got != pub {
		t.Errorf("endpoint after the link came back: %s, want %s", got, pub)
	}
	// The subscriber reconnects by itself; the next batch it sees continues the numbering.
	var first uint64
	for time.Now().Before(deadline) {
		seq, err := p.Publish(storedBatch(999, 0))
		if err != nil {
			t.Fatal(err)
		}
		if msg := zmqtest.RecvWithin(t, sub, 20*time.Millisecond); msg != nil {
			m, err := ParseLive(msg)
			if err != nil {
				t.Fatal(err)
			}
			first = m.Seq
			if first > seq {
				t.Fatalf("received seq %d after publishing %d", first, seq)
			}
			break
		}
	}
	if first < last+4 {
		t.Fatalf("first seq after the link came back: %d, want > %d (the 3 held batches)", first, last+3)
	}
	dealer := zmqtest.Socket(t, zmq.DEALER)
	if err := dealer.Connect(rep); err != nil {
		t.Fatal(err)
	}
	msgs, _ := replayFrom(t, dealer, last+1)
	if got := seqsOf(msgs); len(got) < 4 || got[0] != last+1 || got[2] != last+3 {
		t.Errorf("replay from %d: %v, want the held batches %d..%d first", last+1, got, last+1, last+3)
	}
}
