package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

type arrival struct {
	at time.Duration
	r  *Request
}

// drive runs c in simulated time until every request has finished: steps back to back,
// jumping idle gaps to the next arrival. It returns the simulated end time and the events of
// every step in order.
func drive(t *testing.T, c *core, arrivals []arrival) (time.Duration, []indexer.Event) {
	t.Helper()
	slices.SortStableFunc(arrivals, func(a, b arrival) int { return int(a.at - b.at) })
	var now time.Duration
	var events []indexer.Event
	next := 0
	for steps := 0; ; steps++ {
		if steps > 1_000_000 {
			t.Fatal("drive: no progress")
		}
		for next < len(arrivals) && arrivals[next].at <= now {
			if err := c.Add(arrivals[next].r, arrivals[next].at); err != nil {
				t.Fatalf("Add: %v", err)
			}
			next++
		}
		d, ok := c.Schedule(now)
		if !ok {
			if next == len(arrivals) {
				if c.NumRunning()+c.NumWaiting() != 0 {
					t.Fatalf("stuck: %d running %d waiting", c.NumRunning(), c.NumWaiting())
				}
				return now, events
			}
			now = arrivals[next].at
			continue
		}
		now += d
		c.Finish(now)
		events = append(events, copyEvents(c.TakeEvents().Events)...)
	}
}

func copyEvents(evs []indexer.Event) []indexer.Event {
	out := make([]indexer.Event, len(evs))
	for i, e := range evs {
		e.Hashes = slices.Clone(e.Hashes)
		e.Tokens = slices.Clone(e.Tokens)
		out[i] = e
	}
	return out
}

func seqTokens(base uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func newReq(id string, prompt []uint32, maxTokens int) *Request {
	return &Request{ID: id, Prompt: prompt, MaxTokens: maxTokens, Seed: seedFor(prompt, nil, 0)}
}

func ttft(r *Request) time.Duration { return r.FirstToken - r.Arrival }

func mustCore(t *testing.T, cfg Config) *core {
	t.Helper()
	c, err := newCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCoreSingleRequestTiming(t *testing.T) {
	c := mustCore(t, Config{})
	r := newReq("a", seqTokens(1000, 1050), 128)
	end, _ := drive(t, c, []arrival{{0, r}})
	cfg := c.Config()
	// One prefill step of 1050 tokens (within the 2048 budget), then 127 decode steps.
	wantTTFT := cfg.StepOverhead + 1050*cfg.PrefillPerToken + cfg.DecodePerSeq
	if got := ttft(r); got != wantTTFT {
		t.Errorf("TTFT: got %v, want %v", got, wantTTFT)
	}
	wantEnd := wantTTFT + 127*(cfg.StepOverhead+cfg.DecodePerSeq)
	if end != wantEnd || r.Done != wantEnd {
		t.Errorf("end: got %v (done %v), want %v", end, r.Done, wantEnd)
	}
	if got := len(r.Output()); got != 128 {
		t.Errorf("output tokens: got %d, want 128", got)
	}
	if r.FinishReason != "length" {
		t.Errorf("finish reason: got %q, want length", r.FinishReason)
	}
	if c.Cache().NumUsed() != 0 {
		t.Errorf("blocks still used after finish: %d", c.Cache().NumUsed())
	}
}

func TestCoreTTFTFallsWithCacheHits(t *testing.T) {
	prefix := seqTokens(1000, 1000)
	tests := []struct {
		name       string
		second     []uint32
		wantCached int
	}{
		{"shared 1000-token prefix", append(slices.Clone(prefix), seqTokens(90000, 50)...), 992},
		{"identical prompt", append(slices.Clone(prefix), seqTokens(70000, 50)...), 0}, // replaced below
		{"unrelated prompt", seqTokens(50000, 1050), 0},
	}
	// The identical case: the same 1050 tokens again; vLLM never serves the last token from
	// cache, so 65 full blocks = 1040 tokens hit.
	tests[1].second = append(slices.Clone(prefix), seqTokens(70000, 50)...)
	tests[1].wantCached = 1040
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCore(t, Config{})
			first := newReq("first", append(slices.Clone(prefix), seqTokens(70000, 50)...), 4)
			second := newReq("second", tc.second, 4)
			drive(t, c, []arrival{{0, first}, {10 * time.Second, second}})
			if second.CachedTokens != tc.wantCached {
				t.Errorf("cached tokens: got %d, want %d", second.CachedTokens, tc.wantCached)
			}
			cfg := c.Config()
			want := cfg.StepOverhead + time.Duration(1050-tc.wantCached)*cfg.PrefillPerToken + cfg.DecodePerSeq
			if got := ttft(second); got != want {
				t.Errorf("TTFT: got %v, want %v", got, want)
			}
			if tc.wantCached > 0 && ttft(second) >= ttft(first) {
				t.Errorf("TTFT with hit %v not below cold TTFT %v", ttft(second), ttft(first))
			}
		})
	}
}

