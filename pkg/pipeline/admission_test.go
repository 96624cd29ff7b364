package pipeline

import (
	"net/http"
	"testing"
	"time"
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
