package sim

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/zmqtest"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

const fixtureDir = "../../testdata/fixtures/kvevents"

// freePorts returns a base port p such that p..p+n-1 were free a moment ago.
func freePorts(t *testing.T, n int) int { return testutil.FreePortBlock(t, n) }

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int { return testutil.FreePort(t) }

// zmqEnv is one simulator (engine + ZMQ publisher + HTTP) on loopback.
type zmqEnv struct {
	*testEnv
	sink          *ZMQSink
	pubEP, replay string
}

func newZMQEnv(t *testing.T, enc kvbridge.EncodeOptions, faults ZMQSinkConfig) *zmqEnv {
	t.Helper()
	pubPort, replayPort := freePorts(t, max(faults.Ranks, 1)), freePorts(t, max(faults.Ranks, 1))
	faults.Publisher = kvbridge.PublisherConfig{
		Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pubPort), Mode: kvbridge.PubBind,
		Replay: fmt.Sprintf("tcp://127.0.0.1:%d", replayPort), Topic: "kv@sim", Encode: enc,
	}
	sink, err := NewZMQSink(faults)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = sink.Run(ctx) }()
	var ranks Ranks
	for r := range max(faults.Ranks, 1) {
		e, err := NewEngine(EngineConfig{Core: Config{BlockSize: 16, NumBlocks: 1000}, TimeScale: 1e-3, Rank: r}, SystemClock{}, sink, nil)
		if err != nil {
			t.Fatal(err)
		}
		ranks = append(ranks, e)
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	reg := prometheus.NewRegistry()
	s, err := NewServer(ServerConfig{Model: "sim-model"}, ranks, reg)
	if err != nil {
		t.Fatal(err)
	}
	env := &zmqEnv{testEnv: &testEnv{ranks: ranks, reg: reg}, sink: sink}
	env.srv = httptest.NewServer(s.Handler())
	pubs, replays := sink.Endpoints()
	env.pubEP, env.replay = pubs[0], replays[0]
	t.Cleanup(func() {
		env.srv.Close()
		cancel()
		wg.Wait()
		if err := sink.Close(); err != nil {
			t.Errorf("sink close: %v", err)
		}
	})
	return env
}

// syncSub resets the (idle) prefix cache until sub sees an AllBlocksCleared batch, so that
// the subscription is live (ZMQ's slow joiner) before the test's traffic; it drains the
// other reset batches and returns the seq of the last one.
func (env *zmqEnv) syncSub(t *testing.T, sub *zmq.Socket) uint64 {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	sent := uint64(0)
	for time.Now().Before(deadline) {
		if !env.ranks[0].ResetPrefixCache() {
			t.Fatal("reset refused")
		}
		sent++
		msg := zmqtest.RecvWithin(t, sub, 20*time.Millisecond)
		for msg != nil {
			m, err := kvbridge.ParseLive(msg)
			if err != nil {
				t.Fatal(err)
			}
			if m.Seq == sent-1 { // publishers number from 0
				return m.Seq
			}
			msg = zmqtest.RecvWithin(t, sub, defaultTestTimeout)
		}
	}
	t.Fatal("subscriber never received a batch")
	return 0
}

