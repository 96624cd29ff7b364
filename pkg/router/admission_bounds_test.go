package router

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
)

// engineWorker is a fake engine whose /metrics reports a waiting count the test sets (as
// other gateways' or direct clients' requests would make it), and whose completions, like
// gatedWorker's, wait for a token on release.
type engineWorker struct {
	srv     *httptest.Server
	waiting atomic.Int64
	scrapes atomic.Int64
	arrived chan string
	release chan struct{}
}

func newEngineWorker(t *testing.T) *engineWorker {
	t.Helper()
	ew := &engineWorker{arrived: make(chan string, 16), release: make(chan struct{}, 16)}
	done := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_running{model_name=\"m\"} 1\nvllm:num_requests_waiting{model_name=\"m\"} %d\n", ew.waiting.Load())
		ew.scrapes.Add(1)
	})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ew.arrived <- string(b)
		select {
		case <-ew.release:
		case <-done:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"stop"}]}`)
	})
	ew.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(done)
		ew.srv.Close()
	})
	return ew
}

// next waits for the next completion body the engine receives.
func (ew *engineWorker) next(t *testing.T) string {
	t.Helper()
	select {
	case b := <-ew.arrived:
		return b
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out waiting for a request at the engine")
	}
	return ""
}

// TestQueueEngineWaiting: with --max-waiting-per-worker, a worker whose engine queues requests
// (here: of other clients) is full although this gateway's in-flight count is under its bound,
// yet it takes one request while the gateway has none there; the request queued behind it is
// admitted as soon as a scrape shows the engine drained, with no request of the gateway ending.
func TestQueueEngineWaiting(t *testing.T) {
	ew := newEngineWorker(t)
	ew.waiting.Store(3)
	g := newTestGateway(t, testConfig{MaxInFlightPerWorker: 4, EngineMetricsInterval: 20 * time.Millisecond,
		Queue: pipeline.QueueConfig{Max: 8, MaxWaitingPerWorker: 1}}, ew.srv.URL)
	w := g.rt.Fleet().Workers()[0]
	g.waitFor(t, "the engine's waiting requests scraped", func() bool { n, ok := w.EngineWaiting(time.Now(), time.Second); return ok && n == 3 })
	ctx := t.Context()

	first := g.sendAsync(ctx, "first", nil)
	if got := ew.next(t); !strings.Contains(got, `"first"`) {
		t.Fatalf("with none of the gateway's in flight the worker takes one: got %s", got)
	}
	second := g.sendAsync(ctx, "second", nil)
	g.queued(t, 1)
	// Several scrapes and kicks later it still waits: the engine still queues.
	from := ew.scrapes.Load()
	g.waitFor(t, "ten more scrapes", func() bool { return ew.scrapes.Load() >= from+10 })
	select {
	case b := <-ew.arrived:
		t.Fatalf("admitted while the engine queues 3: %s", b)
	default:
	}
	g.queued(t, 1)

	ew.waiting.Store(0) // the other clients' requests ran
	if got := ew.next(t); !strings.Contains(got, `"second"`) {
		t.Fatalf("after the engine drained: got %s, want the queued request", got)
	}
	ew.release <- struct{}{}
	ew.release <- struct{}{}
	for _, c := range []<-chan result{first, second} {
		if r := await(t, c); r.status != http.StatusOK {
			t.Errorf("answer: got %d %s, want 200", r.status, r.body)
		}
	}
}

// TestQueueEngineWaitingNeedsScrapes: the engine bound without the queue or without
// engine-load scrapes is a configuration error.
func TestQueueEngineWaitingNeedsScrapes(t *testing.T) {
	for _, tc := range []testConfig{
		{MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 4, MaxWaitingPerWorker: 1}},
		{MaxInFlightPerWorker: 1, EngineMetricsInterval: time.Second, Queue: pipeline.QueueConfig{MaxWaitingPerWorker: 1}},
	} {
		cfg, _ := tc.config(t, nil)
		if _, err := New(cfg); err == nil {
			t.Errorf("New with %+v: got nil error", tc.Queue)
		}
	}
}

// TestQueueClientTimeout: the timeout the client's SDK announces (X-Stainless-Timeout, in
// seconds) ends its wait in the queue when it is shorter than --queue-timeout.
func TestQueueClientTimeout(t *testing.T) {
	gw := newGatedWorker(t)
	g := newTestGateway(t, testConfig{MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 4, Timeout: time.Hour}}, gw.url())
	ctx := t.Context()
	hold := g.sendAsync(ctx, "hold", nil)
	gw.next(t)
	start := time.Now()
	r := await(t, g.sendAsync(ctx, "waits", map[string]string{"X-Stainless-Timeout": "1"}))
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"code":"queue_timeout"`) || !strings.Contains(r.body, "(1s)") {
		t.Errorf("got %d %s, want 503 queue_timeout naming the client's 1s", r.status, r.body)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("answered after %v, before the client's timeout", d)
	}
	gw.release <- struct{}{}
	await(t, hold)
}

