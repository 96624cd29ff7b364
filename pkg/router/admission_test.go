package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// gatedWorker is a fake worker whose completions wait for the test: each announces its prompt
// on arrived, then holds its slot until a token on release (or the test's end).
type gatedWorker struct {
	*fakeWorker
	arrived chan string
	release chan struct{}
}

func newGatedWorker(t *testing.T) *gatedWorker {
	gw := &gatedWorker{fakeWorker: newFakeWorker(t, "m"), arrived: make(chan string, 64), release: make(chan struct{}, 64)}
	done := make(chan struct{})
	gw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		seen := fmt.Sprint(body["prompt"])
		if p, ok := body["priority"]; ok {
			seen += fmt.Sprintf("|priority=%v", p)
		}
		gw.arrived <- seen
		select {
		case <-gw.release:
		case <-done:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"stop"}]}`)
	}
	t.Cleanup(func() { close(done) })
	return gw
}

// next waits for the next prompt the worker receives ("|priority=P" appended when its body
// has a priority field).
func (gw *gatedWorker) next(t *testing.T) string {
	t.Helper()
	select {
	case p := <-gw.arrived:
		return p
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out waiting for a request at the worker")
	}
	return ""
}

// result is an answer an asynchronous request got.
type result struct {
	status int
	header http.Header
	body   string
}

// sendAsync posts a completion of prompt with headers h and delivers the answer on the
// returned channel (status -1: the request failed).
func (g *testGateway) sendAsync(ctx context.Context, prompt string, h map[string]string) <-chan result {
	return g.sendBodyAsync(ctx, fmt.Sprintf(`{"prompt":%q}`, prompt), h)
}

// sendBodyAsync is sendAsync of a whole completion body.
func (g *testGateway) sendBodyAsync(ctx context.Context, body string, h map[string]string) <-chan result {
	out := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := g.srv.Client().Do(req)
		if err != nil {
			out <- result{status: -1, body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- result{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}()
	return out
}

func await(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out waiting for an answer")
	}
	return result{}
}

// queued waits until n requests wait in the gateway's queues (kvgate_queue_depth; the tests
// queue in one pool).
func (g *testGateway) queued(t *testing.T, n int) {
	t.Helper()
	g.waitFor(t, fmt.Sprintf("%d requests queued", n), func() bool { return g.metricSum(t, "kvgate_queue_depth") == float64(n) })
}

// prompt returns a prompt of n bytes (tokens, with the byte tokenizer) starting with tag.
func prompt(tag string, n int) string { return tag + strings.Repeat(".", n-len(tag)) }

// TestQueueOrder: with the one worker full, waiting requests get the slot by band, then fairly
// across keys, FCFS within a key; the key's grant bounds the band a request asks for.
func TestQueueOrder(t *testing.T) {
	gw := newGatedWorker(t)
	keys := mustKeySet(t, clientauth.APIKey{Name: "batch-a", Key: "ka", Priority: 5, BestPriority: 5},
		clientauth.APIKey{Name: "batch-b", Key: "kb", Priority: 5, BestPriority: 5},
		clientauth.APIKey{Name: "chat", Key: "kc", Priority: 0, BestPriority: 0})
	g := newTestGateway(t, testConfig{APIKeys: keys, MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 16}}, gw.url())
	auth := func(k string, extra ...string) map[string]string {
		h := map[string]string{"Authorization": "Bearer " + k}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}
	ctx := t.Context()
	first := g.sendAsync(ctx, "hold", auth("kc"))
	if got := gw.next(t); got != "hold" {
		t.Fatalf("first request: got %q at the worker", got)
	}
	var answers []<-chan result
	// Key a queues three, then b one; a batch key asking for band -9 is held to its grant (5).
	order := []struct{ prompt, key, prio string }{{"a1", "ka", ""}, {"a2", "ka", "-9"}, {"a3", "ka", ""}, {"b1", "kb", ""}, {"c1", "kc", ""}}
	for i, o := range order {
		h := auth(o.key)
		if o.prio != "" {
			h = auth(o.key, pipeline.HeaderPriority, o.prio)
		}
		answers = append(answers, g.sendAsync(ctx, o.prompt, h))
		g.queued(t, i+1)
	}
	// /debug/route shows the queue a request would join.
	resp, body := g.do(t, http.MethodGet, "/debug/route?tokens=1,2", "", "")
	var ex pipeline.RouteExplanation
	if err := json.Unmarshal([]byte(body), &ex); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/debug/route: %d %s (%v)", resp.StatusCode, body, err)
	}
	if q := ex.Queue; q == nil || !q.WouldWait || q.Waiting != 5 || len(q.Bands) != 2 || q.Bands[0].Priority != 0 || q.Bands[0].Waiting != 1 ||
		q.Bands[1].Priority != 5 || q.Bands[1].Waiting != 4 || q.Bands[1].Keys != 2 {
		t.Errorf("/debug/route queue: got %s, want 5 waiting, band 0: 1, band 5: 4 of 2 keys, would wait", body)
	}
	// The request's own band decides what it waits behind: band 0 behind c1, band 5 behind all
	// five, band -1 behind none.
	for _, tt := range []struct{ prio, ahead int }{{0, 1}, {5, 5}, {-1, 0}} {
		req, err := http.NewRequest(http.MethodGet, g.admin.URL+"/debug/route?tokens=1,2", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(pipeline.HeaderPriority, strconv.Itoa(tt.prio))
		resp, err := g.admin.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ex pipeline.RouteExplanation
		err = json.NewDecoder(resp.Body).Decode(&ex)
		resp.Body.Close()
		if err != nil || ex.Queue == nil || ex.Queue.Priority != tt.prio || ex.Queue.Ahead != tt.ahead || !ex.Queue.WouldWait {
			t.Errorf("/debug/route band %d: got %+v (%v), want %d ahead, would wait (the worker is full)", tt.prio, ex.Queue, err, tt.ahead)
		}
	}
	var got []string
	for range order {
		gw.release <- struct{}{}
		got = append(got, gw.next(t))
	}
	gw.release <- struct{}{}
	want := []string{"c1", "a1", "b1", "a2", "a3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("admission order: got %v, want %v", got, want)
	}
	for _, c := range append(answers, first) {
		if r := await(t, c); r.status != 200 {
			t.Errorf("answer: got %d %s, want 200", r.status, r.body)
		}
	}
	if n := g.metricValue(t, "kvgate_queue_requests_total", "model", "test-model", "priority", "5", "outcome", "admitted"); n != 4 {
		t.Errorf("admitted in band 5: got %v, want 4", n)
	}
	// Five hand-offs of prompts shorter than a block: cached nowhere.
	if n := g.metricValue(t, "kvgate_queue_handoffs_total", "model", "test-model", "fit", "nowhere"); n != 5 {
		t.Errorf("hand-offs of uncached prompts: got %v, want 5", n)
	}
	if n := g.metricValue(t, "kvgate_queue_depth", "model", "test-model", "priority", "5"); n != 0 {
		t.Errorf("queue depth after: got %v, want 0", n)
	}
}

// TestQueueCacheAware: a slot freed on a worker goes to the waiting request with the longest
// prefix cached there, not the one first in line.
func TestQueueCacheAware(t *testing.T) {
	w1, w2 := newGatedWorker(t), newGatedWorker(t)
	g := newTestGateway(t, testConfig{MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 16}}, w1.url(), w2.url())
	ctx := t.Context()
	pa, pb := prompt("AAAA", 96), prompt("BBBB", 96)
	ra := g.sendAsync(ctx, pa, nil)
	var wa, wb *gatedWorker
	select {
	case <-w1.arrived:
		wa, wb = w1, w2
	case <-w2.arrived:
		wa, wb = w2, w1
	case <-time.After(defaultTestTimeout):
		t.Fatal("first request did not arrive")
	}
	rb := g.sendAsync(ctx, pb, nil)
	if got := wb.next(t); got != pb {
		t.Fatalf("second request: got %q on the other worker", got)
	}
	// Both full: B's follow-up waits first, then A's.
	qb := g.sendAsync(ctx, pb+"more", nil)
	g.queued(t, 1)
	qa := g.sendAsync(ctx, pa+"more", nil)
	g.queued(t, 2)
	wa.release <- struct{}{} // A's worker frees its slot
	if got := wa.next(t); got != pa+"more" {
		t.Errorf("the freed worker holding A's prefix got %.8q…, want A's follow-up", got)
	}
	wb.release <- struct{}{}
	if got := wb.next(t); got != pb+"more" {
		t.Errorf("B's worker got %.8q…, want B's follow-up", got)
	}
	wa.release <- struct{}{}
	wb.release <- struct{}{}
	for _, c := range []<-chan result{ra, rb, qa, qb} {
		if r := await(t, c); r.status != 200 {
			t.Errorf("answer: got %d %s, want 200", r.status, r.body)
		}
	}
	// Both hand-offs went where the request's prefix was cached, and copied nothing.
	if n := g.metricValue(t, "kvgate_queue_handoffs_total", "model", "test-model", "fit", "here"); n != 2 || g.metricSum(t, "kvgate_queue_handoffs_total") != 2 {
		t.Errorf("hand-offs: %v here of %v, want 2 of 2", n, g.metricSum(t, "kvgate_queue_handoffs_total"))
	}
	if n := g.metricSum(t, "kvgate_queue_handoff_copied_blocks_total"); n != 0 {
		t.Errorf("copied blocks: got %v, want 0", n)
	}
}

// TestQueueRefusals: a full queue answers 429, a wait past the timeout 503, both in the OpenAI
// shape with Retry-After; a client that leaves while queued leaves the queue; a malformed
// priority is a 400.
func TestQueueRefusals(t *testing.T) {
	gw := newGatedWorker(t)
	g := newTestGateway(t, testConfig{MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 1, Timeout: 300 * time.Millisecond}}, gw.url())
	ctx := t.Context()
	hold := g.sendAsync(ctx, "hold", nil)
	gw.next(t)

	r := await(t, g.sendAsync(ctx, "bad", map[string]string{pipeline.HeaderPriority: "high"}))
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "x-kvgate-priority") {
		t.Errorf("malformed priority: got %d %s, want 400 naming the header", r.status, r.body)
	}

	cctx, cancel := context.WithCancel(ctx)
	gone := g.sendAsync(cctx, "gone", nil)
	g.queued(t, 1)
	cancel()
	await(t, gone)
	g.queued(t, 0)
	g.waitFor(t, "the cancellation counted", func() bool {
		return g.metricValue(t, "kvgate_queue_requests_total", "model", "test-model", "priority", "0", "outcome", "cancelled") == 1
	})

	waiting := g.sendAsync(ctx, "waits", nil)
	g.queued(t, 1)
	full := await(t, g.sendAsync(ctx, "full", nil))
	if full.status != http.StatusTooManyRequests || full.header.Get("Retry-After") == "" || !strings.Contains(full.body, `"code":"rate_limit_exceeded"`) {
		t.Errorf("queue full: got %d (Retry-After %q) %s, want 429 rate_limit_exceeded with Retry-After", full.status, full.header.Get("Retry-After"), full.body)
	}
	timeout := await(t, waiting)
	if timeout.status != http.StatusServiceUnavailable || timeout.header.Get("Retry-After") == "" || !strings.Contains(timeout.body, `"code":"queue_timeout"`) {
		t.Errorf("queue timeout: got %d (Retry-After %q) %s, want 503 queue_timeout with Retry-After", timeout.status, timeout.header.Get("Retry-After"), timeout.body)
	}
	gw.release <- struct{}{}
	if r := await(t, hold); r.status != 200 {
		t.Errorf("held request: got %d, want 200", r.status)
	}
	// The slot the cancelled and timed-out requests never took is free again.
	gw.release <- struct{}{}
	if r := await(t, g.sendAsync(ctx, "after", nil)); r.status != 200 {
		t.Errorf("after the refusals: got %d %s, want 200", r.status, r.body)
	}
}

// TestQueueNeedsBound: a queue without a per-worker bound to wait for is a configuration error.
func TestQueueNeedsBound(t *testing.T) {
	cfg := Config{Models: []Model{{Name: "m", Policy: &fixedPolicy{}, Index: mustIndex(t)}}, Queue: pipeline.QueueConfig{Max: 4}}
	if _, err := New(cfg); err == nil {
		t.Error("New with a queue and no in-flight limit: got nil error")
	}
}

// TestQueueShutdown: a request still queued when a shutdown's drain deadline passes is answered
// 503 gateway_shutting_down, not dropped.
func TestQueueShutdown(t *testing.T) {
	gw := newGatedWorker(t)
	g := newTestGateway(t, testConfig{MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 4}}, gw.url())
	ctx := t.Context()
	hold := g.sendAsync(ctx, "hold", nil)
	gw.next(t)
	waiting := g.sendAsync(ctx, "waits", nil)
	g.queued(t, 1)
	g.rt.AbortInFlight()
	r := await(t, waiting)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"code":"gateway_shutting_down"`) {
		t.Errorf("queued at shutdown: got %d %s, want 503 gateway_shutting_down", r.status, r.body)
	}
	await(t, hold)
	g.queued(t, 0)
}

