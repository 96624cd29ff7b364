//go:build e2e || reliability

package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

const (
	// testModel is the model the simulators serve and the gateways expose.
	testModel = "qwen3-sim"
	// startTimeout bounds the start of one process (tokenizer loading on a shared machine).
	startTimeout = 60 * time.Second
	// reqTimeout bounds one request and one poll.
	reqTimeout = 30 * time.Second
	// survivorTimeout bounds TestMain's wait for the suite's processes to be gone.
	survivorTimeout = 10 * time.Second
)

var (
	bins          harness.Binaries
	tokenizerPath string
	// client is shared by the tests; its timeout bounds every request.
	client = &http.Client{Timeout: reqTimeout}
	// reportMu serialises RELIABILITY lines (tests may run subtests concurrently).
	reportMu sync.Mutex
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	tmp, err := os.MkdirTemp("", "kvgate-reliability-bin")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if bins, err = harness.BuildBinaries(ctx, tmp, "gateway", "simworker", "kvbridge"); err != nil {
		return 1, err
	}
	if tokenizerPath, err = harness.Tokenizer(ctx); err != nil {
		return 1, err
	}
	// libzmq fixes its socket limit when the process's first socket opens, and the scenarios
	// that publish in-process (flood, scale faults) share this process: the limit must be
	// raised for the largest of them before any of them runs.
	if err := kvbridge.SetSocketLimit(2*scaleFaultWorkers + 256); err != nil {
		return 1, err
	}
	code := m.Run()
	client.CloseIdleConnections()
	// Issue 17: no process the suite started (simulators, gateways, kvbridge) may outlive it,
	// whatever the tests' result. The deadline covers the kernel tearing down processes killed at cleanup.
	sctx, scancel := context.WithTimeout(context.Background(), survivorTimeout)
	defer scancel()
	if err := harness.CheckNoSurvivors(sctx); err != nil {
		return 1, err
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			return 1, fmt.Errorf("goroutine leak: %w", err)
		}
	}
	return code, nil
}

// report prints one RELIABILITY line (and appends it to $RELIABILITY_REPORT when set), so
// docs/reliability.md can quote measured numbers.
func report(t *testing.T, scenario string, kv ...any) {
	t.Helper()
	_ = t // the line goes to stdout (shown by go test -v) rather than t.Log, so it is printed once
	var b strings.Builder
	fmt.Fprintf(&b, "RELIABILITY scenario=%s", scenario)
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		if f, ok := v.(float64); ok { // counters come from Prometheus as floats: no exponents
			v = strconv.FormatFloat(f, 'f', -1, 64)
		}
		fmt.Fprintf(&b, " %v=%v", kv[i], v)
	}
	line := b.String()
	reportMu.Lock()
	defer reportMu.Unlock()
	fmt.Println(line)
	if p := os.Getenv("RELIABILITY_REPORT"); p != "" {
		if f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func newLauncher(t *testing.T) *harness.Launcher {
	return &harness.Launcher{Bin: bins, Tokenizer: tokenizerPath, Model: testModel, LogDir: t.TempDir(), StartTimeout: startTimeout}
}

// stopAtCleanup stops p when the test ends (a process the test killed itself is fine) and
// prints its log tail when the test failed.
func stopAtCleanup(t *testing.T, p *harness.Process) {
	t.Cleanup(func() {
		killed, _ := p.Exited()
		if err := p.Stop(harness.DefaultStopTimeout); err != nil && !killed {
			t.Errorf("%v", err)
		}
		if t.Failed() {
			t.Logf("---- %s log tail (%s) ----\n%s", p.Name, p.LogPath, p.LogTail(3000))
		}
	})
}

func startSim(t *testing.T, l *harness.Launcher, o harness.SimOptions) *harness.Sim {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := l.StartSim(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, s.Process)
	return s
}

// restartSim starts a simulator on the ports of s (an engine restart: empty cache, sequence
// numbers from 0).
func restartSim(t *testing.T, l *harness.Launcher, s *harness.Sim, name string, args ...string) *harness.Sim {
	t.Helper()
	o := harness.SimOptions{Name: name, Port: s.Port, Args: args, TimeScale: simScale}
	if s.KVEvents != "" {
		o.Events = true
		o.EventsPort, o.ReplayPort = portOf(t, s.KVEvents), portOf(t, s.Replay)
	}
	return startSim(t, l, o)
}

func startGateway(t *testing.T, l *harness.Launcher, o harness.GatewayOptions) *harness.Gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	g, err := l.StartGateway(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, g.Process)
	return g
}

