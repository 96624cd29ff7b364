package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// `gateway render --trust-request-chat-template` runs os.Executable() render-sandbox: in
	// tests that is this binary, which then acts as the sandbox child.
	if len(os.Args) > 1 && os.Args[1] == renderSandboxCommand {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

const defaultTestTimeout = 10 * time.Second

// gatewayStartTimeout bounds a gateway's start: loading real tokenizers and chat templates
// takes seconds under -race on a busy machine.
const gatewayStartTimeout = 60 * time.Second

func TestParseOptionsConfigAndFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	os.WriteFile(cfg, []byte(`
port: 31000
policy: round_robin
cache_threshold: 0.5
health_interval: 2s
workers:
  - http://a:1
  - url: grpc://b:2
    runtime: sglang
`), 0o600)
	o, err := parseOptions([]string{"--config", cfg, "--policy", "least_load", "--worker", "url=http://c:3,kv_events=tcp://c:5557"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Port != 31000 || o.Policy != "least_load" || o.CacheThreshold != 0.5 || o.HealthInterval != 2*time.Second || o.PrometheusPort != 29000 {
		t.Errorf("options: got port %d policy %s threshold %g health %v prom %d", o.Port, o.Policy, o.CacheThreshold, o.HealthInterval, o.PrometheusPort)
	}
	var urls []string
	for _, w := range o.Workers {
		urls = append(urls, w.Spec.String())
	}
	want := []string{"url=http://a:1", "url=grpc://b:2,runtime=sglang", "url=http://c:3,kv_events=tcp://c:5557"}
	if d := cmp.Diff(want, urls); d != "" {
		t.Errorf("workers (-want +got):\n%s", d)
	}
}

func TestParseOptionsErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("colour: red\n"), 0o600)
	tests := []struct {
		name string
		args []string
	}{
		{"bad worker", []string{"--worker", "url=ftp://x:1"}},
		{"unknown flag", []string{"--nope"}},
		{"unknown config key", []string{"--config", bad}},
		{"missing config", []string{"--config", filepath.Join(dir, "missing.yaml")}},
		{"both tokenizers", []string{"--model-path", dir, "--tokenizer", "x"}},
		{"port range", []string{"--port", "70000"}},
		{"stray args", []string{"serve"}},
		{"prefill workers without decode", []string{"--worker", "url=http://a:1,role=prefill", "--worker", "url=http://b:1,role=prefill"}},
		{"decode workers without prefill", []string{"--worker", "url=http://a:1,role=decode"}},
		{"sample ratio", []string{"--otlp-traces-sample-ratio", "1.5"}},
		{"access log", []string{"--access-log", "yes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseOptions(tt.args, io.Discard); err == nil {
				t.Errorf("parseOptions(%q): got nil error", tt.args)
			}
		})
	}
}

