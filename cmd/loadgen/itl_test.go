package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestStreamITL: a stream whose output chunks come 60 ms apart has one gap per chunk after
// the first, each about 60 ms; the usage chunk and [DONE] add none.
func TestStreamITL(t *testing.T) {
	const gap = 60 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range 4 {
			if i > 0 {
				time.Sleep(gap)
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
			f.Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	c := &completer{client: srv.Client(), url: srv.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := c.do(ctx, time.Now(), []byte(`{}`))
	if !o.ok {
		t.Fatalf("request failed: %s", o.err)
	}
	if len(o.itl) != 3 {
		t.Fatalf("got %d gaps %v, want 3", len(o.itl), o.itl)
	}
	for _, g := range o.itl {
		if g < gap-5*time.Millisecond || g > gap+time.Second {
			t.Errorf("gap %v, want about %v", g, gap)
		}
	}
}

// TestITLSummaryScale: gaps of completed requests are pooled and scaled to simulated time
// (measured ÷ F); failed and unsent slots' gaps are left out.
func TestITLSummaryScale(t *testing.T) {
	r := &runner{scale: 0.5, outcomes: []outcome{
		{ok: true, itl: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}},
		{ok: true, itl: []time.Duration{30 * time.Millisecond}},
		{err: "read: reset", itl: []time.Duration{time.Second}},
		{ok: true, itl: []time.Duration{time.Second}},
	}, sent: []bool{true, true, true, false}}
	s := itlSummary(r)
	if s.Mean != 40 || s.P50 != 40 || s.Max != 60 {
		t.Errorf("ITL mean %v p50 %v max %v ms, want 40, 40, 60", s.Mean, s.P50, s.Max)
	}
	var g tokenGaps
	base := time.Now()
	for _, d := range []time.Duration{0, 5, 12} {
		g.output(base.Add(d * time.Millisecond))
	}
	if len(g.gaps) != 2 || g.gaps[0] != 5*time.Millisecond || g.gaps[1] != 7*time.Millisecond {
		t.Errorf("gaps %v, want [5ms 7ms]", g.gaps)
	}
}
