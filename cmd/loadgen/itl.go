package main

import "time"

// Inter-token latency: the gaps between a stream's successive output chunks, pooled over
// every completed request, as vLLM's benchmark_serving reports ITL. TTFT says how long a
// client waited for the first token; ITL says how smoothly the rest came, which is what an
// engine that runs prefills inside its decode steps (chunked prefill) disturbs and
// prefill/decode disaggregation protects.

// tokenGaps records the arrival times of one stream's output chunks; its gaps are bounded
// by the request's max_tokens (one chunk per output token at most).
type tokenGaps struct {
	last time.Time
	gaps []time.Duration
}

// output records an output chunk that arrived at now.
func (g *tokenGaps) output(now time.Time) {
	if !g.last.IsZero() {
		g.gaps = append(g.gaps, now.Sub(g.last))
	}
	g.last = now
}

// itlSummary pools the token gaps of the completed requests among the sent slots, in
// simulated milliseconds (measured ÷ scale).
func itlSummary(r *runner) summary {
	var xs []float64
	for i, o := range r.outcomes {
		if !r.sent[i] || !o.ok {
			continue
		}
		for _, g := range o.itl {
			xs = append(xs, ms(g)/r.scale)
		}
	}
	return finite(summarize(xs))
}