// simScale is the simulators' time scale: decode steps of ~26 ms × 0.2 ≈ 5 ms, so a
// 200-token stream lasts about a second.
const simScale = 0.2

// fastHealth are gateway flags for quick failure detection.
var fastHealth = []string{"--health-interval", "200ms", "--health-timeout", "300ms"}

func portOf(t *testing.T, endpoint string) int {
	t.Helper()
	i := strings.LastIndexByte(endpoint, ':')
	var p int
	if _, err := fmt.Sscan(endpoint[i+1:], &p); err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	return p
}

// text returns a deterministic prompt of n words derived from tag: prompts with different
// tags share no prefix, the same tag always gives the same text.
func text(tag string, n int) string {
	words := []string{"alpha", "river", "stone", "cloud", "ember", "violet", "harbor", "maple", "quartz", "lantern", "meadow", "copper", "falcon", "orbit", "saffron", "tundra"}
	var b strings.Builder
	b.WriteString(tag)
	h := uint32(2166136261)
	for _, c := range []byte(tag) {
		h = (h ^ uint32(c)) * 16777619
	}
	for i := range n {
		h = h*1664525 + 1013904223
		b.WriteByte(' ')
		b.WriteString(words[(h>>16)%uint32(len(words))])
		if i%13 == 12 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// result is one non-streaming response.
type result struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r result) worker() string { return r.Header.Get("X-Kvgate-Worker") }

// apiErr decodes an OpenAI error body; ok is false when the body is not one.
func apiErr(b []byte) (typ, code, msg string, ok bool) {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		return "", "", "", false
	}
	return e.Error.Type, fmt.Sprint(e.Error.Code), e.Error.Message, true
}

func do(ctx context.Context, method, u string, body []byte, hdr map[string]string) (result, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

func completion(t *testing.T, base string, body map[string]any) result {
	t.Helper()
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	r, err := do(ctx, http.MethodPost, base+"/v1/completions", b, nil)
	if err != nil {
		t.Fatalf("POST %s/v1/completions: %v", base, err)
	}
	return r
}

// warm sends prompt straight to a simulator so its cache (and event stream) holds it.
func warm(t *testing.T, s *harness.Sim, prompt string) {
	t.Helper()
	r := completion(t, s.URL, map[string]any{"model": testModel, "prompt": prompt, "max_tokens": 2})
	if r.Status != http.StatusOK {
		t.Fatalf("warming %s: status %d: %s", s.Name, r.Status, r.Body)
	}
}

// streamResult is one streaming response: the data payloads in order.
type streamResult struct {
	Status int
	Worker string
	Events []string
	Err    error // transport error while reading, if any
}

// done reports whether the stream ended with [DONE] and carried no error event.
func (s streamResult) done() bool {
	return s.Err == nil && s.Status == http.StatusOK && len(s.Events) > 0 && s.Events[len(s.Events)-1] == "[DONE]" && s.errorEvent() == ""
}

// errorEvent returns the first data payload carrying an OpenAI error object.
func (s streamResult) errorEvent() string {
	for _, e := range s.Events {
		if _, _, _, ok := apiErr([]byte(e)); ok {
			return e
		}
	}
	return ""
}

// stream posts a streaming completion and reads it to the end; onFirst (optional) runs once
// the first data event arrived, with the worker serving the stream.
func stream(ctx context.Context, base string, body map[string]any, onFirst func(worker string)) streamResult {
	body["stream"] = true
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(b))
	if err != nil {
		return streamResult{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return streamResult{Err: err}
	}
	defer resp.Body.Close()
	out := streamResult{Status: resp.StatusCode, Worker: resp.Header.Get("X-Kvgate-Worker")}
	if resp.StatusCode != http.StatusOK {
		rb, _ := io.ReadAll(resp.Body)
		out.Events = []string{string(rb)}
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		out.Events = append(out.Events, data)
		if len(out.Events) == 1 && onFirst != nil {
			onFirst(out.Worker)
		}
	}
	out.Err = sc.Err()
	return out
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	r, err := do(ctx, http.MethodGet, u, nil, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", u, r.Status, r.Body)
	}
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, r.Body)
	}
}

