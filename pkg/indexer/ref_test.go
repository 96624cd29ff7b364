package indexer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// refIndex is the deliberately simple reference model of Index: plain maps and loops, no
// eviction. Its semantics are the documented ones of Apply.
type refIndex struct {
	engine map[WorkerID]map[uint64]uint64 // worker → engine hash → key
	holds  map[uint64]map[WorkerID]bool   // key → workers
}

func newRef() *refIndex {
	return &refIndex{engine: map[WorkerID]map[uint64]uint64{}, holds: map[uint64]map[WorkerID]bool{}}
}

func (r *refIndex) add(w WorkerID, k uint64) {
	if r.holds[k] == nil {
		r.holds[k] = map[WorkerID]bool{}
	}
	r.holds[k][w] = true
}

func (r *refIndex) remove(w WorkerID, k uint64) bool {
	if !r.holds[k][w] {
		return false
	}
	delete(r.holds[k], w)
	if len(r.holds[k]) == 0 {
		delete(r.holds, k)
	}
	return true
}

func (r *refIndex) apply(w WorkerID, evs []Event) ApplyResult {
	var res ApplyResult
	for _, ev := range evs {
		if ev.Kind == EventCleared {
			res.Removed += r.drop(w)
			continue
		}
		if ev.Medium != "" && ev.Medium != "GPU" || w >= MaxWorkers || (ev.Kind != EventStored && ev.Kind != EventRemoved) {
			res.Skipped++
			continue
		}
		if r.engine[w] == nil {
			r.engine[w] = map[uint64]uint64{}
		}
		em := r.engine[w]
		if ev.Kind == EventRemoved {
			for _, e := range ev.Hashes {
				if k, ok := em[e]; ok {
					delete(em, e)
					if r.remove(w, k) {
						res.Removed++
					}
				}
			}
			continue
		}
		if len(ev.Hashes) == 0 || ev.BlockSize < 1 || len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize {
			res.Skipped++
			continue
		}
		ns := ev.LoraName
		if ns == "" && ev.HasLoraID {
			ns = Namespace("", ev.LoraID, true, "")
		}
		var prev uint64
		if ev.HasParent {
			p, ok := em[ev.Parent]
			if !ok {
				res.UnknownParents++
				continue
			}
			prev = p
		}
		for i, e := range ev.Hashes {
			c := ContentHash(ev.Tokens[i*ev.BlockSize : (i+1)*ev.BlockSize])
			var k uint64
			if i == 0 && !ev.HasParent {
				k = RootHash(c, ns)
			} else {
				k = ChainHash(prev, c)
			}
			prev = k
			if old, ok := em[e]; ok && old != k {
				r.remove(w, old)
			}
			em[e] = k
			r.add(w, k)
		}
		res.Stored += len(ev.Hashes)
	}
	return res
}

func (r *refIndex) drop(w WorkerID) int {
	n := 0
	for _, k := range r.engine[w] {
		if r.remove(w, k) {
			n++
		}
	}
	delete(r.engine, w)
	return n
}

func (r *refIndex) match(keys []uint64) []WorkerMatch {
	var out []WorkerMatch
	if len(keys) == 0 {
		return out
	}
	for w := range r.holds[keys[0]] {
		n := 0
		for n < len(keys) && r.holds[keys[n]][w] {
			n++
		}
		out = append(out, WorkerMatch{w, n})
	}
	return sortMatches(out)
}

func (r *refIndex) workerBlocks(w WorkerID) int {
	n := 0
	for _, ws := range r.holds {
		if ws[w] {
			n++
		}
	}
	return n
}

func sortMatches(m []WorkerMatch) []WorkerMatch {
	slices.SortFunc(m, func(a, b WorkerMatch) int { return int(a.Worker) - int(b.Worker) })
	if len(m) == 0 {
		return nil
	}
	return m
}

// opSource feeds the event-sequence generator: random in the property test, fuzz bytes in the
// fuzz test.
type opSource interface {
	intn(n int) int // in [0, n)
	done() bool
}

type randSource struct{ r *rand.Rand }

func (s randSource) intn(n int) int { return s.r.IntN(n) }
func (randSource) done() bool       { return false }

