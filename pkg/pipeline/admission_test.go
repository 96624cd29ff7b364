package pipeline

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
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

// TestScorerMatchesWholeFleet: the queue's Score, which scores the freed worker and then only
// the workers holding some of the prompt, gives the Fit of scoring every worker of the pool
// (the reference below, the scorer as it was): on fleets mixing block sizes (from the spec and
// from events), DP ranks, tree-scored workers, pending entries, unhealthy workers, engines
// full by their own queue and a prompt with an image.
func TestScorerMatchesWholeFleet(t *testing.T) {
	for seed := range uint64(20) {
		pl, calls := scorerFleet(t, seed)
		for ci, c := range calls {
			score := pl.scorer(c)
			for _, m := range pl.Fleet().Snapshot().Members() {
				if got, want := score(m), denseFit(pl, c, m); got != want {
					t.Fatalf("seed %d, prompt %d, worker %s: got %+v, want %+v", seed, ci, m.Worker().URL(), got, want)
				}
			}
		}
	}
}

// scorerFleet builds a 24-worker pool with a random cache state over a few prompts that share
// prefixes, and returns calls for those prompts and some others.
func scorerFleet(t *testing.T, seed uint64) (*Pipeline, []*Call) {
	now := time.Unix(1_700_000_000, 0)
	p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
	idx, _ := indexer.New(indexer.Config{})
	tree, _ := indexer.NewTree(indexer.TreeConfig{BlockSize: fleet.DefaultBlockSize})
	pend, _ := indexer.NewPending(indexer.PendingConfig{})
	pl, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx, Tree: tree, Pending: pend}}, Logger: zap.NewNop(), Now: func() time.Time { return now },
		MaxInFlightPerWorker: 4, Queue: QueueConfig{Max: 8, MaxWaitingPerWorker: 1}, Fleet: fleet.Config{EngineMetricsInterval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	base := make([]uint32, 12*32)
	for i := range base {
		base[i] = uint32(rng.IntN(50000))
	}
	var prompts [][]uint32
	for range 4 { // a shared head of 0–6 default blocks, then a tail of its own
		pr := slices.Clone(base[:16*rng.IntN(7)])
		for len(pr) < len(base) {
			pr = append(pr, uint32(rng.IntN(50000)))
		}
		prompts = append(prompts, pr)
	}
	for i := range 24 {
		sp := worker.Spec{URL: "http://127.0.0.1:" + strconv.Itoa(9000+i), DPSize: 1 + rng.IntN(2)}
		if rng.IntN(4) == 0 {
			sp.BlockSize = 32
		}
		w, err := pl.Fleet().AddWorker(sp)
		if err != nil {
			t.Fatal(err)
		}
		w.SetHealth(rng.IntN(6) != 0, "")
	}
	for i, m := range pl.Fleet().Snapshot().Members() {
		lw, l := m.LookupWorker(), m.Pool().Lookup()
		pr := prompts[rng.IntN(len(prompts))]
		n := 16 * rng.IntN(len(pr)/16+1)
		switch rng.IntN(3) {
		case 0: // tree-scored: what was routed there
			l.Record(lw, nil, pr[:n], "")
		default: // event-fed at 16 or 32, on one of its ranks, sometimes with pending blocks
			bs := []int{16, 32}[rng.IntN(2)]
			hashes := make([]uint64, n/bs)
			for j := range hashes {
				hashes[j] = uint64(i)<<32 | uint64(j+1)
			}
			batch := indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventStored, BlockSize: bs, Medium: "GPU", Hashes: hashes, Tokens: pr[:n/bs*bs]}}}
			pl.Fleet().TopicConsumer(strings.TrimPrefix(m.Worker().URL(), "http://")).Batch(rng.IntN(len(lw.IDs)), &batch)
			if rng.IntN(3) == 0 {
				bs := m.BlockSize()
				l.Record(m.LookupWorker(), indexer.AppendBlockKeys(nil, pr, bs, ""), pr, "")
			}
		}
		if rng.IntN(5) == 0 { // full by its engine's queue
			m.Worker().Acquire(worker.Hold{})
			m.Worker().SetEngineLoad(3, now)
			m.Worker().SetEngineWaiting(2)
		}
	}
	var calls []*Call
	for _, pr := range append(prompts, base[:64], make([]uint32, 40)) {
		c := &Call{Req: engine.Request{Tokens: [][]uint32{pr}}}
		pl.Resolve(c, "m")
		calls = append(calls, c)
	}
	// A prompt with an image from its third block on: its keys there are not its tokens'.
	c := &Call{Req: engine.Request{Tokens: [][]uint32{prompts[0]}}, mediaKeys: &indexer.MediaKeys{Tokens: prompts[0], Spans: []indexer.ExtraSpan{{Start: 32, End: 64, Key: "img"}}}}
	pl.Resolve(c, "m")
	return pl, append(calls, c)
}

// denseFit is the queue's Score for c on m computed by scoring every worker of the pool.
func denseFit(pl *Pipeline, c *Call, m *fleet.Member) admission.Fit {
	tokens, tg := c.RouteTokens(), c.Target
	serves := func(m *fleet.Member) bool { return m.Pool() == tg.Pool && m.Serves(tg) && m.Worker().Role().Decodes() }
	if !serves(m) {
		return admission.Fit{}
	}
	if len(tokens) == 0 {
		return admission.Fit{OK: true}
	}
	ws := []indexer.LookupWorker{m.LookupWorker()}
	var others []*fleet.Member
	for _, o := range pl.Fleet().Snapshot().Members() {
		if o != m && serves(o) && o.Worker().Healthy() && o.DrainingSince().IsZero() {
			ws = append(ws, o.LookupWorker())
			others = append(others, o)
		}
	}
	s := indexer.LookupScratch{Media: c.mediaKeys}
	scores := tg.Pool.Lookup().Score(&s, tokens, tg.Namespace, ws, nil, false)
	f := admission.Fit{Matched: scores[0].Matched, OK: true}
	for _, sc := range scores[1:] {
		f.Elsewhere = max(f.Elsewhere, sc.Matched)
	}
	if f.Elsewhere > f.Matched {
		f.Late = pl.allLate(others, scores[1:], f.Elsewhere)
	}
	return f
}
