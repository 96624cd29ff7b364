package router

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// startPublisher runs an engine-style ZMQ publisher (PUB + replay ROUTER) until the test ends.
func startPublisher(t *testing.T) (*kvbridge.Publisher, string, string) {
	t.Helper()
	p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; p.Close() })
	pub, rep := p.Endpoints()
	return p, pub, rep
}

// storedBatch is one batch storing tokens as a chain from block 0, with engine hashes base+i.
func storedBatch(tokens []uint32, bs int, base uint64) *indexer.Batch {
	n := len(tokens) / bs
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = base + uint64(i)
	}
	return &indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventStored, Hashes: hashes, Tokens: tokens[:n*bs], BlockSize: bs, Medium: "GPU"}}}
}

func bytesOf(s string) []uint32 {
	out := make([]uint32, len(s))
	for i := range s {
		out[i] = uint32(s[i])
	}
	return out
}

func TestCacheAwareRoutingFromZMQEvents(t *testing.T) {
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	pa, pubA, repA := startPublisher(t)
	pb, pubB, repB := startPublisher(t)
	_ = pa
	g := newTestGateway(t, testConfig{},
		"url="+a.url()+",kv_events="+pubA+",replay="+repA,
		"url="+b.url()+",kv_events="+pubB+",replay="+repB)
	g.waitFor(t, "event streams up", func() bool { ok, _ := g.rt.Fleet().Ready(); return ok })
	// Worker b's engine reports that it cached the long prefix (block size 8, learned from the
	// events).
	prefix := strings.Repeat("system prompt! ", 8) // 120 bytes = 15 blocks of 8
	if _, err := pb.Publish(storedBatch(bytesOf(prefix), 8, 1000)); err != nil {
		t.Fatal(err)
	}
	mb := g.member(b.url())
	g.waitFor(t, "b's blocks in the index", func() bool { return mb.IndexBlocks() == 15 })
	if got := mb.BlockSize(); got != 8 {
		t.Errorf("learned block size: got %d, want 8", got)
	}
	resp, body := g.post(t, `{"prompt":"`+prefix+`and the user's question"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(pipeline.HeaderWorker); got != b.url() {
		t.Errorf("worker: got %q, want %q (the one holding the prefix)", got, b.url())
	}
	if got, want := resp.Header.Get(pipeline.HeaderReason), string(policy.ReasonCacheHit); got != want {
		t.Errorf("reason: got %q, want %q", got, want)
	}
	if got := resp.Header.Get(pipeline.HeaderMatchedBlocks); got != "15" {
		t.Errorf("matched blocks: got %q, want 15", got)
	}

	// A new prompt matches nothing; an identical one right after lands on the same worker
	// through the pending overlay, before any event confirms it.
	fresh := `{"prompt":"` + strings.Repeat("brand new text ", 6) + `"}`
	resp1, _ := g.post(t, fresh)
	if got := resp1.Header.Get(pipeline.HeaderReason); got != string(policy.ReasonNoMatch) {
		t.Errorf("fresh prompt reason: got %q, want no_match", got)
	}
	resp2, _ := g.post(t, fresh)
	if got, want := resp2.Header.Get(pipeline.HeaderWorker), resp1.Header.Get(pipeline.HeaderWorker); got != want {
		t.Errorf("repeat of a fresh prompt: got worker %q, want %q", got, want)
	}
	if got := resp2.Header.Get(pipeline.HeaderReason); got != string(policy.ReasonPendingHit) {
		t.Errorf("repeat reason: got %q, want pending_hit", got)
	}

	// The explanation endpoint agrees, without sending anything.
	_, dbg := g.do(t, http.MethodGet, "/debug/route?prompt="+strings.ReplaceAll(prefix, " ", "%20")+"x", "", "")
	if !strings.Contains(dbg, `"worker":"`+b.url()+`","reason":"cache_hit","matched_blocks":7`) {
		// 15 blocks of 8 tokens = 7 blocks of the default 16 on the common scale.
		t.Errorf("/debug/route: got %s", dbg)
	}

	// Removing the worker drops its blocks from the index and stops its stream.
	if err := g.rt.Fleet().RemoveWorker(b.url()); err != nil {
		t.Fatal(err)
	}
	if n := g.index().WorkerBlocks(mb.LookupWorker().IDs[0]); n != 0 {
		t.Errorf("blocks after removal: got %d, want 0", n)
	}
	if st, _ := mb.StreamState(); st != kvbridge.StreamStopped {
		t.Errorf("stream after removal: got %v, want stopped", st)
	}
}

func TestTreeRoutingWithoutEvents(t *testing.T) {
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{}, a.url(), b.url())
	prompt := `{"prompt":"` + strings.Repeat("tree me please ", 5) + `"}`
	r1, _ := g.post(t, prompt)
	r2, _ := g.post(t, prompt)
	if r1.Header.Get(pipeline.HeaderWorker) != r2.Header.Get(pipeline.HeaderWorker) {
		t.Errorf("repeat went elsewhere: %q then %q", r1.Header.Get(pipeline.HeaderWorker), r2.Header.Get(pipeline.HeaderWorker))
	}
	if got := r2.Header.Get(pipeline.HeaderReason); got != string(policy.ReasonTreeHit) {
		t.Errorf("repeat reason: got %q, want tree_hit", got)
	}
	if got := r2.Header.Get(pipeline.HeaderMatchedBlocks); got != strconv.Itoa(75/16) {
		t.Errorf("matched blocks: got %q, want %d", got, 75/16)
	}
}

func TestKVIndexOffUsesTreeForEventWorkers(t *testing.T) {
	a := newFakeWorker(t, "m")
	_, pub, _ := startPublisher(t)
	g := newTestGateway(t, testConfig{KVIndex: fleet.KVIndexOff}, "url="+a.url()+",kv_events="+pub)
	m := g.members()[0]
	if _, ok := m.StreamState(); ok || m.EventFed() {
		t.Errorf("--kv-index off: got a stream / event-fed worker")
	}
	prompt := `{"prompt":"` + strings.Repeat("x", 40) + `"}`
	g.post(t, prompt)
	r, _ := g.post(t, prompt)
	if got := r.Header.Get(pipeline.HeaderReason); got != string(policy.ReasonTreeHit) {
		t.Errorf("reason: got %q, want tree_hit", got)
	}
}

func TestGRPCUnimplementedWorkersRoutedByTree(t *testing.T) {
	var addrs []string
	for i := 0; i < 2; i++ {
		f := newFakeVLLM()
		f.gen = echoUpper
		addrs = append(addrs, startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) }))
	}
	g := newTestGateway(t, testConfig{}, "url=grpc://"+addrs[0]+",runtime=vllm", "url=grpc://"+addrs[1]+",runtime=vllm")
	g.waitFor(t, "both streams unavailable", func() bool {
		for _, m := range g.members() {
			if st, _ := m.StreamState(); st != kvbridge.StreamUnavailable {
				return false
			}
		}
		return true
	})
	prompt := `{"prompt":"` + strings.Repeat("q", 48) + `","max_tokens":1}`
	r1, _ := g.post(t, prompt)
	r2, _ := g.post(t, prompt)
	if r1.Header.Get(pipeline.HeaderWorker) != r2.Header.Get(pipeline.HeaderWorker) || r2.Header.Get(pipeline.HeaderReason) != string(policy.ReasonTreeHit) {
		t.Errorf("got %q/%q then %q/%q, want the same worker by tree_hit", r1.Header.Get(pipeline.HeaderWorker), r1.Header.Get(pipeline.HeaderReason), r2.Header.Get(pipeline.HeaderWorker), r2.Header.Get(pipeline.HeaderReason))
	}
}

func TestKVListenCollectorAttributesByTopic(t *testing.T) {
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{KVListen: "tcp://127.0.0.1:*"}, a.url(), b.url())
	var ep string
	g.waitFor(t, "collector bound", func() bool {
		ep = g.rt.Fleet().CollectorEndpoint()
		return ep != ""
	})
	if ok, reason := g.rt.Fleet().Ready(); !ok {
		t.Fatalf("not ready with a bound collector: %s", reason)
	}
	// b's publisher connects to the gateway, as llm-d's simulator does.
	hostB := strings.TrimPrefix(b.url(), "http://")
	p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: ep, Mode: kvbridge.PubConnect, Topic: "kv@" + hostB + "@m"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	mb := g.member(b.url())
	prefix := strings.Repeat("collected prefix ", 4) // 68 bytes = 4 blocks of 16
	// A connecting PUB drops messages until the connection is up (ZMQ slow joiner), so publish
	// until the index has them.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(defaultTestTimeout)
	for mb.IndexBlocks() < 4 {
		if _, err := p.Publish(storedBatch(bytesOf(prefix), 16, 100)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("collector never delivered b's events")
		}
	}
	if !mb.EventFed() || g.member(a.url()).EventFed() {
		t.Errorf("event-fed: got b=%v a=%v, want b only", mb.EventFed(), g.member(a.url()).EventFed())
	}
	r, _ := g.post(t, `{"prompt":"`+prefix+`?"}`)
	if got, reason := r.Header.Get(pipeline.HeaderWorker), r.Header.Get(pipeline.HeaderReason); got != b.url() || reason != "cache_hit" {
		t.Errorf("got %q (%s), want b by cache_hit", got, reason)
	}
	// Removing the worker takes its blocks out of the index.
	if err := g.rt.Fleet().RemoveWorker(b.url()); err != nil {
		t.Fatal(err)
	}
	if n := g.index().WorkerBlocks(mb.LookupWorker().IDs[0]); n != 0 {
		t.Errorf("blocks of the removed worker: got %d, want 0", n)
	}
}

func TestSidecarGRPCEvents(t *testing.T) {
	a := newFakeWorker(t, "m")
	bridge, err := kvbridge.NewBridgeServer(kvbridge.BridgeConfig{Runtime: worker.RuntimeVLLM}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := startGRPC(t, func(s *grpc.Server) { bridge.Register(s) })
	t.Cleanup(bridge.Close)
	g := newTestGateway(t, testConfig{}, "url="+a.url()+",kv_events=grpc://"+addr)
	m := g.members()[0]
	g.waitFor(t, "sidecar stream up", func() bool { st, _ := m.StreamState(); return st == kvbridge.StreamUp })
	bridge.Batch(0, storedBatch(bytesOf(strings.Repeat("s", 48)), 16, 7))
	g.waitFor(t, "blocks from the sidecar", func() bool { return m.IndexBlocks() == 3 })
	if !m.EventFed() {
		t.Error("worker fed by a sidecar is not event-fed")
	}
}

// A worker that goes down loses its blocks in the index (a crashed engine comes back empty);
// when it comes back with its cache intact, the next batch whose parent was cleared makes the
// stream resync from the replay buffer, so the index holds the whole cache again.
func TestDownWorkerLeavesIndexAndRebuildsOnReturn(t *testing.T) {
	w := newFakeWorker(t, "m")
	var down atomic.Bool
	w.healthy = func() bool { return !down.Load() }
	p, pub, rep := startPublisher(t)
	g := newTestGateway(t, testConfig{}, "url="+w.url()+",kv_events="+pub+",replay="+rep)
	g.waitFor(t, "event stream up", func() bool { ok, _ := g.rt.Fleet().Ready(); return ok })
	m := g.member(w.url())
	prefix := bytesOf(strings.Repeat("cached prefix! ", 8)) // 120 tokens = 15 blocks of 8
	if _, err := p.Publish(storedBatch(prefix, 8, 1000)); err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "blocks in the index", func() bool { return m.IndexBlocks() == 15 })

	down.Store(true)
	g.waitFor(t, "worker marked down", func() bool { return !m.Worker().Healthy() })
	g.waitFor(t, "down worker's blocks gone", func() bool { return m.IndexBlocks() == 0 })

	down.Store(false)
	g.waitFor(t, "worker back", func() bool { return m.Worker().Healthy() })
	// The engine kept its cache and extends the cached chain: the unknown parent triggers a
	// replay from 0, which restores the 15 blocks next to the new one.
	next := &indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventStored, Hashes: []uint64{2000}, Parent: 1014, HasParent: true,
		Tokens: bytesOf("one more block!!")[:8], BlockSize: 8, Medium: "GPU"}}}
	if _, err := p.Publish(next); err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "index rebuilt by the resync", func() bool { return m.IndexBlocks() == 16 })
}

// A publisher that connects to --kv-listen still binds its own replay ROUTER: a spec with no
// kv_events but replay= has the collector repair that topic's gaps from it (issue 16), where
// without one a gap clears the worker.
func TestKVListenReplayRepairsGaps(t *testing.T) {
	for _, withReplay := range []bool{true, false} {
		t.Run("replay="+strconv.FormatBool(withReplay), func(t *testing.T) {
			b := newFakeWorker(t, "m")
			g := newTestGateway(t, testConfig{KVListen: "tcp://127.0.0.1:*"})
			var ep string
			g.waitFor(t, "collector bound", func() bool {
				ep = g.rt.Fleet().CollectorEndpoint()
				return ep != ""
			})
			hostB := strings.TrimPrefix(b.url(), "http://")
			p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: ep, Mode: kvbridge.PubConnect, Topic: "kv@" + hostB + "@m", Replay: "tcp://127.0.0.1:*"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = p.Run(ctx) }()
			defer func() { cancel(); <-done; p.Close() }()
			spec := worker.Spec{URL: b.url()}
			if withReplay {
				_, spec.Replay = p.Endpoints()
			}
			if _, err := g.rt.Fleet().AddWorker(spec); err != nil {
				t.Fatal(err)
			}
			mb := g.member(b.url())
			// Publish one chain until the (slow-joining) connection delivers it.
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(defaultTestTimeout)
			for mb.IndexBlocks() < 4 {
				if _, err := p.Publish(storedBatch(bytesOf(strings.Repeat("first chain ....", 4)), 16, 100)); err != nil {
					t.Fatal(err)
				}
				select {
				case <-tick.C:
				case <-deadline:
					t.Fatal("collector never delivered the events")
				}
			}
			// The next batch is lost on the wire (it stays in the publisher's history); the
			// one after it reveals the gap.
			p.SetFaults(kvbridge.PublisherFaults{DropEvery: 1})
			if _, err := p.Publish(storedBatch(bytesOf(strings.Repeat("lost chain .....", 4)), 16, 200)); err != nil {
				t.Fatal(err)
			}
			p.SetFaults(kvbridge.PublisherFaults{})
			third := bytesOf(strings.Repeat("third chain ....", 4))
			if _, err := p.Publish(storedBatch(third, 16, 300)); err != nil {
				t.Fatal(err)
			}
			keys := indexer.AppendBlockKeys(nil, third, 16, "")
			g.waitFor(t, "the batch after the gap applied", func() bool {
				m := g.index().Match(keys, nil)
				return len(m) == 1 && m[0].Blocks == 4
			})
			want := 4 // the gap cleared the worker: only the third chain
			if withReplay {
				want = 12 // repaired: all three chains
			}
			if got := mb.IndexBlocks(); got != want {
				t.Errorf("blocks after the gap: got %d, want %d", got, want)
			}
		})
	}
}