func TestCoreTTFTRisesWithLoad(t *testing.T) {
	meanTTFT := func(n int) time.Duration {
		c := mustCore(t, Config{})
		var arr []arrival
		var reqs []*Request
		for i := range n {
			r := newReq("r", seqTokens(uint32(i)*10000, 1050), 128)
			reqs = append(reqs, r)
			arr = append(arr, arrival{time.Duration(i) * 10 * time.Millisecond, r})
		}
		drive(t, c, arr)
		var sum time.Duration
		for _, r := range reqs {
			sum += ttft(r)
		}
		return sum / time.Duration(n)
	}
	prev := meanTTFT(1)
	for _, n := range []int{4, 16, 64} {
		got := meanTTFT(n)
		if got <= prev {
			t.Errorf("mean TTFT with %d concurrent requests: got %v, want more than %v", n, got, prev)
		}
		prev = got
	}
}

func TestCoreChunkedPrefillAndBudget(t *testing.T) {
	c := mustCore(t, Config{MaxBatchedTokens: 512})
	r := newReq("long", seqTokens(1, 1300), 2)
	drive(t, c, []arrival{{0, r}})
	cfg := c.Config()
	// 1300 tokens in chunks of 512, 512, 276: three steps before the first token.
	want := 3*(cfg.StepOverhead+cfg.DecodePerSeq) + 1300*cfg.PrefillPerToken
	if got := ttft(r); got != want {
		t.Errorf("TTFT: got %v, want %v", got, want)
	}
}

func TestCoreMaxRunningQueues(t *testing.T) {
	c := mustCore(t, Config{MaxRunning: 2})
	a, b, x := newReq("a", seqTokens(1, 32), 10), newReq("b", seqTokens(100, 32), 10), newReq("x", seqTokens(200, 32), 10)
	drive(t, c, []arrival{{0, a}, {0, b}, {0, x}})
	if x.FirstToken < a.Done {
		t.Errorf("third request started (first token %v) before a running one finished (%v)", x.FirstToken, a.Done)
	}
}

func TestCorePreemptionUnderMemoryPressure(t *testing.T) {
	// 12 blocks of 16 tokens: two 64-token prompts growing to 160 tokens cannot both fit.
	c := mustCore(t, Config{NumBlocks: 12, BlockSize: 16})
	a, b := newReq("a", seqTokens(1, 64), 96), newReq("b", seqTokens(1000, 64), 96)
	drive(t, c, []arrival{{0, a}, {0, b}})
	if c.Stats().Preemptions == 0 {
		t.Error("preemptions: got 0, want > 0")
	}
	for _, r := range []*Request{a, b} {
		if len(r.Output()) != 96 || r.FinishReason != "length" {
			t.Errorf("%s: %d tokens, reason %q; want 96, length", r.ID, len(r.Output()), r.FinishReason)
		}
	}
	if c.Cache().NumUsed() != 0 {
		t.Errorf("blocks leaked: %d used", c.Cache().NumUsed())
	}
}

func TestCoreDeterministicOutput(t *testing.T) {
	run := func(prompt []uint32, seed *int64) []uint32 {
		c := mustCore(t, Config{VocabSize: 1000, EOSTokenIDs: []uint32{0, 1, 2}})
		r := &Request{ID: "d", Prompt: prompt, MaxTokens: 64, Seed: seedFor(prompt, seed, 0)}
		drive(t, c, []arrival{{0, r}})
		return slices.Clone(r.Output())
	}
	p := seqTokens(5, 40)
	a, b := run(p, nil), run(p, nil)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same prompt, no seed: outputs differ:\n%s", diff)
	}
	s1, s2 := int64(7), int64(8)
	if cmp.Equal(run(p, &s1), run(p, &s2)) {
		t.Error("different seeds gave identical outputs")
	}
	for _, tok := range a {
		if tok >= 1000 || tok <= 2 {
			t.Errorf("token %d outside vocabulary or an EOS id", tok)
		}
	}
}

