package pipeline

import "testing"

func TestPDSplitReason(t *testing.T) {
	tests := []struct {
		tokens, cached, min int
		want                string
	}{
		{300, 0, 256, pdPair},
		{200, 0, 256, pdShortPrompt},
		{1000, 800, 256, pdDecodeCached},
		{1000, 744, 256, pdPair},
		{1000, 745, 256, pdDecodeCached},
		{10, 10, -1, pdPair},
	}
	for _, tt := range tests {
		if got := splitReason(tt.tokens, tt.cached, tt.min); got != tt.want {
			t.Errorf("splitReason(%d, %d, %d) = %q, want %q", tt.tokens, tt.cached, tt.min, got, tt.want)
		}
	}
}
