package pipeline

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// The routeBench constants describe the filled event index BenchmarkRouteDecision routes
// against: 64 event-fed workers holding 4700 chains of 256 blocks (16 tokens each), every chain
// on one worker; the first 32 blocks of a chain are shared by the 64 chains of its family (a
// system prompt), so the index holds about 1.05M distinct blocks (4700 × 224 + 74 × 32).
const (
	routeBenchWorkers = 64
	routeBenchChains  = 4700
	routeBenchBlocks  = 256
	routeBenchShared  = 32
)

// routeBenchTokens returns chain c's tokens (routeBenchBlocks blocks of fleet.DefaultBlockSize).
func routeBenchTokens(c int) []uint32 {
	toks := make([]uint32, 0, routeBenchBlocks*fleet.DefaultBlockSize)
	fam := rand.New(rand.NewPCG(uint64(c/64), 1))
	for range routeBenchShared * fleet.DefaultBlockSize {
		toks = append(toks, uint32(fam.IntN(150000)))
	}
	own := rand.New(rand.NewPCG(uint64(c), 2))
	for len(toks) < cap(toks) {
		toks = append(toks, uint32(own.IntN(150000)))
	}
	return toks
}

// BenchmarkRouteDecision is the routing hot path alone for a 1000-token prompt against a filled
// event index (≥1M blocks, 64 event-fed workers): hash 62 blocks, index and pending lookups,
// cache_aware pick. Each request takes the first 40 blocks of a stored chain (drawn from 256)
// and continues with 360 tokens no cache has seen, so the lookup walks a real hit and stops at a
// real miss.
func BenchmarkRouteDecision(b *testing.B) {
	p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
	idx, _ := indexer.New(indexer.Config{})
	tree, _ := indexer.NewTree(indexer.TreeConfig{})
	pend, _ := indexer.NewPending(indexer.PendingConfig{})
	pl, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx, Tree: tree, Pending: pend}}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	for i := range routeBenchWorkers {
		w, err := pl.Fleet().AddWorker(worker.Spec{URL: "http://127.0.0.1:" + strconv.Itoa(9000+i)})
		if err != nil {
			b.Fatal(err)
		}
		w.SetHealth(true, "")
	}
	// Fed as the --kv-listen collector feeds a worker: it is then scored from the event index.
	var feeds []kvbridge.Consumer
	for _, m := range pl.Fleet().Snapshot().Members() {
		feeds = append(feeds, pl.Fleet().TopicConsumer(strings.TrimPrefix(m.Worker().URL(), "http://")))
	}
	hashes := make([]uint64, routeBenchBlocks)
	batch := indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventStored, BlockSize: fleet.DefaultBlockSize, Medium: "GPU", Hashes: hashes}}}
	ev := batch.Events
	prompts := make([][]uint32, 0, 256)
	for c := range routeBenchChains {
		toks := routeBenchTokens(c)
		for i := range hashes {
			hashes[i] = uint64(c)<<20 | uint64(i) // engine hashes: opaque, unique per block
		}
		ev[0].Tokens = toks
		feeds[c%routeBenchWorkers].Batch(0, &batch)
		if c%16 == 0 && len(prompts) < cap(prompts) {
			p := append([]uint32(nil), toks[:40*fleet.DefaultBlockSize]...)
			fresh := rand.New(rand.NewPCG(uint64(c), 3))
			for len(p) < 1000 {
				p = append(p, uint32(fresh.IntN(150000)))
			}
			prompts = append(prompts, p)
		}
	}
	if n := idx.Len(); n < 1<<20 {
		b.Fatalf("index holds %d blocks, want at least %d", n, 1<<20)
	}
	s := new(routeScratch)
	var dec Decision
	c := &Call{Req: engine.Request{Tokens: [][]uint32{prompts[0]}}}
	pl.Resolve(c, "m")
	if aerr := pl.route(s, &dec, c, nil, legWhole); aerr != nil || dec.matched != 40 {
		b.Fatalf("warm-up request matched %d blocks (%v), want 40", dec.matched, aerr)
	}
	dec.pick.Done()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Req.Tokens[0] = prompts[i%len(prompts)]
		pl.Resolve(c, "m")
		if aerr := pl.route(s, &dec, c, nil, legWhole); aerr != nil {
			b.Fatal(aerr)
		}
		dec.pick.Done() // the request ends: release the load the pick took
	}
}

// BenchmarkQueueScore is one admission-queue Score call (scorer) for a 1024-token prompt
// whose first 512 tokens are stored on one of N event-fed workers, scored on another: what
// each request of the look-ahead costs a hand-off beyond the queue's own work. Every worker
// also holds 16 chains of 32 blocks of its own (a filled index, 512 Ki blocks at 1,024
// workers). In shared-prefix the prompt's first 8 blocks (a system prompt) are also held by
// one worker in 8, so the score finds 128 holders at 1,024 workers.
func BenchmarkQueueScore(b *testing.B) {
	for _, n := range []int{3, 1024} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) { benchQueueScore(b, n, false) })
	}
	b.Run("workers=1024/shared-prefix", func(b *testing.B) { benchQueueScore(b, 1024, true) })
}

func benchQueueScore(b *testing.B, workers int, shared bool) {
	p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
	idx, _ := indexer.New(indexer.Config{})
	pl, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx}}, Logger: zap.NewNop(), MaxInFlightPerWorker: 8, Queue: QueueConfig{Max: 8}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range workers {
		w, err := pl.Fleet().AddWorker(worker.Spec{URL: "http://127.0.0.1:" + strconv.Itoa(9000+i)})
		if err != nil {
			b.Fatal(err)
		}
		w.SetHealth(true, "")
	}
	ms := pl.Fleet().Snapshot().Members()
	rng := rand.New(rand.NewPCG(1, 1))
	random := func(n int) []uint32 {
		toks := make([]uint32, n)
		for i := range toks {
			toks[i] = uint32(rng.IntN(150000))
		}
		return toks
	}
	hash := uint64(1)
	store := func(m *fleet.Member, toks []uint32) {
		hashes := make([]uint64, len(toks)/fleet.DefaultBlockSize)
		for i := range hashes {
			hashes[i], hash = hash, hash+1
		}
		batch := indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventStored, BlockSize: fleet.DefaultBlockSize, Medium: "GPU", Hashes: hashes, Tokens: toks}}}
		pl.Fleet().TopicConsumer(strings.TrimPrefix(m.Worker().URL(), "http://")).Batch(0, &batch)
	}
	for _, m := range ms {
		for range 16 {
			store(m, random(32*fleet.DefaultBlockSize))
		}
	}
	toks := random(1024)
	store(ms[1], toks[:512])
	holders := 1
	if shared {
		for i := 8; i < len(ms); i += 8 {
			store(ms[i], toks[:8*fleet.DefaultBlockSize])
			holders++
		}
	}
	c := &Call{Req: engine.Request{Tokens: [][]uint32{toks}}}
	pl.Resolve(c, "m")
	score := pl.scorer(c)
	if f := score(ms[0]); f.Elsewhere != 32 {
		b.Fatalf("got %+v, want 32 blocks elsewhere", f)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		score(ms[0])
	}
	b.ReportMetric(float64(holders), "holders")
}
