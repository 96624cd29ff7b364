package fleetsim

import (
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/pkg/indexer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSteadyState: a filled worker stays at its capacity, stores and removes about as many
// blocks as each other, and a request shares a live chain of one worker, whose index then
// matches the blocks Request says it holds.
func TestSteadyState(t *testing.T) {
	cfg := DefaultConfig(4)
	cfg.BlocksPerWorker = 2000
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for w := range 4 {
		f.Fill(w, func(b *indexer.Batch) { ix.Apply(indexer.WorkerID(w), b.Events) })
		if !f.Full(w) {
			t.Fatalf("worker %d not full after Fill", w)
		}
	}
	stored, removed := 0, 0
	for i := range 4000 {
		w := i % 4
		b := f.Next(w)
		r := ix.Apply(indexer.WorkerID(w), b.Events)
		if r.UnknownParents > 0 || r.Skipped > 0 {
			t.Fatalf("batch %d: %+v, want every chain placed", i, r)
		}
		stored, removed = stored+r.Stored, removed+r.Removed
	}
	prefix := cfg.FamiliesPerWorker * cfg.FamilyBlocks
	for w := range 4 {
		if got := ix.WorkerBlocks(indexer.WorkerID(w)); got > cfg.BlocksPerWorker+prefix || got < cfg.BlocksPerWorker-cfg.MaxBatch {
			t.Errorf("worker %d holds %d blocks, want about %d (+%d prefix)", w, got, cfg.BlocksPerWorker, prefix)
		}
	}
	if d := stored - removed; d < -cfg.MaxBatch*4 || d > cfg.MaxBatch*4 {
		t.Errorf("stored %d, removed %d: want them balanced in the steady state", stored, removed)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	req, held := f.Request(nil, rng, 4096)
	if len(req) != 4096 {
		t.Fatalf("request of %d tokens, want 4096", len(req))
	}
	keys := indexer.AppendBlockKeys(nil, req, cfg.BlockSize, "")
	best := 0
	for _, m := range ix.Match(keys, nil) {
		best = max(best, m.Blocks)
	}
	if best != held {
		t.Errorf("the index matches %d blocks of the request, want the %d Request says a worker holds", best, held)
	}
}
