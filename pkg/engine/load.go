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

// Load is an engine's own count of requests, summed over its DP ranks (and model names).
type Load struct {
	// Running is the requests being computed; Waiting those in the engine's own queue, not
	// scheduled yet (vllm:num_requests_waiting, SGLang's num_queue_reqs).
	Running, Waiting int64
}

// Total returns running plus waiting requests, the load a policy compares.
func (l Load) Total() int64 { return l.Running + l.Waiting }

// Engine-load gauges: vLLM's running and waiting requests, and SGLang's.
var (
	engineRunningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	engineWaitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
)

var errNoLoadGauges = errors.New("engine: metrics: no engine load gauges")

// parseEngineLoad sums the engine-load gauges of a Prometheus text exposition over every label
// set (DP ranks, model names), with the Prometheus library's own parser. An exposition with
// only one of the two kinds counts the other as 0.
func parseEngineLoad(r io.Reader) (Load, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Load{}, fmt.Errorf("engine: metrics: %w", err)
	}
	running, okR := sumGauges(fams, engineRunningNames)
	waiting, okW := sumGauges(fams, engineWaitingNames)
	if !okR && !okW {
		return Load{}, errNoLoadGauges
	}
	return Load{Running: running, Waiting: waiting}, nil
}

// sumGauges sums the samples of the named families, rounded, and reports whether any was
// there.
func sumGauges(fams map[string]*dto.MetricFamily, names []string) (int64, bool) {
	var total float64
	found := false
	for _, name := range names {
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
	// A sum past int64 is no real load; clamp rather than wrap.
	return int64(math.Round(min(max(total, 0), math.MaxInt32))), found
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