type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) intn(n int) int {
	if s.i >= len(s.b) {
		return 0
	}
	v := int(s.b[s.i]) % n
	s.i++
	return v
}
func (s *byteSource) done() bool { return s.i >= len(s.b) }

// scenario holds the generator's universe: a few documents that share prefixes, a handful of
// workers (some past 64 so worker sets overflow the inline bitset), block sizes and namespaces.
type scenario struct {
	docs    [][]uint32
	workers []WorkerID
	sizes   []int
	loras   []struct {
		name  string
		id    int64
		hasID bool
	}
}

func newScenario() *scenario {
	rng := rand.New(rand.NewPCG(1, 2))
	sc := &scenario{
		workers: []WorkerID{0, 1, 5, 63, 64, 100, 200},
		sizes:   []int{1, 2, 4},
	}
	sc.loras = append(sc.loras, struct {
		name  string
		id    int64
		hasID bool
	}{"", 0, false}, struct {
		name  string
		id    int64
		hasID bool
	}{"lora-a", 1, true}, struct {
		name  string
		id    int64
		hasID bool
	}{"", 7, true})
	base := make([]uint32, 64)
	for i := range base {
		base[i] = uint32(rng.IntN(4))
	}
	for d := 0; d < 6; d++ {
		doc := slices.Clone(base)
		// Documents share a prefix of varying length, then diverge.
		for i := 4 * d; i < len(doc); i++ {
			doc[i] = uint32(rng.IntN(3) + 10*d)
		}
		sc.docs = append(sc.docs, doc)
	}
	return sc
}

// engineHashes returns the engine hashes a consistent engine would report for blocks
// [from, to) of doc under block size bs and lora l: a chain function of the tokens.
func engineHashes(doc []uint32, bs, l, from, to int) (parent uint64, hs []uint64) {
	var h uint64 = 0x5bd1e995 + uint64(l)*0x9E3779B97F4A7C15 + uint64(bs)
	for i := 0; i < to; i++ {
		h = ChainHash(h, ContentHash(doc[i*bs:(i+1)*bs]))
		if i == from-1 {
			parent = h
		}
		if i >= from {
			hs = append(hs, h)
		}
	}
	return parent, hs
}

// genEvents draws one Apply call's events for worker w.
func (sc *scenario) genEvents(src opSource, known []uint64) []Event {
	n := 1 + src.intn(3)
	var evs []Event
	for range n {
		d := sc.docs[src.intn(len(sc.docs))]
		bs := sc.sizes[src.intn(len(sc.sizes))]
		li := src.intn(len(sc.loras))
		l := sc.loras[li]
		nblocks := len(d) / bs
		switch op := src.intn(20); {
		case op < 9: // consistent store, with or without parent
			from := 0
			if src.intn(2) == 0 {
				from = src.intn(nblocks)
			}
			to := min(nblocks, from+1+src.intn(6))
			parent, hs := engineHashes(d, bs, li, from, to)
			evs = append(evs, Event{Kind: EventStored, Hashes: hs, Parent: parent, HasParent: from > 0,
				Tokens: d[from*bs : to*bs], BlockSize: bs, LoraName: l.name, LoraID: l.id, HasLoraID: l.hasID, Medium: "GPU"})
		case op < 14: // removal of consistent hashes (maybe unknown), in the middle or at the end
			from := src.intn(nblocks)
			_, hs := engineHashes(d, bs, li, from, min(nblocks, from+1+src.intn(3)))
			evs = append(evs, Event{Kind: EventRemoved, Hashes: hs})
		case op < 16 && len(known) > 0: // remove a hash the worker holds
			evs = append(evs, Event{Kind: EventRemoved, Hashes: []uint64{known[src.intn(len(known))]}, Medium: "GPU"})
		case op < 17: // anomaly: arbitrary hashes (collide, move, self-parent) after a known parent
			k := 1 + src.intn(2)
			hs := make([]uint64, k)
			for i := range hs {
				hs[i] = uint64(src.intn(8))
				if len(known) > 0 && src.intn(2) == 0 {
					hs[i] = known[src.intn(len(known))]
				}
			}
			ev := Event{Kind: EventStored, Hashes: hs, Tokens: d[:k*bs], BlockSize: bs}
			if len(known) > 0 && src.intn(3) > 0 {
				ev.Parent, ev.HasParent = known[src.intn(len(known))], true
			}
			evs = append(evs, ev)
		case op < 18:
			evs = append(evs, Event{Kind: EventCleared})
		case op < 19: // CPU tier and malformed events are skipped
			_, hs := engineHashes(d, bs, li, 0, 1)
			evs = append(evs, Event{Kind: EventStored, Hashes: hs, Tokens: d[:bs], BlockSize: bs, Medium: "CPU"},
				Event{Kind: EventStored, Hashes: hs, Tokens: d[:bs+1], BlockSize: bs})
		default: // parent the worker never stored
			_, hs := engineHashes(d, bs, li, 1, 2)
			evs = append(evs, Event{Kind: EventStored, Hashes: hs, Parent: 0xdead, HasParent: true, Tokens: d[bs : 2*bs], BlockSize: bs})
		}
	}
	return evs
}

