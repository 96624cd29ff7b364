package fleet

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Select keeps, of the pool's workers that serve the model, the healthy ones under the
// in-flight bound whose role may serve the leg; it rejects the down and the full of any role,
// and reports a pool disaggregated when any worker but the excluded one has role=prefill,
// healthy or not.
func TestSelectRolesAndDisagg(t *testing.T) {
	idx, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{}, []PoolConfig{{Name: "m", Index: idx}})
	if err != nil {
		t.Fatal(err)
	}
	add := func(port string, role worker.Role, healthy bool, inflight int) *worker.Worker {
		spec := worker.Spec{URL: "http://127.0.0.1:" + port, Role: role}
		if role == worker.RolePrefill {
			spec.BootstrapPort = worker.DefaultBootstrapPort
		}
		w, err := f.AddWorker(spec)
		if err != nil {
			t.Fatal(err)
		}
		w.SetHealth(healthy, "")
		for range inflight {
			w.Acquire(worker.Hold{})
		}
		return w
	}
	add("1", worker.RolePrefill, true, 0)  // prefill
	add("2", worker.RoleDecode, true, 0)   // decode
	add("3", worker.RoleBoth, true, 0)     // both
	add("4", worker.RoleDecode, false, 0)  // decode, down
	add("5", worker.RolePrefill, true, 2)  // prefill, full at 2
	add("6", worker.RolePrefill, false, 0) // prefill, down
	snap := f.Snapshot()
	tgt, known := snap.Resolve("m")
	if !known {
		t.Fatal("model m unknown")
	}
	ports := func(ms []*Member) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Worker().URL()[strings.LastIndex(m.Worker().URL(), ":")+1:])
		}
		return strings.Join(out, ",")
	}
	var sel Selection
	for _, tc := range []struct {
		prefill       bool
		exclude       string
		cands, reject string
		full, disagg  bool
	}{
		{prefill: false, cands: "2,3", reject: "4,5,6", full: true, disagg: true},
		{prefill: true, cands: "1,3", reject: "4,5,6", full: true, disagg: true},
		{prefill: true, exclude: "1", cands: "3", reject: "4,5,6", full: true, disagg: true},
	} {
		var ex *Member
		if tc.exclude != "" {
			ex = snap.Member("http://127.0.0.1:" + tc.exclude)
		}
		snap.Select(&sel, tgt, ex, 2, tc.prefill)
		if got := ports(sel.Candidates); got != tc.cands {
			t.Errorf("prefill=%v exclude=%q: candidates %s, want %s", tc.prefill, tc.exclude, got, tc.cands)
		}
		if got := ports(sel.Rejected); got != tc.reject {
			t.Errorf("prefill=%v exclude=%q: rejected %s, want %s", tc.prefill, tc.exclude, got, tc.reject)
		}
		if !sel.Known || sel.Full != tc.full || sel.Disagg != tc.disagg {
			t.Errorf("prefill=%v exclude=%q: known %v full %v disagg %v, want true %v %v", tc.prefill, tc.exclude, sel.Known, sel.Full, sel.Disagg, tc.full, tc.disagg)
		}
	}

	// A pool whose only prefill worker is down still runs disaggregated; one whose only prefill
	// worker is the excluded one does not.
	if f, err = New(Config{}, []PoolConfig{{Name: "m", Index: idx}}); err != nil { // add's fleet
		t.Fatal(err)
	}
	add("7", worker.RoleDecode, true, 0)
	add("8", worker.RolePrefill, false, 0)
	snap = f.Snapshot()
	tgt, _ = snap.Resolve("m")
	snap.Select(&sel, tgt, nil, 0, false)
	if ports(sel.Candidates) != "7" || !sel.Disagg || sel.Full {
		t.Errorf("down prefill worker: candidates %s disagg %v full %v, want 7 true false", ports(sel.Candidates), sel.Disagg, sel.Full)
	}
	snap.Select(&sel, tgt, snap.Member("http://127.0.0.1:8"), 0, false)
	if sel.Disagg || len(sel.Rejected) != 0 {
		t.Errorf("excluded prefill worker: disagg %v rejected %s, want false and none", sel.Disagg, ports(sel.Rejected))
	}
}

// Select reads each candidate's LookupWorker in its pass; Drop and Only keep that list in step
// with the candidates (a route scores Lookup[i] as Candidates[i]: out of step, it would credit
// one worker with another's cache).
func TestSelectionLookupInStep(t *testing.T) {
	idx, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{}, []PoolConfig{{Name: "m", Index: idx}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		w, err := f.AddWorker(worker.Spec{URL: "http://127.0.0.1:" + strconv.Itoa(100+i), DPSize: 1 + i%3, BlockSize: 16 * (1 + i%2)})
		if err != nil {
			t.Fatal(err)
		}
		w.SetHealth(true, "")
	}
	snap := f.Snapshot()
	tgt, _ := snap.Resolve("m")
	var sel Selection
	check := func(what string, want int) {
		t.Helper()
		if len(sel.Candidates) != want || len(sel.Lookup) != want {
			t.Fatalf("%s: %d candidates and %d lookups, want %d", what, len(sel.Candidates), len(sel.Lookup), want)
		}
		for i, m := range sel.Candidates {
			if got, wantLW := sel.Lookup[i], m.LookupWorker(); !slices.Equal(got.IDs, wantLW.IDs) || got.BlockSize != wantLW.BlockSize || got.EventFed != wantLW.EventFed {
				t.Errorf("%s: Lookup[%d] = %+v, candidate %s has %+v", what, i, got, m.Worker().URL(), wantLW)
			}
		}
	}
	snap.Select(&sel, tgt, nil, 0, false)
	check("select", 9)
	odd := func(m *Member) bool { return m.ids[0]%2 == 1 }
	want := 0
	for _, m := range sel.Candidates {
		if !odd(m) {
			want++
		}
	}
	if n := sel.Drop(odd, true); n != 9-want || len(sel.Rejected) != n {
		t.Errorf("Drop removed %d (rejected %d), want %d", n, len(sel.Rejected), 9-want)
	}
	check("drop", want)
	first := sel.Candidates[0]
	sel.Drop(func(m *Member) bool { return m == first }, false)
	check("drop first", want-1)
	last := snap.Members()[8]
	sel.Only(last)
	check("only", 1)
	if sel.Candidates[0] != last {
		t.Errorf("Only: candidate %s", sel.Candidates[0].Worker().URL())
	}
}
