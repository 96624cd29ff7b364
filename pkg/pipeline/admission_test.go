package pipeline

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/admission"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// TestQueueTimeout: the queue deadline is the smaller of --queue-timeout and the timeout the
// client's SDK announces (the Node SDK's whole seconds, the Python SDK's decimal read timeout);
// values that are no positive number of seconds leave --queue-timeout.
func TestQueueTimeout(t *testing.T) {
	const limit = 30 * time.Second
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
	}{
		{"no header", nil, limit},
		{"node sdk, shorter", map[string]string{"X-Stainless-Timeout": "5"}, 5 * time.Second},
		{"node sdk default 600 s is longer", map[string]string{"X-Stainless-Timeout": "600"}, limit},
		{"python sdk read timeout", map[string]string{"X-Stainless-Read-Timeout": "2.5"}, 2500 * time.Millisecond},
		{"both: the smaller", map[string]string{"X-Stainless-Timeout": "8", "X-Stainless-Read-Timeout": "3.0"}, 3 * time.Second},
		{"both: the smaller, other order", map[string]string{"X-Stainless-Timeout": "2", "X-Stainless-Read-Timeout": "3.0"}, 2 * time.Second},
		{"node sdk sub-second timeout truncated to 0", map[string]string{"X-Stainless-Timeout": "0"}, limit},
		{"negative", map[string]string{"X-Stainless-Timeout": "-4"}, limit},
		{"garbage", map[string]string{"X-Stainless-Timeout": "soon"}, limit},
		{"NaN", map[string]string{"X-Stainless-Read-Timeout": "NaN"}, limit},
		{"Inf", map[string]string{"X-Stainless-Read-Timeout": "+Inf"}, limit},
		{"huge", map[string]string{"X-Stainless-Timeout": "1e300"}, limit},
		{"tiny is still a deadline", map[string]string{"X-Stainless-Read-Timeout": "1e-12"}, time.Millisecond},
		{"spaces", map[string]string{"X-Stainless-Timeout": " 7 "}, 7 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.headers {
				h.Set(k, v)
			}
			if got := queueTimeout(h, limit); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestQueueRetryAfter: a queue refusal's Retry-After is the queue's drain estimate for the
// request's band, at least 1 s and at most maxRetryAfter; a reconfigured model's is 1 s.
func TestQueueRetryAfter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	q, err := admission.New[*fleet.Member](admission.Config{MaxLen: 1000, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if _, err := q.Enqueue(admission.Request[*fleet.Member]{}); err != nil {
			t.Fatal(err)
		}
	}
	// Grants every 50 ms: 998 wait after the second.
	q.Next(nil)
	now = now.Add(50 * time.Millisecond)
	q.Next(nil)
	tests := []struct {
		name   string
		err    error
		prio   int
		ms, to string
	}{
		{"full: (998 ahead + 1) × 50 ms, capped", admission.ErrFull, 0, "30000", "30"},
		{"timeout: same estimate", admission.ErrTimeout, 0, "30000", "30"},
		{"reconfigured: at once", admission.ErrClosed, 0, "1000", "1"},
	}
	for _, tt := range tests {
		h := http.Header{}
		if e := queueError(context.Background(), h, q, tt.prio, tt.err, "m", 1000, time.Second); e == nil {
			t.Fatalf("%s: no error", tt.name)
		}
		if h.Get("Retry-After-Ms") != tt.ms || h.Get("Retry-After") != tt.to {
			t.Errorf("%s: Retry-After %q, Retry-After-Ms %q; want %q, %q", tt.name, h.Get("Retry-After"), h.Get("Retry-After-Ms"), tt.to, tt.ms)
		}
	}
	// Fewer waiting: the estimate itself. Drain to 39 waiting with 50 ms between grants.
	for q.Len() > 39 {
		now = now.Add(50 * time.Millisecond)
		q.Next(nil)
	}
	h := http.Header{}
	queueError(context.Background(), h, q, 0, admission.ErrFull, "m", 1000, time.Second)
	if h.Get("Retry-After-Ms") != "2000" || h.Get("Retry-After") != "2" {
		t.Errorf("39 waiting, 50 ms apart: Retry-After %q, Retry-After-Ms %q; want 2, 2000", h.Get("Retry-After"), h.Get("Retry-After-Ms"))
	}
}

// TestScorerLate: the queue's Score reports a request cached on another worker as Late only
// when every worker holding its best prefix is full by its engine's own queue
// (--max-waiting-per-worker), which no request of ours ending there clears; a holder at its
// in-flight bound frees a slot soon and is not late.
func TestScorerLate(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
	idx, _ := indexer.New(indexer.Config{})
	pl, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx}}, Logger: zap.NewNop(), Now: func() time.Time { return now },
		MaxInFlightPerWorker: 4, Queue: QueueConfig{Max: 8, MaxWaitingPerWorker: 1}, Fleet: fleet.Config{EngineMetricsInterval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var ws []*worker.Worker
	for i := range 3 {
		w, err := pl.Fleet().AddWorker(worker.Spec{URL: "http://127.0.0.1:" + strconv.Itoa(9000+i)})
		if err != nil {
			t.Fatal(err)
		}
		w.SetHealth(true, "")
		ws = append(ws, w)
	}
	members := map[*worker.Worker]*fleet.Member{}
	for _, m := range pl.Fleet().Snapshot().Members() {
		members[m.Worker()] = m
	}
	// A 4-block prompt stored on workers 1 and 2 (engine hashes: opaque, unique per block).
	toks := make([]uint32, 4*fleet.DefaultBlockSize)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	store := func(w *worker.Worker, salt uint64) {
		hashes := []uint64{salt + 1, salt + 2, salt + 3, salt + 4}
		batch := indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventStored, BlockSize: fleet.DefaultBlockSize, Medium: "GPU", Hashes: hashes, Tokens: toks}}}
		pl.Fleet().TopicConsumer(strings.TrimPrefix(w.URL(), "http://")).Batch(0, &batch)
	}
	store(ws[1], 100)
	store(ws[2], 200)
	c := &Call{Req: engine.Request{Tokens: [][]uint32{toks}}}
	pl.Resolve(c, "m")
	score := pl.scorer(c)
	engineFull := func(w *worker.Worker) {
		w.Acquire(worker.Hold{}) // one of ours in flight: the engine bound applies
		w.SetEngineLoad(3, now)
		w.SetEngineWaiting(2)
	}

	if f := score(members[ws[0]]); f != (admission.Fit{Elsewhere: 4, OK: true}) {
		t.Fatalf("holders at no bound: got %+v, want 4 blocks elsewhere, not late", f)
	}
	engineFull(ws[1])
	if f := score(members[ws[0]]); f.Late {
		t.Errorf("worker 2 still frees slots soon: got %+v, want not late", f)
	}
	engineFull(ws[2])
	if f := score(members[ws[0]]); f != (admission.Fit{Elsewhere: 4, Late: true, OK: true}) {
		t.Errorf("both holders full by their engines: got %+v, want 4 blocks elsewhere, late", f)
	}
	if f := score(members[ws[1]]); f != (admission.Fit{Matched: 4, Elsewhere: 4, OK: true}) {
		t.Errorf("scored on a holder: got %+v, want 4 here and elsewhere, not late", f)
	}
}