// TestQueueBodyPriority: without x-kvgate-priority the body's vLLM priority field is the band
// (lower runs first, held to the key's grant); the worker gets it only with ForwardPriority,
// then held to the grant too, and stripped otherwise.
func TestQueueBodyPriority(t *testing.T) {
	for _, forward := range []bool{false, true} {
		t.Run(fmt.Sprintf("forward=%v", forward), func(t *testing.T) {
			gw := newGatedWorker(t)
			keys := mustKeySet(t, clientauth.APIKey{Name: "k", Key: "kk", Priority: 0, BestPriority: -2})
			g := newTestGateway(t, testConfig{APIKeys: keys, ForwardPriority: forward, MaxInFlightPerWorker: 1, Queue: pipeline.QueueConfig{Max: 8}}, gw.url())
			ctx, auth := t.Context(), map[string]string{"Authorization": "Bearer kk"}
			hold := g.sendBodyAsync(ctx, `{"prompt":"hold"}`, auth)
			gw.next(t)
			low := g.sendBodyAsync(ctx, `{"prompt":"low","priority":7}`, auth)
			g.queued(t, 1)
			high := g.sendBodyAsync(ctx, `{"prompt":"high","priority":-9}`, auth) // held to -2
			g.queued(t, 2)
			want := []string{"high", "low"}
			if forward {
				want = []string{"high|priority=-2", "low|priority=7"}
			}
			for _, w := range want {
				gw.release <- struct{}{}
				if got := gw.next(t); got != w {
					t.Errorf("worker got %q, want %q", got, w)
				}
			}
			gw.release <- struct{}{}
			for _, c := range []<-chan result{hold, low, high} {
				if r := await(t, c); r.status != http.StatusOK {
					t.Errorf("answer %d %s, want 200", r.status, r.body)
				}
			}
			if got := g.metricValue(t, "kvgate_queue_requests_total", "priority", "-2", "outcome", "admitted"); got != 1 {
				t.Errorf("admitted in band -2: %v, want 1", got)
			}
		})
	}
}