func TestCoreStopTokenAndAbort(t *testing.T) {
	c := mustCore(t, Config{VocabSize: 4})
	r := &Request{ID: "s", Prompt: seqTokens(0, 3), MaxTokens: 1000, StopTokenIDs: []uint32{3}, Seed: 1}
	drive(t, c, []arrival{{0, r}})
	out := r.Output()
	if r.FinishReason != "stop" || out[len(out)-1] != 3 || len(out) >= 1000 {
		t.Errorf("got reason %q with %d tokens ending %d, want stop at token 3", r.FinishReason, len(out), out[len(out)-1])
	}

	// min_tokens: the stop id is masked until 20 tokens are out, then it ends the request.
	c = mustCore(t, Config{VocabSize: 4})
	r = &Request{ID: "m", Prompt: seqTokens(0, 3), MaxTokens: 1000, MinTokens: 20, StopTokenIDs: []uint32{3}, Seed: 1}
	drive(t, c, []arrival{{0, r}})
	out = r.Output()
	if r.FinishReason != "stop" || len(out) <= 20 || out[len(out)-1] != 3 || slices.Contains(out[:20], 3) {
		t.Errorf("min_tokens 20: got reason %q with %d tokens %v, want the stop id only after 20 tokens", r.FinishReason, len(out), out)
	}

	c = mustCore(t, Config{})
	a := newReq("a", seqTokens(0, 100), 50)
	if err := c.Add(a, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Schedule(0); !ok {
		t.Fatal("Schedule: nothing to run")
	}
	if !c.Abort(a) {
		t.Fatal("Abort: got false")
	}
	if got := c.Finish(time.Second); len(got) != 0 {
		t.Errorf("Finish after abort delivered %d requests", len(got))
	}
	if c.Cache().NumUsed() != 0 || c.NumRunning() != 0 {
		t.Errorf("after abort: used %d running %d", c.Cache().NumUsed(), c.NumRunning())
	}
	if c.Abort(a) {
		t.Error("second Abort: got true")
	}
}

func TestCoreEventsChainsAndEviction(t *testing.T) {
	// 8 blocks of 4 tokens.
	c := mustCore(t, Config{NumBlocks: 8, BlockSize: 4})
	p1 := seqTokens(100, 10)  // 2 full blocks + 2 tokens
	r1 := newReq("r1", p1, 3) // 13 tokens total; computed 12 → 3 full blocks cached
	_, evs := drive(t, c, []arrival{{0, r1}})
	var stored [][]uint64
	for _, e := range evs {
		if e.Kind != indexer.EventStored {
			t.Fatalf("unexpected %v event", e.Kind)
		}
		stored = append(stored, e.Hashes)
	}
	// Prompt blocks 0-1 stored without parent in the prefill step; the third block (2 prompt
	// tokens + 2 generated) once its tokens were computed, with block 1 as parent.
	if len(evs) != 2 || len(evs[0].Hashes) != 2 || evs[0].HasParent || !evs[1].HasParent || evs[1].Parent != evs[0].Hashes[1] {
		t.Fatalf("events: got %+v", evs)
	}
	if diff := cmp.Diff(p1[:8], evs[0].Tokens); diff != "" {
		t.Errorf("stored tokens (-want +got):\n%s", diff)
	}
	// A different long prompt now needs all 8 blocks: the 3 cached ones are evicted, tail first.
	r2 := newReq("r2", seqTokens(5000, 30), 2)
	_, evs = drive(t, c, []arrival{{0, r2}})
	var removed []uint64
	for _, e := range evs {
		if e.Kind == indexer.EventRemoved {
			if len(e.Hashes) != 1 {
				t.Errorf("BlockRemoved with %d hashes, want 1", len(e.Hashes))
			}
			removed = append(removed, e.Hashes...)
		}
	}
	want := []uint64{stored[1][0], stored[0][1], stored[0][0]}
	if diff := cmp.Diff(want, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if evs[0].Kind != indexer.EventRemoved {
		t.Errorf("evictions must precede the stores of the step that caused them; first event %v", evs[0].Kind)
	}
	if !c.ResetPrefixCache() {
		t.Fatal("ResetPrefixCache: got false")
	}
	if got := c.TakeEvents().Events; len(got) != 1 || got[0].Kind != indexer.EventCleared {
		t.Errorf("after reset: got %+v, want one cleared event", got)
	}
}

func TestCoreValidate(t *testing.T) {
	c := mustCore(t, Config{NumBlocks: 4, BlockSize: 4, MaxModelLen: 100})
	tests := []struct {
		name string
		r    *Request
		ok   bool
	}{
		{"ok", newReq("a", seqTokens(0, 8), 4), true},
		{"empty", newReq("b", nil, 4), false},
		{"max tokens 0", newReq("c", seqTokens(0, 8), 0), false},
		{"too long for context", newReq("d", seqTokens(0, 90), 20), false},
		{"too large for the cache", newReq("e", seqTokens(0, 16), 4), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Validate(tc.r); (err == nil) != tc.ok {
				t.Errorf("Validate: got %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
