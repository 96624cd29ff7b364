package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Prefix-cache counters, in tokens, in the names vLLM (V1) exports and the simulator copies;
// older vLLM releases used the gpu_ names.
var (
	hitsNames    = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	queriesNames = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
)

// cacheCounters are the fleet's prefix-cache counters at one moment, summed over workers and
// label sets.
type cacheCounters struct {
	hits, queries float64
}

// parseCacheCounters reads the Prometheus text exposition format and sums the first family
// name found of each counter over all its series (a worker exports one series per engine or
// model).
func parseCacheCounters(r io.Reader) (cacheCounters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return cacheCounters{}, fmt.Errorf("parse metrics: %w", err)
	}
	var c cacheCounters
	var okH, okQ bool
	c.hits, okH = sumFamily(fams, hitsNames)
	c.queries, okQ = sumFamily(fams, queriesNames)
	if !okH || !okQ {
		return c, fmt.Errorf("parse metrics: no %s / %s counters", hitsNames[0], queriesNames[0])
	}
	return c, nil
}

func sumFamily(fams map[string]*dto.MetricFamily, names []string) (float64, bool) {
	for _, n := range names {
		mf, ok := fams[n]
		if !ok {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				sum += m.GetUntyped().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
		return sum, true
	}
	return 0, false
}

// scrapeFleet fetches every worker's /metrics and sums the counters; any failure fails the
// whole scrape, since a partial sum would give a wrong fleet hit rate.
func scrapeFleet(ctx context.Context, client *http.Client, urls []string) (cacheCounters, error) {
	var total cacheCounters
	for _, u := range urls {
		c, err := scrapeOne(ctx, client, u)
		if err != nil {
			return cacheCounters{}, err
		}
		total.hits += c.hits
		total.queries += c.queries
	}
	return total, nil
}

func scrapeOne(ctx context.Context, client *http.Client, url string) (cacheCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return cacheCounters{}, fmt.Errorf("loadgen: scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return cacheCounters{}, fmt.Errorf("loadgen: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return cacheCounters{}, fmt.Errorf("loadgen: scrape %s: status %d", url, resp.StatusCode)
	}
	c, err := parseCacheCounters(resp.Body)
	if err != nil {
		return cacheCounters{}, fmt.Errorf("loadgen: scrape %s: %w", url, err)
	}
	return c, nil
}
