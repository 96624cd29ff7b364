package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// freePortBase returns a base port p such that p..p+n-1 were free a moment ago.
func freePortBase(t *testing.T, n int) int { return testutil.FreePortBlock(t, n) }

// zmqEngine is a fake engine: one vLLM-faithful Publisher (PUB + ROUTER replay) per DP rank.
type zmqEngine struct {
	pubs            []*kvbridge.Publisher
	pubEP, replayEP string // rank 0's endpoints
}

func startZMQEngine(t *testing.T, dpSize int) *zmqEngine {
	t.Helper()
	pubBase, repBase := freePortBase(t, dpSize), freePortBase(t, dpSize)
	e := &zmqEngine{pubEP: fmt.Sprintf("tcp://127.0.0.1:%d", pubBase), replayEP: fmt.Sprintf("tcp://127.0.0.1:%d", repBase)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for r := range dpSize {
		p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{
			Endpoint: e.pubEP, Mode: kvbridge.PubBind, Replay: e.replayEP, Rank: r, ReplayTopicFrame: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		e.pubs = append(e.pubs, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(ctx); err != nil {
				t.Errorf("publisher rank %d: %v", r, err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, p := range e.pubs {
			p.Close()
		}
	})
	return e
}

func (e *zmqEngine) publish(t *testing.T, rank int, b *indexer.Batch) uint64 {
	t.Helper()
	seq, err := e.pubs[rank].Publish(b)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// engineBatches are published before the consumer connects: it gets them through replay.
func engineBatches() []*indexer.Batch {
	return []*indexer.Batch{
		{Timestamp: 1732000000.5, Events: []indexer.Event{
			{Kind: indexer.EventStored, Hashes: []uint64{1 << 63, 42}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU"},
			{Kind: indexer.EventStored, Hashes: []uint64{7}, Parent: 42, HasParent: true, Tokens: []uint32{5, 6}, BlockSize: 2,
				LoraID: 3, HasLoraID: true},
		}},
		{Timestamp: 1732000001, Events: []indexer.Event{
			{Kind: indexer.EventRemoved, Hashes: []uint64{0xffffffffffffffff}, Medium: "GPU"},
			{Kind: indexer.EventCleared},
		}},
	}
}

// engineLines is what tail prints for engineBatches published on one rank, given the seq of
// the first one and the rank. Through the gRPC bridge the medium is lost (the wire has none).
func engineLines(first uint64, rank int, viaBridge bool) []string {
	medium := `"GPU"`
	if viaBridge {
		medium = "null"
	}
	return []string{
		fmt.Sprintf(`{"seq":%d,"rank":%d,"ts":1732000000.5,"type":"stored","parent":null,"block_size":2,"blocks":[{"hash":-9223372036854775808,"tokens":[1,2]},{"hash":42,"tokens":[3,4]}],"lora_id":null,"medium":%s}`, first, rank, medium),
		fmt.Sprintf(`{"seq":%d,"rank":%d,"ts":1732000000.5,"type":"stored","parent":42,"block_size":2,"blocks":[{"hash":7,"tokens":[5,6]}],"lora_id":3,"medium":null}`, first, rank),
		fmt.Sprintf(`{"seq":%d,"rank":%d,"ts":1732000001,"type":"removed","hashes":[-1]}`, first+1, rank),
		fmt.Sprintf(`{"seq":%d,"rank":%d,"ts":1732000001,"type":"cleared"}`, first+1, rank),
	}
}

// rankOf extracts the rank of a tail line.
var rankRE = regexp.MustCompile(`"rank":(\d+),`)

func splitByRank(ls []string) map[string][]string {
	out := map[string][]string{}
	for _, l := range ls {
		m := rankRE.FindStringSubmatch(l)
		if m == nil {
			out["?"] = append(out["?"], l)
			continue
		}
		out[m[1]] = append(out[m[1]], l)
	}
	return out
}

func TestTailZMQ(t *testing.T) {
	eng := startZMQEngine(t, 2)
	for r := range 2 {
		for _, b := range engineBatches() {
			eng.publish(t, r, b)
		}
	}
	// Replay from 0 on connect brings the batches published before tail started, per rank.
	code, stdout, stderr := runCmd(t, "tail", "--zmq", eng.pubEP, "--replay", eng.replayEP, "--dp-size", "2",
		"--count", "8", "--timeout", "15s")
	if code != exitOK {
		t.Fatalf("exit code: got %d, want 0; stderr:\n%s", code, stderr)
	}
	want := map[string][]string{"0": engineLines(0, 0, false), "1": engineLines(0, 1, false)}
	if diff := cmp.Diff(want, splitByRank(lines(stdout))); diff != "" {
		t.Errorf("stdout lines per rank mismatch (-want +got):\n%s", diff)
	}
}

func TestTailZMQTopicFilter(t *testing.T) {
	pubBase, repBase := freePortBase(t, 1), freePortBase(t, 1)
	pubEP, repEP := fmt.Sprintf("tcp://127.0.0.1:%d", pubBase), fmt.Sprintf("tcp://127.0.0.1:%d", repBase)
	p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: pubEP, Mode: kvbridge.PubBind, Replay: repEP, Topic: "kv@w1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	defer func() { cancel(); <-done; p.Close() }()
	for _, b := range engineBatches() {
		if _, err := p.Publish(b); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := runCmd(t, "tail", "--zmq", pubEP, "--replay", repEP, "--topic", "kv@w1", "--count", "4", "--timeout", "15s")
	if code != exitOK {
		t.Fatalf("exit code: got %d, want 0; stderr:\n%s", code, stderr)
	}
	if diff := cmp.Diff(engineLines(0, 0, false), lines(stdout)); diff != "" {
		t.Errorf("stdout mismatch (-want +got):\n%s", diff)
	}
}

// stderrWatch is a goroutine-safe stderr that reports the address `serve` prints.
type stderrWatch struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
	sent bool
}

func newStderrWatch() *stderrWatch { return &stderrWatch{addr: make(chan string, 1)} }

var listeningRE = regexp.MustCompile(`kvbridge: listening on (\S+)`)

func (w *stderrWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.sent {
		if m := listeningRE.FindSubmatch(w.buf.Bytes()); m != nil {
			w.addr <- string(m[1])
			w.sent = true
		}
	}
	return n, err
}

func (w *stderrWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startServe runs `kvbridge serve` in-process and returns its gRPC address; the command is
// stopped (and must exit 0) at cleanup.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errw := newStderrWatch()
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, append([]string{"serve"}, args...), &bytes.Buffer{}, errw) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exit:
			if code != exitOK {
				t.Errorf("serve exit code: got %d, want 0; stderr:\n%s", code, errw.String())
			}
		case <-time.After(testTimeout):
			t.Errorf("serve did not stop; stderr:\n%s", errw.String())
		}
	})
	select {
	case addr := <-errw.addr:
		return addr
	case code := <-exit:
		exit <- code
		t.Fatalf("serve exited with %d; stderr:\n%s", code, errw.String())
	case <-time.After(testTimeout):
		t.Fatalf("serve did not print its address; stderr:\n%s", errw.String())
	}
	return ""
}

func TestServeZMQToGRPC(t *testing.T) {
	eng := startZMQEngine(t, 1)
	for _, b := range engineBatches() {
		eng.publish(t, 0, b)
	}
	addr := startServe(t, "--zmq", eng.pubEP, "--replay", eng.replayEP, "--runtime", "tokenspeed",
		"--listen", "127.0.0.1:0", "--history", "100")

	// The bridge renumbers from 1 (the engine started at 0) and sets dp_rank.
	code, stdout, stderr := runCmd(t, "tail", "--grpc", addr, "--runtime", "tokenspeed", "--count", "4", "--timeout", "15s")
	if code != exitOK {
		t.Fatalf("tail exit code: got %d, want 0; stderr:\n%s", code, stderr)
	}
	if diff := cmp.Diff(engineLines(1, 0, true), lines(stdout)); diff != "" {
		t.Errorf("tail through the bridge mismatch (-want +got):\n%s", diff)
	}

	// Live: a batch published now reaches a new tail after the history (seqs 1..2), as seq 3.
	res := make(chan []string, 1)
	go func() {
		_, out, _ := runCmd(t, "tail", "--grpc", addr, "--runtime", "tokenspeed", "--count", "5", "--timeout", "15s")
		res <- lines(out)
	}()
	eng.publish(t, 0, &indexer.Batch{Timestamp: 5, Events: []indexer.Event{{Kind: indexer.EventRemoved, Hashes: []uint64{9}}}})
	select {
	case got := <-res:
		want := append(engineLines(1, 0, true), `{"seq":3,"rank":0,"ts":5,"type":"removed","hashes":[9]}`)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("history then live mismatch (-want +got):\n%s", diff)
		}
	case <-time.After(testTimeout):
		t.Fatal("second tail did not finish")
	}
	// Another runtime's service is not served.
	code, _, stderr = runCmd(t, "tail", "--grpc", addr, "--runtime", "vllm", "--timeout", "10s")
	if code != exitError || !strings.Contains(stderr, "UNIMPLEMENTED") {
		t.Errorf("tail of the vllm service on a tokenspeed bridge: got exit %d, stderr %q; want 1 and UNIMPLEMENTED", code, stderr)
	}
}

func TestServeDPRanks(t *testing.T) {
	eng := startZMQEngine(t, 2)
	for r := range 2 {
		for _, b := range engineBatches() {
			eng.publish(t, r, b)
		}
	}
	addr := startServe(t, "--zmq", eng.pubEP, "--replay", eng.replayEP, "--dp-size", "2", "--runtime", "sglang", "--listen", "127.0.0.1:0")
	code, stdout, stderr := runCmd(t, "tail", "--grpc", addr, "--runtime", "sglang", "--count", "8", "--timeout", "15s")
	if code != exitOK {
		t.Fatalf("tail exit code: got %d, want 0; stderr:\n%s", code, stderr)
	}
	// The ranks interleave in arrival order; the bridge's numbering is contiguous from 1 over
	// both, each rank's batches stay in order and carry their dp_rank.
	got := lines(stdout)
	byRank := splitByRank(got)
	seqRE := regexp.MustCompile(`^\{"seq":(\d+),`)
	var seqs []string
	for _, l := range got {
		if m := seqRE.FindStringSubmatch(l); m != nil && !slices.Contains(seqs, m[1]) {
			seqs = append(seqs, m[1])
		}
	}
	if diff := cmp.Diff([]string{"1", "2", "3", "4"}, seqs); diff != "" {
		t.Errorf("bridge sequence numbers (-want +got):\n%s", diff)
	}
	strip := regexp.MustCompile(`^\{"seq":\d+,`)
	for _, r := range []string{"0", "1"} {
		var gotR, wantR []string
		for _, l := range byRank[r] {
			gotR = append(gotR, strip.ReplaceAllString(l, "{"))
		}
		rank := int(r[0] - '0')
		for _, l := range engineLines(0, rank, true) {
			wantR = append(wantR, strip.ReplaceAllString(l, "{"))
		}
		if diff := cmp.Diff(wantR, gotR); diff != "" {
			t.Errorf("rank %s events mismatch (-want +got):\n%s", r, diff)
		}
	}
}
