package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

const testTimeout = 10 * time.Second

// testWorker is an HTTP worker whose /health answers 200 while up is set, else 503, and
// counts the checks.
type testWorker struct {
	srv    *httptest.Server
	up     atomic.Bool
	checks atomic.Int64
}

func newTestWorker(t *testing.T, up bool) *testWorker {
	t.Helper()
	w := &testWorker{}
	w.up.Store(up)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(rw http.ResponseWriter, _ *http.Request) {
		w.checks.Add(1)
		if !w.up.Load() {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /v1/models", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
	})
	w.srv = httptest.NewServer(mux)
	t.Cleanup(w.srv.Close)
	return w
}

// runFleet builds a fleet (one default pool named m) with cfg, adds the workers and runs it
// until the test ends.
func runFleet(t *testing.T, cfg Config, urls ...string) *Fleet {
	t.Helper()
	idx, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg, []PoolConfig{{Name: "m", Index: idx}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		if _, err := f.AddWorker(worker.Spec{URL: u}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return f
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !harness.Eventually(testTimeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A worker that fails its first checks is checked again within a fraction of a second, not a
// health interval later, and joins as soon as it answers.
func TestHealthRecheckSoon(t *testing.T) {
	w := newTestWorker(t, false)
	f := runFleet(t, Config{HealthInterval: time.Hour}, w.srv.URL)
	waitFor(t, "three checks of the failing worker", func() bool { return w.checks.Load() >= 3 })
	w.up.Store(true)
	start := time.Now()
	waitFor(t, "the worker healthy", func() bool { return f.Workers()[0].Healthy() })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("healthy %v after it came up, want well under the hour's interval (backoff from %v)", d, healthRecheckMin)
	}
	// Healthy, it is checked once per interval: no further check within the next re-check
	// delays.
	n := w.checks.Load()
	if harness.Eventually(4*healthRecheckMin, func() bool { return w.checks.Load() > n }) {
		t.Errorf("a healthy worker was checked again within %v (interval 1h)", 4*healthRecheckMin)
	}
}

// MarkDown (a request failed in transport) brings the next check forward.
func TestMarkDownRechecksSoon(t *testing.T) {
	w := newTestWorker(t, true)
	f := runFleet(t, Config{HealthInterval: time.Hour}, w.srv.URL)
	waitFor(t, "the worker healthy", func() bool { return f.Workers()[0].Healthy() })
	m := f.Snapshot().Members()[0]
	if !m.MarkDown("request failed: reset") {
		t.Fatal("MarkDown of a healthy worker reported it down already")
	}
	if m.Worker().Healthy() {
		t.Fatal("healthy after MarkDown")
	}
	waitFor(t, "the worker healthy again after a re-check", func() bool { return m.Worker().Healthy() })
}

// Readiness waits, for up to one health interval after start, for a worker that has never
// been healthy, even with another worker healthy; it does not wait for a worker that was
// healthy and failed.
func TestReadyWaitsForStartingWorkers(t *testing.T) {
	a, b := newTestWorker(t, true), newTestWorker(t, false)
	f := runFleet(t, Config{HealthInterval: time.Hour}, a.srv.URL, b.srv.URL)
	waitFor(t, "a healthy and b checked", func() bool {
		return f.Workers()[0].Healthy() && f.Workers()[1].Checked()
	})
	if ok, reason := f.Ready(); ok {
		t.Fatal("ready while b, never healthy, is within its first health interval")
	} else if want := "worker " + b.srv.URL + " not healthy yet"; len(reason) < len(want) || reason[:len(want)] != want {
		t.Errorf("reason: got %q, want it to name b", reason)
	}
	b.up.Store(true)
	waitFor(t, "ready once b is healthy", func() bool { ok, _ := f.Ready(); return ok })
	// b fails now: it was healthy, so readiness stays.
	b.up.Store(false)
	f.Snapshot().Members()[1].MarkDown("request failed")
	if ok, reason := f.Ready(); !ok {
		t.Errorf("not ready after a worker that was healthy failed: %s", reason)
	}
}

// A worker that never comes up holds readiness back for one health interval, no longer.
func TestReadyStopsWaitingAfterOneInterval(t *testing.T) {
	a, b := newTestWorker(t, true), newTestWorker(t, false)
	const interval = 300 * time.Millisecond
	f := runFleet(t, Config{HealthInterval: interval}, a.srv.URL, b.srv.URL)
	start := time.Now()
	waitFor(t, "ready without b", func() bool { ok, _ := f.Ready(); return ok })
	if d := time.Since(start); d < interval/2 {
		t.Errorf("ready %v after start with b never healthy, want about the %v interval", d, interval)
	}
}

// storeBlocks puts n blocks of worker m's into its pool's index, as its events would.
func storeBlocks(t *testing.T, m *Member, n int) {
	t.Helper()
	toks := make([]uint32, n*DefaultBlockSize)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	keys := indexer.AppendBlockKeys(nil, toks, DefaultBlockSize, "")
	hs := make([]uint64, len(keys))
	copy(hs, keys)
	res := m.Pool().Lookup().Index.Apply(m.LookupWorker().IDs[0], []indexer.Event{{Kind: indexer.EventStored, Hashes: hs, Tokens: toks, BlockSize: DefaultBlockSize, Medium: "GPU"}})
	if res.Stored != n {
		t.Fatalf("stored %d of %d blocks", res.Stored, n)
	}
}

// A worker down for less than a health interval keeps its blocks in the index (a flapping
// health check must not send its prefixes elsewhere once it is back); one down for longer loses
// them.
func TestForgetOnlyAfterAnInterval(t *testing.T) {
	w := newTestWorker(t, true)
	const interval = 2 * time.Second
	f := runFleet(t, Config{HealthInterval: interval}, w.srv.URL)
	m := f.Snapshot().Members()[0]
	waitFor(t, "the worker healthy", m.Worker().Healthy)
	storeBlocks(t, m, 4)
	// A brief outage: a failed request marks it down, the next checks find it up again.
	m.MarkDown("request failed: reset")
	waitFor(t, "the worker healthy again", m.Worker().Healthy)
	if n := m.IndexBlocks(); n != 4 {
		t.Fatalf("blocks after a brief outage: got %d, want 4 (kept)", n)
	}
	// A long one: down for good.
	w.up.Store(false)
	m.MarkDown("request failed: refused")
	start := time.Now()
	waitFor(t, "the blocks of a worker down for an interval forgotten", func() bool { return m.IndexBlocks() == 0 })
	if d := time.Since(start); d < interval/2 {
		t.Errorf("forgotten %v after going down, want about one health interval (%v)", d, interval)
	}
	if m.Worker().Healthy() {
		t.Error("healthy while its /health fails")
	}
}

// A failed health check of a worker that is serving requests is checked again rather than
// taking it out at once (a /health that flaps under load); if its checks keep failing for a
// health interval it goes out. A worker that serves nothing goes out at its first failure.
func TestFailedCheckWhileServing(t *testing.T) {
	const interval = 2 * time.Second
	serving, idle := newTestWorker(t, true), newTestWorker(t, true)
	f := runFleet(t, Config{HealthInterval: interval}, serving.srv.URL, idle.srv.URL)
	ms := f.Snapshot().Members()
	s, i := ms[0], ms[1]
	waitFor(t, "both healthy", func() bool { return s.Worker().Healthy() && i.Worker().Healthy() })
	// The serving worker answers requests all along (as the router marks it, at each first
	// piece), until the test ends.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			s.Worker().MarkServed(time.Now())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	serving.up.Store(false)
	idle.up.Store(false)
	waitFor(t, "the idle worker out at its failed check", func() bool { return !i.Worker().Healthy() })
	waitFor(t, "a failed check of the serving worker", func() bool { return s.HealthCheckFailures() > 0 })
	start := time.Now()
	if !s.Worker().Healthy() {
		t.Fatal("the serving worker was taken out at its first failed check")
	}
	waitFor(t, "the serving worker out after an interval of failed checks", func() bool { return !s.Worker().Healthy() })
	if d := time.Since(start); d > 2*interval {
		t.Errorf("out %v after its first failed check, want within about one interval (%v)", d, interval)
	}
	if n := s.HealthCheckFailures(); n < 3 {
		t.Errorf("failed checks counted: %d, want the re-checks too", n)
	}
}