// TestQueueModelReplaced: requests waiting in a model's queue when the model is replaced
// (SetModel: a config reload) or removed are answered at once with a retryable 503
// model_reconfigured, not left to wait for their timeout; a retry is served by the new pool.
// The package's leak check sees no waiter left behind.
func TestQueueModelReplaced(t *testing.T) {
	for _, remove := range []bool{false, true} {
		t.Run(fmt.Sprintf("remove=%v", remove), func(t *testing.T) {
			gw := newGatedWorker(t)
			alpha := func() Model {
				m := newModel(t, "alpha", pairTokenizer{})
				m.Policy = mustPolicy(t, policy.NameCacheAware)
				return m
			}
			g := newTestGateway(t, testConfig{Models: []Model{alpha()}, MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 4, Timeout: time.Hour}},
				"url="+gw.url()+",model=alpha")
			ctx := t.Context()
			body := func(p string) string { return fmt.Sprintf(`{"model":"alpha","prompt":%q}`, p) }
			hold := g.sendBodyAsync(ctx, body("hold"), nil)
			gw.next(t)
			waiting := g.sendBodyAsync(ctx, body("waits"), nil)
			g.queued(t, 1)
			var err error
			if remove {
				err = g.rt.RemoveModel("alpha")
			} else {
				err = g.rt.SetModel(alpha())
			}
			if err != nil {
				t.Fatal(err)
			}
			r := await(t, waiting)
			if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"code":"model_reconfigured"`) || r.header.Get("Retry-After") == "" {
				t.Errorf("queued across the change: got %d (Retry-After %q) %s, want 503 model_reconfigured with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
			}
			g.queued(t, 0)
			gw.release <- struct{}{}
			await(t, hold)
			if remove {
				return
			}
			g.waitFor(t, "the worker serving the new pool", func() bool {
				m := g.member(gw.url())
				return m != nil && m.Pool().Name() == "alpha" && m.Worker().Healthy()
			})
			gw.release <- struct{}{}
			if r := await(t, g.sendBodyAsync(ctx, body("retry"), nil)); r.status != http.StatusOK {
				t.Errorf("the retry: got %d %s, want 200", r.status, r.body)
			}
		})
	}
}

// TestQueueReserve: with a reserved slot per worker, a batch request (band > 0) waits while
// the worker holds its limit minus the reserve (of any band), and an interactive one (band 0)
// takes the reserved slot at once; the batch request gets the worker when it is under the
// batch bound again, the hand-off counting every request still on it.
func TestQueueReserve(t *testing.T) {
	gw := newGatedWorker(t)
	g := newTestGateway(t, testConfig{MaxInFlightPerWorker: 2, Queue: pipeline.QueueConfig{Max: 8, Reserve: 1}}, gw.url())
	ctx := t.Context()
	batch := map[string]string{pipeline.HeaderPriority: "5"}
	b1 := g.sendAsync(ctx, "b1", batch)
	if got := gw.next(t); got != "b1" {
		t.Fatalf("first batch request: got %q", got)
	}
	b2 := g.sendAsync(ctx, "b2", batch)
	g.queued(t, 1)
	i1 := g.sendAsync(ctx, "i1", nil)
	if got := gw.next(t); got != "i1" {
		t.Fatalf("with the batch requests at the limit minus the reserve: got %q, want the interactive request", got)
	}
	g.queued(t, 1)
	gw.release <- struct{}{} // b1 or i1 ends; the other keeps the worker at the batch bound
	first := b1
	select {
	case r := <-b1:
		first = nil
		if r.status != http.StatusOK {
			t.Errorf("b1: got %d %s, want 200", r.status, r.body)
		}
	case r := <-i1:
		first = b1
		i1 = nil
		if r.status != http.StatusOK {
			t.Errorf("i1: got %d %s, want 200", r.status, r.body)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("no request ended")
	}
	gw.release <- struct{}{}
	if got := gw.next(t); got != "b2" {
		t.Fatalf("with the worker empty: got %q, want b2", got)
	}
	gw.release <- struct{}{}
	for _, c := range []<-chan result{first, b2, i1} {
		if c == nil {
			continue
		}
		if r := await(t, c); r.status != http.StatusOK {
			t.Errorf("answer: got %d %s, want 200", r.status, r.body)
		}
	}
}

// TestQueueReserveBounds: a reserve needs the queue and must leave a batch request a slot.
func TestQueueReserveBounds(t *testing.T) {
	for _, tc := range []testConfig{
		{MaxInFlightPerWorker: 2, Queue: pipeline.QueueConfig{Reserve: 1}},
		{MaxInFlightPerWorker: 2, Queue: pipeline.QueueConfig{Max: 4, Reserve: 2}},
	} {
		cfg, _ := tc.config(t, nil)
		if _, err := New(cfg); err == nil {
			t.Errorf("New with %+v: got nil error", tc.Queue)
		}
	}
}