func (sc *scenario) genRequest(src opSource) []uint64 {
	d := slices.Clone(sc.docs[src.intn(len(sc.docs))])
	bs := sc.sizes[src.intn(len(sc.sizes))]
	l := sc.loras[src.intn(len(sc.loras))]
	n := src.intn(len(d) + 1)
	if n > 0 && src.intn(4) == 0 {
		d[src.intn(n)] ^= 1 // a hole in the middle
	}
	return AppendBlockKeys(nil, d[:n], bs, Namespace(l.name, l.id, l.hasID, ""))
}

// runScenario drives an Index and the reference through steps generated by src and compares
// every observable after each step.
func runScenario(t *testing.T, src opSource, steps int) {
	t.Helper()
	sc := newScenario()
	ix, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ref := newRef()
	// small evicts under the same events; it cannot match the reference, but it must stay
	// within its budget with consistent counters.
	const budget = 16
	small, err := New(Config{MaxBlocks: budget})
	if err != nil {
		t.Fatal(err)
	}
	var dst []WorkerMatch
	for step := 0; step < steps && !src.done(); step++ {
		w := sc.workers[src.intn(len(sc.workers))]
		var known []uint64
		for e := range ref.engine[w] {
			known = append(known, e)
		}
		slices.Sort(known)
		switch src.intn(40) {
		case 0:
			ix.ResetWorker(w)
			small.ResetWorker(w)
			ref.drop(w)
		case 1:
			ix.RemoveWorker(w)
			small.RemoveWorker(w)
			ref.drop(w)
		default:
			evs := sc.genEvents(src, known)
			small.Apply(w, evs)
			got, want := ix.Apply(w, evs), ref.apply(w, evs)
			if got != want {
				t.Fatalf("step %d: Apply(%d, %+v) = %+v, want %+v", step, w, evs, got, want)
			}
		}
		for range 4 {
			keys := sc.genRequest(src)
			dst = ix.Match(keys, dst)
			got := sortMatches(slices.Clone(dst))
			if diff := cmp.Diff(ref.match(keys), got); diff != "" {
				t.Fatalf("step %d: Match(%d keys) (-want +got):\n%s", step, len(keys), diff)
			}
		}
		for _, w := range sc.workers {
			if got, want := ix.WorkerBlocks(w), ref.workerBlocks(w); got != want {
				t.Fatalf("step %d: WorkerBlocks(%d) = %d, want %d", step, w, got, want)
			}
		}
		if got, want := ix.Len(), len(ref.holds); got != want {
			t.Fatalf("step %d: Len = %d, want %d", step, got, want)
		}
		if got := small.Len(); got > budget {
			t.Fatalf("step %d: evicting index Len = %d > MaxBlocks %d", step, got, budget)
		}
		checkTable(t, small)
	}
}

func TestIndexMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run("", func(t *testing.T) {
			runScenario(t, randSource{rand.New(rand.NewPCG(seed, 99))}, 3000)
		})
	}
}

func FuzzIndexEvents(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 0, 0, 0, 1, 0, 0, 5, 9, 13, 200, 17, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4})
	rng := rand.New(rand.NewPCG(7, 7))
	seed := make([]byte, 512)
	for i := range seed {
		seed[i] = byte(rng.IntN(256))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		runScenario(t, &byteSource{b: b}, 1<<30)
	})
}
