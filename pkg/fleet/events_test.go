package fleet

import "testing"

func TestTopicHost(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"kv@10.0.0.1:8000@llama", "10.0.0.1:8000", true},
		{"kv@h:1", "h:1", true},
		{"h:2", "h:2", true},
		{"kv@@m", "", false},
		{"", "", false},
	} {
		if got, ok := topicHost(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("topicHost(%q): got %q %v, want %q %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
