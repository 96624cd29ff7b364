package kvbridge

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsNilSafe(t *testing.T) {
	var m *Metrics
	// Every method must be a no-op on nil.
	m.countBatch("w", OutcomeApplied)
	m.countEvents("w", "stored", 3)
	m.countMalformed("w", 1)
	m.countGap("w")
	m.countReplay("w", ReplayOK)
	m.countReset("w", ResetRestart)
	m.countResync("w")
	m.setStreamUp("w", true)
	m.setCursor("w", 0, 7)
	m.Forget("w")
}

func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m1, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	m2, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics on the same registry: got error %v, want nil", err)
	}
	m1.countBatch("w1", OutcomeApplied)
	m2.countBatch("w1", OutcomeApplied)
	m2.countGap("w1")
	m1.setStreamUp("w1", true)
	m1.setCursor("w1", 1, 42)
	m1.countReplay("w1", ReplayMismatch)
	m1.countReset("w1", ResetGap)
	m1.countResync("w1")
	m1.countEvents("w1", "stored", 5)
	m1.countMalformed("w1", 2)

	if got := testutil.ToFloat64(m1.batches.WithLabelValues("w1", OutcomeApplied)); got != 2 {
		t.Errorf("applied batches: got %v, want 2 (both Metrics share one collector)", got)
	}
	want := `
# HELP kvgate_kv_event_gaps_total Sequence gaps detected in a KV event stream (any DP rank).
# TYPE kvgate_kv_event_gaps_total counter
kvgate_kv_event_gaps_total{worker="w1"} 1
# HELP kvgate_kv_stream_up 1 when the worker's KV event stream is connected, 0 otherwise.
# TYPE kvgate_kv_stream_up gauge
kvgate_kv_stream_up{worker="w1"} 1
# HELP kvgate_kv_stream_cursor Last applied sequence number of a worker's KV event stream, per DP rank.
# TYPE kvgate_kv_stream_cursor gauge
kvgate_kv_stream_cursor{rank="1",worker="w1"} 42
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kvgate_kv_event_gaps_total", "kvgate_kv_stream_up", "kvgate_kv_stream_cursor"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(m1.replays); got != 1 {
		t.Errorf("replay series: got %d, want 1", got)
	}
	m1.setStreamUp("w1", false)
	if got := testutil.ToFloat64(m1.streamUp.WithLabelValues("w1")); got != 0 {
		t.Errorf("stream up after down: got %v, want 0", got)
	}
	m1.Forget("w1")
	if got := testutil.CollectAndCount(m1.batches); got != 0 {
		t.Errorf("batch series after Forget: got %d, want 0", got)
	}
}

func TestMetricsConflictingRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	// A gauge under a name NewMetrics uses for a counter: registration must fail with an error,
	// not panic.
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvgate_kv_event_batches_total", Help: "x"}))
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("NewMetrics with a conflicting collector: got nil error, want an error")
	}
}
