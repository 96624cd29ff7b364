package admission

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"
)

// TestClosedLoopFairness runs the e2e admission test's load through the queue alone, as a
// discrete-event simulation: two keys of one band in closed loops (16 clients and 8, each
// sending its next request a client gap after its last completes) over 8 slots, every request
// the same cost and a service time with ±20% jitter. Both keys always have more clients than
// half the slots, so each should complete half the requests: FCFS would give the smaller a
// third.
func TestClosedLoopFairness(t *testing.T) {
	for _, gap := range []time.Duration{0, 2 * time.Millisecond, 20 * time.Millisecond} {
		share := simulateClosedLoop(t, gap, 1)
		t.Logf("client gap %v: key b's share %.3f", gap, share)
		if share < 0.48 || share > 0.52 {
			t.Errorf("client gap %v: key b's share of the completions %.3f, want 0.50 ± 0.02", gap, share)
		}
	}
}

type simEvent struct {
	at     time.Duration
	key    string
	worker string // "" for an arrival; else a completion freeing a slot of worker
}

type simEvents []simEvent

func (h simEvents) Len() int           { return len(h) }
func (h simEvents) Less(i, j int) bool { return h[i].at < h[j].at }
func (h simEvents) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simEvents) Push(x any)        { *h = append(*h, x.(simEvent)) }
func (h *simEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simulateClosedLoop returns key b's share of the completions after a warm-up.
func simulateClosedLoop(t *testing.T, gap time.Duration, seed uint64) float64 {
	q, clk := newTestQueue(t, Config{MaxLen: 1024, LookAhead: 8})
	start := clk.Now()
	rng := rand.New(rand.NewPCG(seed, 7))
	const service = 80 * time.Millisecond
	free := map[string]int{"w0": 4, "w1": 4}
	keyOf := map[*Ticket[string]]string{}
	var ev simEvents
	for range 16 {
		heap.Push(&ev, simEvent{key: "a"})
	}
	for range 8 {
		heap.Push(&ev, simEvent{key: "b"})
	}
	grant := func(now time.Duration, w string) {
		for free[w] > 0 {
			tk, ok := q.Next(w)
			if !ok {
				return
			}
			free[w]--
			d := service + time.Duration(rng.Int64N(int64(service)*2/5)) - service/5
			heap.Push(&ev, simEvent{at: now + d, key: keyOf[tk], worker: w})
		}
	}
	done := map[string]int{}
	for n := 0; n < 6000; {
		e := heap.Pop(&ev).(simEvent)
		clk.advance(start.Add(e.at).Sub(clk.Now()))
		if e.worker == "" {
			tk, err := q.Enqueue(Request[string]{Key: e.key, Cost: 600})
			if err != nil {
				t.Fatal(err)
			}
			keyOf[tk] = e.key
			grant(e.at, "w0")
			grant(e.at, "w1")
			continue
		}
		free[e.worker]++
		n++
		if n > 1000 {
			done[e.key]++
		}
		heap.Push(&ev, simEvent{at: e.at + gap, key: e.key})
		grant(e.at, e.worker)
	}
	return float64(done["b"]) / float64(done["a"]+done["b"])
}
