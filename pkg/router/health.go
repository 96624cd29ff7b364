package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// httpClient is the shared client for http:// workers: requests, health checks, model
// discovery and metric scrapes. Environment proxies are ignored (workers are addressed
// directly) and compression is off so bodies pass through unchanged.
type httpClient struct {
	tr *http.Transport
	c  *http.Client
}

func newHTTPClient() *httpClient {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	return &httpClient{tr: tr, c: &http.Client{Transport: tr}}
}

func (h *httpClient) close() { h.tr.CloseIdleConnections() }

// healthLoop checks the worker at once and then every HealthInterval, and scrapes its engine
// load every EngineMetricsInterval when configured. It returns when ctx is done.
func (m *member) healthLoop(ctx context.Context) {
	cfg := &m.rt.cfg
	tick := time.NewTicker(cfg.HealthInterval)
	defer tick.Stop()
	var scrape <-chan time.Time
	if cfg.EngineMetricsInterval > 0 {
		st := time.NewTicker(cfg.EngineMetricsInterval)
		defer st.Stop()
		scrape = st.C
	}
	m.checkHealth(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.checkHealth(ctx)
		case <-scrape:
			m.scrapeEngineLoad(ctx)
		}
	}
}

// checkHealth runs one health check (and model discovery while the worker's model is unknown)
// and records the result.
func (m *member) checkHealth(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.rt.cfg.HealthTimeout)
	defer cancel()
	var err error
	if m.eng != nil {
		err = m.eng.health(cctx)
	} else {
		err = m.httpHealth(cctx)
	}
	if ctx.Err() != nil {
		return // shutting down: not a worker failure
	}
	if err == nil && m.w.ReportedModel() == "" {
		var name string
		var adapters []string
		if m.eng != nil {
			name, err = m.eng.modelName(cctx)
		} else {
			name, adapters, err = m.httpModel(cctx)
		}
		if err == nil && name != "" {
			m.w.SetAdapters(adapters) // before the name: a request must not see one without the other
			m.w.SetReportedModel(name)
			m.rt.log.Info("worker model discovered", zap.String("worker", m.w.URL()), zap.String("model", name), zap.Strings("lora_adapters", adapters))
		}
		err = nil // discovery is best effort; the worker is healthy
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if m.w.SetHealth(err == nil, msg) {
		if err == nil {
			m.rt.log.Info("worker healthy", zap.String("worker", m.w.URL()))
		} else {
			m.rt.log.Warn("worker unhealthy; its cached blocks leave the index", zap.String("worker", m.w.URL()), zap.String("reason", msg))
			m.forgetCache()
		}
	}
}

func (m *member) httpHealth(ctx context.Context) error {
	resp, err := m.httpGet(ctx, "/health")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("router: health: status %d", resp.StatusCode)
	}
	return nil
}

// httpModel reads the worker's /v1/models: the base model (the first card without a parent,
// else the first card) and its LoRA adapters. vLLM lists an adapter as a card whose "parent" is
// the base model (and whose "root" is the adapter's path); a card is an adapter when its parent
// is set and differs from its own id, or, with no parent, when its root is set and differs from
// both the base's root and the base's id (aliases of the base share its root). Adapters are read
// once, with the model; adapters loaded into a running engine later are not seen.
func (m *member) httpModel(ctx context.Context) (base string, adapters []string, err error) {
	resp, err := m.httpGet(ctx, "/v1/models")
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("router: models: status %d", resp.StatusCode)
	}
	var body struct {
		Data []modelInfo `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return "", nil, fmt.Errorf("router: models: %w", err)
	}
	base, adapters = splitModels(body.Data)
	return base, adapters, nil
}

// modelInfo is the part of a /v1/models card that model discovery reads.
type modelInfo struct {
	ID     string `json:"id"`
	Root   string `json:"root"`
	Parent string `json:"parent"`
}

// splitModels returns the base model and the LoRA adapters of a /v1/models listing (see
// httpModel for the rule).
func splitModels(cards []modelInfo) (base string, adapters []string) {
	if len(cards) == 0 {
		return "", nil
	}
	bi := 0
	for i, c := range cards {
		if c.Parent == "" && c.ID != "" {
			bi = i
			break
		}
	}
	b := cards[bi]
	for i, c := range cards {
		if i == bi || c.ID == "" || c.ID == b.ID {
			continue
		}
		switch {
		case c.Parent != "" && c.Parent != c.ID:
		case c.Parent == "" && c.Root != "" && c.Root != b.Root && c.Root != b.ID:
		default:
			continue
		}
		adapters = append(adapters, c.ID)
	}
	return b.ID, adapters
}

func (m *member) httpGet(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.w.URL()+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.rt.httpc.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("router: get %s: %w", path, stripURL(err))
	}
	return resp, nil
}

// stripURL unwraps *url.Error so messages carry the cause without repeating the URL.
func stripURL(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && u.Unwrap() != nil && strings.HasPrefix(fmt.Sprintf("%T", err), "*url.") {
		return u.Unwrap()
	}
	return err
}

// Engine-load gauges: vLLM's names and SGLang's.
var engineLoadNames = []string{
	"vllm:num_requests_running", "vllm:num_requests_waiting",
	"sglang:num_running_reqs", "sglang:num_queue_reqs",
}

// scrapeEngineLoad reads the engine's own load, running+waiting requests: from an http://
// worker's /metrics (summed over every label set, i.e. over DP ranks and model names), from a
// grpc:// worker's GetLoads (summed over ranks). A failed scrape marks the load unknown.
func (m *member) scrapeEngineLoad(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.rt.cfg.HealthTimeout)
	defer cancel()
	n, err := m.engineLoad(cctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		m.w.SetEngineLoad(-1, m.rt.now())
		return
	}
	m.w.SetEngineLoad(n, m.rt.now())
}

func (m *member) engineLoad(ctx context.Context) (int64, error) {
	if m.eng != nil {
		return m.eng.engineLoad(ctx)
	}
	resp, err := m.httpGet(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("router: metrics: status %d", resp.StatusCode)
	}
	return parseEngineLoad(io.LimitReader(resp.Body, 16<<20))
}

// parseEngineLoad sums the engine-load gauges of a Prometheus text exposition.
func parseEngineLoad(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var total float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		for _, name := range engineLoadNames {
			if !strings.HasPrefix(line, name) {
				continue
			}
			rest := line[len(name):]
			if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
				continue
			}
			if i := strings.LastIndexByte(rest, '}'); i >= 0 {
				rest = rest[i+1:]
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				continue
			}
			total += v
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("router: metrics: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("router: metrics: no engine load gauges")
	}
	return int64(total + 0.5), nil
}