func TestParseOptionsRoles(t *testing.T) {
	for _, args := range [][]string{
		{"--worker", "url=http://a:1,role=prefill", "--worker", "url=http://b:1,role=decode"},
		{"--worker", "url=http://a:1,role=prefill", "--worker", "url=http://b:1"},
		{"--worker", "url=http://a:1,role=decode", "--worker", "url=http://b:1,role=both"},
	} {
		if _, err := parseOptions(args, io.Discard); err != nil {
			t.Errorf("parseOptions(%q): %v", args, err)
		}
	}
	_, err := parseOptions([]string{"--model", "m1", "--worker", "url=http://a:1,role=prefill"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"m1"`) {
		t.Errorf("got %v, want an error naming the model", err)
	}
}

// A --worker with credentials is refused without the password appearing in the error or on
// stderr (the flag package would quote the raw value).
func TestBadWorkerFlagDoesNotEchoCredentials(t *testing.T) {
	const secret = "S3cretPassw0rd"
	for _, spec := range []string{"url=http://admin:" + secret + "@10.0.0.1:8000", "url=http://10.0.0.1:8000,kv_events=tcp://u:" + secret + "@10.0.0.1:5557"} {
		var stderr strings.Builder
		_, err := parseOptions([]string{"--worker", "url=http://ok:1", "--worker", spec}, &stderr)
		if err == nil {
			t.Fatalf("parseOptions(%q): got nil error", spec)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(stderr.String(), secret) {
			t.Errorf("password echoed: error %q, stderr %q", err, stderr.String())
		}
		if !strings.Contains(err.Error(), "--worker #2") {
			t.Errorf("error %q does not say which --worker is wrong", err)
		}
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, nil, io.Discard, &out); code != 0 {
		t.Fatalf("exit: got %d, want 0", code)
	}
	for _, f := range []string{"host", "port", "prometheus-port", "model-path", "tokenizer", "model", "worker", "config", "policy",
		"cache-threshold", "balance-abs-threshold", "balance-rel-threshold", "kv-index", "block-size", "kv-listen", "forward-token-ids",
		"admin-token", "max-prompt-tokens", "max-body-bytes", "engine-metrics-interval", "health-interval", "log-level",
		"admin-host", "admin-port", "api-key", "api-key-file", "rate-limit", "rate-burst", "max-concurrent-per-key", "max-prompts",
		"chat-template", "chat-template-content-format", "default-chat-template-kwargs", "trust-request-chat-template", "reasoning-parser",
		"tool-call-parser", "reasoning-field", "prefill-policy", "decode-policy", "pd-transfer", "pd-min-uncached-tokens", "pd-timeout",
		"otlp-traces-endpoint", "otlp-traces-sample-ratio", "access-log", "forward-priority"} {
		if !strings.Contains(out.String(), "-"+f+" ") && !strings.Contains(out.String(), "-"+f+"\n") {
			t.Errorf("--help does not document --%s", f)
		}
	}
}

// testGW is a gateway served in-process by startGateway.
type testGW struct {
	api, admin, metrics string // base URLs
	stop                func() error
	reload              chan os.Signal
}

// startGateway runs serve in-process on free ports and returns its URLs and a func that stops
// it (as SIGTERM does) and returns serve's result.
func startGateway(t *testing.T, args ...string) *testGW {
	t.Helper()
	return startGatewayOptions(t, testOptions(t, args...))
}

// testOptions parses args as startGateway does, after its defaults (free ports, fast health
// checks).
func testOptions(t *testing.T, args ...string) options {
	t.Helper()
	o, err := parseOptions(append([]string{"--port", "0", "--prometheus-port", "0", "--admin-port", "0", "--health-interval", "50ms", "--drain-timeout", "5s"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// startGatewayOptions is startGateway with options already parsed.
func startGatewayOptions(t *testing.T, o options) *testGW {
	t.Helper()
	return startGatewayStderr(t, o, io.Discard)
}

// startGatewayStderr is startGatewayOptions logging to stderr.
func startGatewayStderr(t *testing.T, o options, stderr io.Writer) *testGW {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan boundAddrs, 1)
	done := make(chan error, 1)
	gw := &testGW{reload: make(chan os.Signal)} // unbuffered: a send returns once serve took it
	go func() {
		done <- serve(ctx, o, stderr, hooks{up: func(a boundAddrs) { addrs <- a }, reload: gw.reload})
	}()
	var a boundAddrs
	select {
	case a = <-addrs:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(gatewayStartTimeout):
		cancel()
		t.Fatal("gateway did not start")
	}
	gw.api, gw.admin, gw.metrics = "http://"+a.API.String(), "http://"+a.Admin.String(), "http://"+a.Metrics.String()
	stopped := false
	gw.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(defaultTestTimeout):
			return fmt.Errorf("serve did not return")
		}
	}
	t.Cleanup(func() { _ = gw.stop() })
	return gw
}

func waitReady(t *testing.T, api string) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		resp, err := http.Get(api + "/readiness")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway never became ready")
		}
	}
}

// slowSSEWorker streams chunks until release is closed.
func slowSSEWorker(t *testing.T, started chan<- struct{}, release <-chan struct{}) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":[{"id":"sim"}]}`)
	})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n")
		http.NewResponseController(w).Flush()
		started <- struct{}{}
		<-release
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"b\"}]}\n\ndata: [DONE]\n\n")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestServeDrainsStreamsOnShutdown(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	w := slowSSEWorker(t, started, release)
	gw := startGateway(t, "--worker", w.URL)
	api, stop := gw.api, gw.stop
	waitReady(t, api)

	resp, err := http.Post(api+"/v1/completions", "application/json", strings.NewReader(`{"model":"sim","prompt":"x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// New connections are refused while the stream drains...
	deadline := time.Now().Add(defaultTestTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		c, err := net.Dial("tcp", strings.TrimPrefix(api, "http://"))
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting after shutdown began")
		}
	}
	// ...and the in-flight stream completes.
	close(release)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading drained stream: %v", err)
	}
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("drained stream: got %q, want it complete", body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("serve: got %v, want nil", err)
	}
}

func TestServeMetricsAndModels(t *testing.T) {
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	close(release)
	w := slowSSEWorker(t, started, release)
	gw := startGateway(t, "--worker", w.URL, "--model", "public-name")
	api, metrics := gw.api, gw.metrics
	waitReady(t, api)
	resp, err := http.Get(api + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"public-name"`) {
		t.Errorf("/v1/models: got %s", b)
	}
	resp, err = http.Post(api+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	resp, err = http.Get(metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"kvgate_routing_decisions_total", "kvgate_requests_total", "kvgate_worker_healthy", "kvgate_time_to_first_token_seconds", "go_goroutines"} {
		if !strings.Contains(string(b), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestAccessLogFlag checks that --access-log on writes one "access" line per public API
// request on stderr, with --log-level warn hiding the other info lines.
func TestAccessLogFlag(t *testing.T) {
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	close(release)
	w := slowSSEWorker(t, started, release)
	var logs syncBuffer
	gw := startGatewayStderr(t, testOptions(t, "--worker", w.URL, "--access-log", "on", "--log-level", "warn"), &logs)
	waitReady(t, gw.api)
	resp, err := http.Post(gw.api+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := gw.stop(); err != nil {
		t.Fatal(err)
	}
	var found int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec["logger"] == "access" && rec["route"] == "/v1/completions" {
			found++
			if rec["status"] != float64(200) || rec["worker"] != w.URL || rec["request_id"] == "" {
				t.Errorf("access line %v: want status 200, the worker and a request id", rec)
			}
		}
		if rec["level"] == "info" && rec["logger"] != "access" {
			t.Errorf("info line %q under --log-level warn", line)
		}
	}
	if found != 1 {
		t.Errorf("%d access lines for the completion, want 1; log:\n%s", found, logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the gateway's loggers and the test at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
