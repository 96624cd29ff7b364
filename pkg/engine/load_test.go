package engine

import (
	"os"
	"strings"
	"testing"
)

func TestParseEngineLoad(t *testing.T) {
	tests := []struct {
		name, in string
		want     Load
		ok       bool
	}{
		{"vllm", "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\n", Load{1, 2}, true},
		{"sglang", "sglang:num_running_reqs{tp_rank=\"0\"} 5\nsglang:num_queue_reqs{tp_rank=\"0\"} 1\n", Load{5, 1}, true},
		{"labels with spaces", "vllm:num_requests_running{a=\"x y\"} 7 1700000000\n", Load{7, 0}, true},
		{"brace inside a label value", "vllm:num_requests_running{a=\"x} 9\"} 7\n", Load{7, 0}, true},
		{"typed gauges over ranks", "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n" +
			"vllm:num_requests_running{engine=\"0\"} 3.0\nvllm:num_requests_running{engine=\"1\"} 2\nvllm:num_requests_running_other 100\n", Load{5, 0}, true},
		{"waiting over ranks", "vllm:num_requests_waiting{engine=\"0\"} 4\nvllm:num_requests_waiting{engine=\"1\"} 2\n", Load{0, 6}, true},
		{"a negative or huge gauge is clamped", "vllm:num_requests_running -3\nvllm:num_requests_waiting 1e300\n", Load{0, 1<<31 - 1}, true},
		{"none", "other 1\n", Load{}, false},
		{"malformed", "vllm:num_requests_running{ 1\n", Load{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEngineLoad(strings.NewReader(tt.in))
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("got %+v, %v; want %+v, ok=%v", got, err, tt.want, tt.ok)
			}
		})
	}
}

// TestParseEngineLoadSimulatorFixture reads the simulator's real /metrics capture.
func TestParseEngineLoadSimulatorFixture(t *testing.T) {
	f, err := os.Open("../../testdata/fixtures/kvevents/sim-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := parseEngineLoad(f); err != nil {
		t.Fatalf("sim-metrics.txt: %v", err)
	}
}

func FuzzParseEngineLoad(f *testing.F) {
	for _, s := range []string{"vllm:num_requests_running 1\n", "vllm:num_requests_waiting{a=\"}\"} 2 3\n", "# TYPE x gauge\nx 1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseEngineLoad(strings.NewReader(s))
		if err != nil && n != (Load{}) || n.Running < 0 || n.Waiting < 0 {
			t.Fatalf("error %v with load %+v", err, n)
		}
	})
}
