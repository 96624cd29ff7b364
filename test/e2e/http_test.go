//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var httpClient = &http.Client{Timeout: defaultTestTimeout}

// completion is the outcome of one non-streaming POST /v1/completions.
type completion struct {
	Status int
	Header http.Header
	Body   []byte
}

// worker returns the x-kvgate-worker header.
func (c completion) worker() string { return c.Header.Get("X-Kvgate-Worker") }

// matched returns the x-kvgate-matched-blocks header as a number (-1 when absent).
func (c completion) matched() int {
	n, err := strconv.Atoi(c.Header.Get("X-Kvgate-Matched-Blocks"))
	if err != nil {
		return -1
	}
	return n
}

func postCompletion(t *testing.T, base string, body map[string]any) completion {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Post(base+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s/v1/completions: %v", base, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return completion{Status: resp.StatusCode, Header: resp.Header, Body: rb}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := httpClient.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", u, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", u, err, b)
	}
}

// routeExplanation is the part of GET /debug/route the tests read.
type routeExplanation struct {
	RequestBlocks int `json:"request_blocks"`
	Workers       []struct {
		URL            string `json:"url"`
		Healthy        bool   `json:"healthy"`
		EventFed       bool   `json:"event_fed"`
		MatchedEvents  int    `json:"matched_events"`
		MatchedTree    int    `json:"matched_tree"`
		MatchedPending int    `json:"matched_pending"`
		ScoredBlocks   int    `json:"scored_blocks"`
		ScoredFrom     string `json:"scored_from"`
	} `json:"workers"`
	Decision struct {
		Worker        string `json:"worker"`
		Reason        string `json:"reason"`
		MatchedBlocks int    `json:"matched_blocks"`
	} `json:"decision"`
}

func debugRoute(t *testing.T, gw, prompt string) routeExplanation {
	t.Helper()
	var r routeExplanation
	getJSON(t, gw+"/debug/route?prompt="+url.QueryEscape(prompt), &r)
	return r
}

// workersView is the part of GET /workers the tests read.
type workersView struct {
	Workers []struct {
		URL         string `json:"url"`
		Healthy     bool   `json:"healthy"`
		EventFed    bool   `json:"event_fed"`
		EventStream string `json:"event_stream"`
		IndexBlocks int    `json:"index_blocks"`
	} `json:"workers"`
}

// text returns deterministic prose-like text of about n words for tag: every tag gives
// different text, so different tags share no prefix beyond the first token or two.
func text(tag string, n int) string {
	words := []string{"river", "mountain", "quiet", "signal", "harbor", "lantern", "orbit", "copper",
		"meadow", "engine", "silver", "thunder", "garden", "pencil", "window", "rocket", "forest",
		"marble", "cotton", "bridge", "planet", "violet", "anchor", "candle", "desert", "falcon"}
	var seed uint64
	for _, c := range tag {
		seed = seed*131 + uint64(c)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	b.WriteString("Report " + tag + ":")
	for i := range n {
		b.WriteByte(' ')
		b.WriteString(words[r.IntN(len(words))])
		if i%12 == 11 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// sseEvent is one "data:" line of a stream and when it arrived.
type sseEvent struct {
	Data string
	At   time.Duration
}

// streamCompletion posts a streaming request and returns every data event with its arrival
// time relative to the request, reading line by line so arrival times are real.
func streamCompletion(t *testing.T, base string, body map[string]any) (int, []sseEvent) {
	t.Helper()
	body["stream"] = true
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST stream: %v", err)
	}
	defer resp.Body.Close()
	var events []sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if data, ok := strings.CutPrefix(line, "data:"); ok {
			events = append(events, sseEvent{Data: strings.TrimSpace(data), At: time.Since(start)})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	return resp.StatusCode, events
}

// scrape fetches a Prometheus text endpoint and parses it.
func scrape(t *testing.T, u string) map[string]*metricFamily {
	t.Helper()
	resp, err := httpClient.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", u, err)
	}
	out := map[string]*metricFamily{}
	for name, f := range fams {
		mf := &metricFamily{}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			v := 0.0
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Histogram != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			case m.Summary != nil:
				v = float64(m.GetSummary().GetSampleCount())
			case m.Untyped != nil:
				v = m.GetUntyped().GetValue()
			}
			mf.samples = append(mf.samples, sample{labels, v})
		}
		out[name] = mf
	}
	return out
}

type sample struct {
	labels map[string]string
	value  float64
}

// metricFamily holds one family's samples; histogram and summary samples carry their count.
type metricFamily struct{ samples []sample }

// sum adds the samples whose labels include every pair of match.
func (f *metricFamily) sum(match map[string]string) float64 {
	if f == nil {
		return 0
	}
	total := 0.0
outer:
	for _, s := range f.samples {
		for k, v := range match {
			if s.labels[k] != v {
				continue outer
			}
		}
		total += s.value
	}
	return total
}

func mustf(t *testing.T, cond bool, format string, args ...any) {
	t.Helper()
	if !cond {
		t.Fatalf(format, args...)
	}
}