// workerState is the part of a GET /workers entry the suite reads.
type workerState struct {
	URL         string `json:"url"`
	Healthy     bool   `json:"healthy"`
	EventStream string `json:"event_stream"`
	IndexBlocks int    `json:"index_blocks"`
}

func workers(t *testing.T, gw string) map[string]workerState {
	t.Helper()
	var body struct {
		Workers []workerState `json:"workers"`
	}
	getJSON(t, gw+"/workers", &body)
	out := map[string]workerState{}
	for _, w := range body.Workers {
		out[w.URL] = w
	}
	return out
}

// simBlocks returns how many blocks the simulator really holds (all ranks), from /debug/cache.
func simBlocks(t *testing.T, s *harness.Sim) int {
	t.Helper()
	var dc struct {
		Ranks []struct {
			Hashes []uint64 `json:"hashes"`
		} `json:"ranks"`
	}
	getJSON(t, s.URL+"/debug/cache", &dc)
	n := 0
	for _, r := range dc.Ranks {
		n += len(r.Hashes)
	}
	return n
}

// route is the part of GET /debug/route the suite reads.
type route struct {
	RequestBlocks int `json:"request_blocks"`
	Workers       []struct {
		URL           string `json:"url"`
		Healthy       bool   `json:"healthy"`
		MatchedEvents int    `json:"matched_events"`
	} `json:"workers"`
	Decision *struct {
		Worker        string `json:"worker"`
		Reason        string `json:"reason"`
		MatchedBlocks int    `json:"matched_blocks"`
	} `json:"decision"`
}

func debugRoute(t *testing.T, gw, prompt string) route {
	t.Helper()
	var r route
	getJSON(t, gw+"/debug/route?prompt="+url.QueryEscape(prompt), &r)
	return r
}

// matchedEvents returns the blocks of prompt the index holds for worker u (-1: not listed).
func (r route) matchedEvents(u string) int {
	for _, w := range r.Workers {
		if w.URL == u {
			return w.MatchedEvents
		}
	}
	return -1
}

// metrics is a parsed Prometheus text exposition.
type metrics map[string]*dto.MetricFamily

func scrape(t *testing.T, u string) metrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	r, err := do(ctx, http.MethodGet, u, nil, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("parse %s: %v", u, err)
	}
	return fams
}

// sum adds the values of name's series whose labels include match.
func (m metrics) sum(name string, match map[string]string) float64 {
	f := m[name]
	if f == nil {
		return 0
	}
	total := 0.0
next:
	for _, s := range f.GetMetric() {
		for k, v := range match {
			found := false
			for _, lp := range s.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			total += s.GetCounter().GetValue()
		case s.Gauge != nil:
			total += s.GetGauge().GetValue()
		case s.Untyped != nil:
			total += s.GetUntyped().GetValue()
		case s.Histogram != nil:
			total += float64(s.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// quantile estimates the q-quantile of histogram name (all series) from its buckets, in the
// histogram's unit: the upper bound of the bucket holding it.
func (m metrics) quantile(name string, q float64) float64 {
	f := m[name]
	if f == nil {
		return 0
	}
	type bk struct{ le, n float64 }
	var bs []bk
	var total float64
	for _, s := range f.GetMetric() {
		h := s.GetHistogram()
		total += float64(h.GetSampleCount())
		for i, b := range h.GetBucket() {
			if i < len(bs) {
				bs[i].n += float64(b.GetCumulativeCount())
			} else {
				bs = append(bs, bk{b.GetUpperBound(), float64(b.GetCumulativeCount())})
			}
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	for _, b := range bs {
		if b.n >= q*total {
			return b.le
		}
	}
	return 0
}

func mustf(t *testing.T, cond bool, format string, args ...any) {
	t.Helper()
	if !cond {
		t.Fatalf(format, args...)
	}
}

// poll calls cond every 20 ms until it holds or d passes; it returns the time it took.
func poll(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	ok := harness.Eventually(d, cond)
	return time.Since(start), ok
}
