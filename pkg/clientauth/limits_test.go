package clientauth

import (
	"net/http"
	"testing"
	"time"
)

func TestSetRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		d        time.Duration
		sec, msS string
	}{
		{0, "1", "1000"},
		{time.Millisecond, "1", "1"},
		{1500 * time.Millisecond, "2", "1500"},
		{2 * time.Second, "2", "2000"},
		{90*time.Second + time.Nanosecond, "91", "90001"},
	} {
		h := http.Header{}
		SetRetryAfter(h, tt.d)
		if h.Get("Retry-After") != tt.sec || h.Get("Retry-After-Ms") != tt.msS {
			t.Errorf("SetRetryAfter(%v): got %q, %q; want %q, %q", tt.d, h.Get("Retry-After"), h.Get("Retry-After-Ms"), tt.sec, tt.msS)
		}
	}
}

func TestNewRejectsBadLimits(t *testing.T) {
	for _, cfg := range []Config{{RateLimit: -1}, {RateBurst: -1}, {MaxConcurrentPerKey: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): got nil error", cfg)
		}
	}
}
