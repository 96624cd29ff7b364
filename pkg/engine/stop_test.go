package engine

import (
	"strings"
	"testing"
)

func TestStopText(t *testing.T) {
	tests := []struct {
		name  string
		stops []string
		in    string
		want  string
	}{
		{"no stops", nil, "hello world", "hello world"},
		{"cut before the stop", []string{"STOP"}, "hello STOP world", "hello "},
		{"earliest of several", []string{"world", "lo"}, "hello world", "hel"},
		{"prefix only, never completed", []string{"STOP"}, "hello STO", "hello STO"},
		{"stop at the start", []string{"he"}, "hello", ""},
		{"one-byte stop holds nothing back", []string{"x"}, "abxcd", "ab"},
		{"multi-byte text held whole", []string{"ünï"}, "naïve ün", "naïve ün"},
		{"multi-byte stop", []string{"ünï"}, "a ünïcode", "a "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every split of the input into single bytes, pairs and whole gives the same text.
			for _, step := range []int{1, 2, 3, len(tt.in) + 1} {
				s := newStopText(tt.stops)
				var got strings.Builder
				for i := 0; i < len(tt.in); i += step {
					piece := s.add(tt.in[i:min(i+step, len(tt.in))])
					if !strings.HasPrefix(tt.want, got.String()+piece) {
						t.Fatalf("step %d: emitted %q, which is not a prefix of %q", step, got.String()+piece, tt.want)
					}
					got.WriteString(piece)
				}
				got.WriteString(s.flush())
				if got.String() != tt.want {
					t.Errorf("step %d: got %q, want %q", step, got.String(), tt.want)
				}
			}
		})
	}
}
