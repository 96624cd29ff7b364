package engine

import (
	"errors"
	"fmt"
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// engineLoadNames are the engine-load gauges: vLLM's running and waiting requests, and
// SGLang's.
var engineLoadNames = []string{
	"vllm:num_requests_running", "vllm:num_requests_waiting",
	"sglang:num_running_reqs", "sglang:num_queue_reqs",
}

var errNoLoadGauges = errors.New("engine: metrics: no engine load gauges")

// parseEngineLoad sums the engine-load gauges of a Prometheus text exposition over every label
// set (DP ranks, model names), with the Prometheus library's own parser.
func parseEngineLoad(r io.Reader) (int64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("engine: metrics: %w", err)
	}
	var total float64
	found := false
	for _, name := range engineLoadNames {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			if v, ok := sampleValue(f.GetType(), m); ok {
				total += v
				found = true
			}
		}
	}
	if !found {
		return 0, errNoLoadGauges
	}
	return int64(math.Round(total)), nil
}

// sampleValue is the value of a gauge or untyped sample (engines expose these as gauges; a
// text exposition without TYPE lines parses as untyped).
func sampleValue(t dto.MetricType, m *dto.Metric) (float64, bool) {
	var v float64
	switch t {
	case dto.MetricType_GAUGE:
		v = m.GetGauge().GetValue()
	case dto.MetricType_UNTYPED:
		v = m.GetUntyped().GetValue()
	case dto.MetricType_COUNTER:
		v = m.GetCounter().GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
