package pipeline

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/admission"
	"github.com/kvgate/kvgate/pkg/fleet"
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