type fixtureLine struct {
	Instance string          `json:"instance"`
	Phase    string          `json:"phase"`
	Request  json.RawMessage `json:"request"`
	Usage    *struct {
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func readFixtureRequests(t *testing.T, phases ...string) []fixtureLine {
	t.Helper()
	f, err := os.Open(fixtureDir + "/requests.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []fixtureLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l fixtureLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		for _, p := range phases {
			if l.Instance == "array" && strings.HasPrefix(l.Phase, p+" ") {
				out = append(out, l)
			}
		}
	}
	return out
}

// decodeFixtureBatches decodes the first n live batches of a fixture file.
func decodeFixtureBatches(t *testing.T, file string, n int) []indexer.Event {
	t.Helper()
	f, err := os.Open(fixtureDir + "/" + file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []indexer.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for i := 0; i < n && sc.Scan(); i++ {
		var l struct {
			Frames []string `json:"frames_b64"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		var frames [][]byte
		for _, s := range l.Frames {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, b)
		}
		m, err := kvbridge.ParseLive(frames)
		if err != nil {
			t.Fatal(err)
		}
		var b indexer.Batch
		if err := kvbridge.DecodeBatch(m.Payload, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, copyEvents(b.Events)...)
	}
	return out
}

// shape describes a stored event by content, independent of the hash algorithm: its
// blocks' tokens and the tokens of the block its parent hash names (nil without parent).
type shape struct {
	Kind         string
	Blocks       [][]uint32
	ParentTokens []uint32
}

func shapes(t *testing.T, evs []indexer.Event) []shape {
	t.Helper()
	byHash := map[uint64][]uint32{}
	var out []shape
	for _, e := range evs {
		s := shape{Kind: e.Kind.String()}
		if e.Kind == indexer.EventStored {
			for i, h := range e.Hashes {
				blk := e.Tokens[i*e.BlockSize : (i+1)*e.BlockSize]
				s.Blocks = append(s.Blocks, blk)
				byHash[h] = blk
			}
			if e.HasParent {
				p, ok := byHash[e.Parent]
				if !ok {
					t.Errorf("stored event's parent %d was never stored", e.Parent)
				}
				s.ParentTokens = p
			}
		}
		out = append(out, s)
	}
	return out
}

func TestZMQEventsMatchFixture(t *testing.T) {
	reqs := readFixtureRequests(t, "P1", "P2")
	if len(reqs) != 7 {
		t.Fatalf("fixture: got %d P1/P2 requests, want 7", len(reqs))
	}
	want := shapes(t, decodeFixtureBatches(t, "sim-array-live.jsonl", 2))
	for _, tc := range []struct {
		name string
		enc  kvbridge.EncodeOptions
	}{
		{"array int", kvbridge.EncodeOptions{}},
		{"map int", kvbridge.EncodeOptions{MapEvents: true}},
		{"array bytes", kvbridge.EncodeOptions{BytesHashes: true}},
		{"map bytes", kvbridge.EncodeOptions{MapEvents: true, BytesHashes: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newZMQEnv(t, tc.enc, ZMQSinkConfig{})
			sub := zmqtest.Socket(t, zmq.SUB)
			if err := sub.SetSubscribe(""); err != nil {
				t.Fatal(err)
			}
			if err := sub.Connect(env.pubEP); err != nil {
				t.Fatal(err)
			}
			lastSync := env.syncSub(t, sub)

			for i, l := range reqs {
				code, body := env.post(t, string(l.Request))
				if code != 200 {
					t.Fatalf("request %d: %d %s", i, code, body)
				}
				var r completionResp
				if err := json.Unmarshal(body, &r); err != nil {
					t.Fatal(err)
				}
				if got, want := r.Usage.PromptTokensDetails.CachedTokens, l.Usage.PromptTokensDetails.CachedTokens; got != want {
					t.Errorf("request %d (%s): cached_tokens got %d, want %d", i, l.Phase, got, want)
				}
			}

			// Live: every batch after the sync, in sequence, decodes with kvbridge.
			var live []indexer.Event
			var livePayloads [][]byte
			seq := lastSync
			for {
				msg := zmqtest.RecvWithin(t, sub, 300*time.Millisecond)
				if msg == nil {
					break
				}
				m, err := kvbridge.ParseLive(msg)
				if err != nil {
					t.Fatal(err)
				}
				if string(m.Topic) != "kv@sim" || m.Seq != seq+1 {
					t.Fatalf("live message topic %q seq %d, want kv@sim and %d", m.Topic, m.Seq, seq+1)
				}
				seq = m.Seq
				var b indexer.Batch
				if err := kvbridge.DecodeBatch(m.Payload, &b); err != nil {
					t.Fatalf("DecodeBatch seq %d: %v", m.Seq, err)
				}
				if !b.HasDPRank || b.DPRank != 0 || b.Timestamp < 1e9 {
					t.Errorf("envelope: rank %v/%d ts %v", b.HasDPRank, b.DPRank, b.Timestamp)
				}
				live = append(live, copyEvents(b.Events)...)
				livePayloads = append(livePayloads, append([]byte(nil), m.Payload...))
			}
			if diff := cmp.Diff(want, shapes(t, live)); diff != "" {
				t.Errorf("live events vs fixture P1/P2 (-fixture +sim):\n%s", diff)
			}

			// Replay from the first fixture batch answers the same payloads, then the terminator.
			dealer := zmqtest.Socket(t, zmq.DEALER)
			if err := dealer.Connect(env.replay); err != nil {
				t.Fatal(err)
			}
			if _, err := dealer.SendMessage("", kvbridge.AppendSeq(nil, lastSync+1)); err != nil {
				t.Fatal(err)
			}
			var replayed [][]byte
			for {
				msg := zmqtest.RecvWithin(t, dealer, defaultTestTimeout)
				if msg == nil {
					t.Fatal("replay: no reply")
				}
				m, err := kvbridge.ParseReplayReply(msg)
				if err != nil {
					t.Fatal(err)
				}
				if m.End {
					break
				}
				if want := lastSync + 1 + uint64(len(replayed)); m.Seq != want {
					t.Errorf("replay seq %d, want %d", m.Seq, want)
				}
				replayed = append(replayed, m.Payload)
			}
			if diff := cmp.Diff(livePayloads, replayed); diff != "" {
				t.Errorf("replayed payloads differ from live (-live +replay):\n%s", diff)
			}
			if tc.enc.BytesHashes && !containsBin32(livePayloads) {
				t.Error("bytes mode: no 32-byte msgpack bin digest in the payloads")
			}
		})
	}
}

// containsBin32 reports whether some payload holds a msgpack bin8 of length 32 (c4 20).
func containsBin32(payloads [][]byte) bool {
	for _, p := range payloads {
		if strings.Contains(string(p), "\xc4\x20") {
			return true
		}
	}
	return false
}

// liveSeqs subscribes to ep, syncs on reset batches of rank e, then publishes n more reset
// batches and returns the (seq, rank) of every live message after the sync.
func liveSeqs(t *testing.T, env *zmqEnv, ep string, e *Engine, n int) (seqs []uint64, ranks []int32) {
	t.Helper()
	sub := zmqtest.Socket(t, zmq.SUB)
	if err := sub.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Connect(ep); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(defaultTestTimeout)
	for zmqtest.RecvWithin(t, sub, 20*time.Millisecond) == nil {
		if time.Now().After(deadline) {
			t.Fatal("subscriber never received a batch")
		}
		e.ResetPrefixCache()
	}
	for zmqtest.RecvWithin(t, sub, 100*time.Millisecond) != nil { // drain the sync batches
	}
	// One reset per batch: wait for each to be published (resets of one step share a batch).
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for range n {
		before := env.sink.NextSeq(e.Rank())
		if !e.ResetPrefixCache() {
			t.Fatal("reset refused")
		}
		for env.sink.NextSeq(e.Rank()) == before {
			if time.Now().After(deadline) {
				t.Fatal("reset batch never published")
			}
			<-tick.C
		}
	}
	for {
		msg := zmqtest.RecvWithin(t, sub, 300*time.Millisecond)
		if msg == nil {
			return seqs, ranks
		}
		m, err := kvbridge.ParseLive(msg)
		if err != nil {
			t.Fatal(err)
		}
		var b indexer.Batch
		if err := kvbridge.DecodeBatch(m.Payload, &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 1 || b.Events[0].Kind != indexer.EventCleared {
			t.Errorf("batch %d: %+v, want one cleared event", m.Seq, b.Events)
		}
		seqs, ranks = append(seqs, m.Seq), append(ranks, b.DPRank)
	}
}

func TestZMQFaultsAndRanks(t *testing.T) {
	t.Run("drop every 3rd, replay repairs", func(t *testing.T) {
		env := newZMQEnv(t, kvbridge.EncodeOptions{}, ZMQSinkConfig{DropEvery: 3})
		seqs, _ := liveSeqs(t, env, env.pubEP, env.ranks[0], 9)
		if len(seqs) != 6 {
			t.Fatalf("live seqs %v: want 6 of 9 batches", seqs)
		}
		var missing uint64
		for i := 1; i < len(seqs); i++ {
			if seqs[i] != seqs[i-1]+1 {
				missing = seqs[i-1] + 1
				break
			}
		}
		if missing == 0 {
			t.Fatalf("live seqs %v have no gap", seqs)
		}
		dealer := zmqtest.Socket(t, zmq.DEALER)
		if err := dealer.Connect(env.replay); err != nil {
			t.Fatal(err)
		}
		if _, err := dealer.SendMessage("", kvbridge.AppendSeq(nil, missing)); err != nil {
			t.Fatal(err)
		}
		m, err := kvbridge.ParseReplayReply(zmqtest.RecvWithin(t, dealer, defaultTestTimeout))
		if err != nil || m.End || m.Seq != missing {
			t.Errorf("replay of dropped seq %d: %+v %v", missing, m, err)
		}
	})
	t.Run("restart after 4", func(t *testing.T) {
		env := newZMQEnv(t, kvbridge.EncodeOptions{}, ZMQSinkConfig{RestartAfter: 4})
		seqs, _ := liveSeqs(t, env, env.pubEP, env.ranks[0], 8)
		restarted := false
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				restarted = seqs[i] == 0
			}
		}
		if !restarted {
			t.Errorf("live seqs %v: want a restart back to 0", seqs)
		}
	})
	t.Run("dp ranks on port+rank", func(t *testing.T) {
		env := newZMQEnv(t, kvbridge.EncodeOptions{MapEvents: true}, ZMQSinkConfig{Ranks: 2})
		pubs, _ := env.sink.Endpoints()
		if len(pubs) != 2 {
			t.Fatalf("endpoints %v", pubs)
		}
		_, ranks := liveSeqs(t, env, pubs[1], env.ranks[1], 2)
		if len(ranks) != 2 || ranks[0] != 1 || ranks[1] != 1 {
			t.Errorf("rank 1's publisher sent ranks %v, want [1 1]", ranks)
		}
	})
}
