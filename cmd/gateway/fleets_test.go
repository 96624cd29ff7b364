package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseOptionsModelsAndDiscover(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	os.WriteFile(cfg, []byte(`
workers: [http://a:1]
discover: ["dns=top.test.,url=http://{host}:8000"]
models:
  - name: qwen
    tokenizer: /models/qwen/tokenizer.json
    policy: round_robin
    cache_threshold: 0.7
    workers: ["url=http://q:1", {url: "http://q:2", model: qwen}]
    discover: ["dns=qwen.test.,url=http://{host}:8000,kv_events=tcp://{host}:5557"]
  - name: llama
    model_path: /models/llama
    reasoning_parser: none
`), 0o600)
	o, err := parseOptions([]string{"--config", cfg, "--worker", "http://f:1", "--discover", "dns=flag.test.,url=http://{host}:1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var file, flags, disc []string
	for _, s := range o.workerSpecs(false) {
		file = append(file, s.String())
	}
	for _, s := range o.workerSpecs(true) {
		flags = append(flags, s.String())
	}
	for _, d := range o.discoverSpecs() {
		disc = append(disc, d.String())
	}
	if d := cmp.Diff([]string{"url=http://a:1", "url=http://q:1,model=qwen", "url=http://q:2,model=qwen"}, file); d != "" {
		t.Errorf("file workers (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"url=http://f:1"}, flags); d != "" {
		t.Errorf("flag workers (-want +got):\n%s", d)
	}
	want := []string{"dns=top.test.,url=http://{host}:8000", "dns=flag.test.,url=http://{host}:1",
		"dns=qwen.test.,url=http://{host}:8000,kv_events=tcp://{host}:5557,model=qwen"}
	if d := cmp.Diff(want, disc); d != "" {
		t.Errorf("discover (-want +got):\n%s", d)
	}
	q, l := o.Models[0], o.Models[1]
	name, pc := o.policyConfig(&q)
	if name != "round_robin" || pc.CacheThreshold != 0.7 || pc.BalanceAbsThreshold != o.BalanceAbsThreshold {
		t.Errorf("qwen policy: got %s %+v", name, pc)
	}
	if l.ReasoningParser != parserNone || l.ToolCallParser != parserAuto || l.ChatTemplateContentFormat != "auto" {
		t.Errorf("llama chat options: got %+v, want the flags' defaults but reasoning_parser none", l.chatOptions)
	}
	if name, _ := o.policyConfig(&l); name != o.Policy {
		t.Errorf("llama policy: got %s, want the top level's %s", name, o.Policy)
	}
}

func TestParseOptionsFleetErrors(t *testing.T) {
	for _, tt := range []struct{ name, yaml string }{
		{"model without name", "models: [{tokenizer: t.json}]"},
		{"model twice", "models: [{name: a}, {name: a}]"},
		{"unknown model key", "models: [{name: a, colour: red}]"},
		{"worker of another model", `models: [{name: a, workers: ["url=http://x:1,model=b"]}]`},
		{"discover of another model", `models: [{name: a, discover: ["dns=x.test,url=http://{host}:1,model=b"]}]`},
		{"worker twice", `workers: [http://x:1]` + "\n" + `models: [{name: a, workers: [http://x:1]}]`},
		{"dns twice", `discover: ["dns=x.test,url=http://{host}:1", "dns=x.test,url=http://{host}:2"]`},
		{"bad discover", `discover: ["url=http://{host}:1"]`},
		{"both tokenizers", "models: [{name: a, tokenizer: t.json, model_path: d}]"},
		{"template without model path", "models: [{name: a, chat_template: x}]"},
		{"the top-level model", "model: a\nmodels: [{name: a}]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "gw.yaml")
			os.WriteFile(cfg, []byte(tt.yaml), 0o600)
			if _, err := parseOptions([]string{"--config", cfg}, io.Discard); err == nil {
				t.Error("parseOptions succeeded")
			}
		})
	}
	for _, args := range [][]string{{"--discover", "dns=x.test"}, {"--dns-server", "nohost"}, {"--discover-interval", "0s"}} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("parseOptions(%q) succeeded", args)
		}
	}
}

// countingWorker is an OpenAI worker that counts the completions it serves.
type countingWorker struct {
	*httptest.Server
	served atomic.Int64
}

func newCountingWorker(t *testing.T, model string) *countingWorker {
	t.Helper()
	w := &countingWorker{}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/models", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(rw, `{"data":[{"id":%q}]}`, model)
	})
	complete := func(rw http.ResponseWriter, _ *http.Request) {
		w.served.Add(1)
		rw.Header().Set("Content-Type", "application/json")
		io.WriteString(rw, `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`)
	}
	mux.HandleFunc("/v1/completions", complete)
	mux.HandleFunc("/v1/chat/completions", complete)
	w.Server = httptest.NewServer(mux)
	t.Cleanup(w.Close)
	return w
}

// adminWorkers returns the URLs of GET /workers, serving and draining.
func adminWorkers(t *testing.T, admin string) []string {
	t.Helper()
	resp, err := http.Get(admin + "/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var wl struct {
		Workers []struct {
			URL      string `json:"url"`
			Origin   string `json:"origin"`
			Draining bool   `json:"draining"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&wl); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range wl.Workers {
		s := w.URL + " " + w.Origin
		if w.Draining {
			s += " draining"
		}
		out = append(out, s)
	}
	return out
}

// metricValue returns the value of one sample line of the gateway's /metrics ("" when absent).
func metricValue(t *testing.T, metrics, series string) string {
	t.Helper()
	resp, err := http.Get(metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
	return time.Since(start)
}

// TestConfigChangedAtStart: an edit between the read the configuration in force came from and
// the start of the file watch is applied, not lost (the watch starts with a comparison against
// the content in force).
func TestConfigChangedAtStart(t *testing.T) {
	a, b := newCountingWorker(t, "m"), newCountingWorker(t, "m")
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte("workers: ["+a.URL+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, "--config", cfg, "--model", "m")
	if err := os.WriteFile(cfg, []byte("workers: ["+a.URL+", "+b.URL+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGatewayOptions(t, o)
	pollUntil(t, 5*time.Second, "the edit applied", func() bool {
		return cmp.Equal([]string{a.URL + " file", b.URL + " file"}, adminWorkers(t, gw.admin))
	})
}

// TestConfigReload: a worker added to the watched file takes traffic within 2 s; a file that
// does not parse, or whose model does not build, changes nothing; a worker dropped from the file
// drains away; SIGHUP reloads too.
func TestConfigReload(t *testing.T) {
	a, b := newCountingWorker(t, "m"), newCountingWorker(t, "m")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	write := func(s string) {
		t.Helper()
		// As editors and ConfigMaps do: write another file, rename it over the config.
		tmp := filepath.Join(dir, ".gw.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	write("policy: round_robin\nworkers: [" + a.URL + "]\n")
	gw := startGateway(t, "--config", cfg, "--model", "m")
	waitReady(t, gw.api)
	want := func(ws ...string) func() bool {
		return func() bool { return cmp.Equal(ws, adminWorkers(t, gw.admin)) }
	}
	pollUntil(t, time.Second, "a listed", want(a.URL+" file"))

	write("policy: round_robin\nworkers: [" + a.URL + ", " + b.URL + "]\n")
	took := pollUntil(t, 2*time.Second, "b takes traffic", func() bool {
		resp, err := http.Post(gw.api+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return b.served.Load() > 0
	})
	t.Logf("a worker added to the file took its first request %v after the write", took.Round(time.Millisecond))

	rejected := `kvgate_config_reloads_total{outcome="rejected"}`
	for i, broken := range []string{
		"policy: round_robin\nworkers: [" + a.URL + ",\n",                                                    // not YAML
		"workers: [" + a.URL + "]\nmodels: [{name: x, model_path: " + filepath.Join(dir, "missing") + "}]\n", // a model that does not build
	} {
		write(broken)
		pollUntil(t, 5*time.Second, "the broken file rejected", func() bool { return metricValue(t, gw.metrics, rejected) == fmt.Sprint(i+1) })
		if got := adminWorkers(t, gw.admin); !cmp.Equal([]string{a.URL + " file", b.URL + " file"}, got) {
			t.Errorf("workers after broken file %d: got %v, want both unchanged", i+1, got)
		}
	}

	write("policy: round_robin\nworkers: [" + b.URL + "]\n")
	pollUntil(t, 5*time.Second, "a drained", want(b.URL+" file"))

	// SIGHUP reloads the file even when it did not change (and so without a watch event).
	applied := `kvgate_config_reloads_total{outcome="applied"}`
	before := metricValue(t, gw.metrics, applied)
	var n int
	fmt.Sscan(before, &n)
	gw.reload <- syscall.SIGHUP
	pollUntil(t, 5*time.Second, "SIGHUP applied the file", func() bool { return metricValue(t, gw.metrics, applied) == fmt.Sprint(n+1) })
}

// TestServeTwoModels: two models with real tokenizers and chat templates behind one gateway:
// each request reaches its model's worker, chat is rendered with that model's template, and
// /v1/models lists both.
func TestServeTwoModels(t *testing.T) {
	root := filepath.Join("..", "..", ".cache", "tokenizers")
	for _, m := range []string{"qwen3", "llama3_1"} {
		if _, err := os.Stat(filepath.Join(root, m, "tokenizer_config.json")); err != nil {
			t.Skipf("no tokenizer test data (%v): run make testdata", err)
		}
	}
	q, l := newCountingWorker(t, "Qwen/Qwen3-0.6B"), newCountingWorker(t, "meta-llama/Llama-3.1-8B-Instruct")
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
models:
  - name: qwen3
    model_path: %s
    workers: [%s]
  - name: llama
    model_path: %s
    workers: [%s]
`, filepath.Join(root, "qwen3"), q.URL, filepath.Join(root, "llama3_1"), l.URL)), 0o600)
	gw := startGateway(t, "--config", cfg)
	waitReady(t, gw.api)

	resp, err := http.Get(gw.api + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	var ids []string
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	if d := cmp.Diff([]string{"llama", "qwen3"}, ids); d != "" {
		t.Errorf("/v1/models (-want +got):\n%s", d)
	}
	for _, tt := range []struct {
		model, worker, marker string
	}{{"qwen3", q.URL, "<|im_start|>user\nhello<|im_end|>"}, {"llama", l.URL, "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"}} {
		body := `{"model":"` + tt.model + `","messages":[{"role":"user","content":"hello"}]}`
		resp, err := http.Post(gw.api+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("X-Kvgate-Worker"); resp.StatusCode != http.StatusOK || got != tt.worker {
			t.Errorf("%s: got %d from %q, want 200 from %s", tt.model, resp.StatusCode, got, tt.worker)
		}
		resp, err = http.Post(gw.admin+"/debug/route", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var ex struct {
			Pool   string `json:"pool"`
			Prompt string `json:"prompt"`
		}
		json.NewDecoder(resp.Body).Decode(&ex)
		resp.Body.Close()
		if ex.Pool != tt.model || !strings.Contains(ex.Prompt, tt.marker) {
			t.Errorf("%s: /debug/route rendered %q in pool %q, want %q in it", tt.model, ex.Prompt, ex.Pool, tt.marker)
		}
	}
}

func TestHelpDocumentsFleetFlags(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"--help"}, nil, io.Discard, &out); code != 0 {
		t.Fatalf("exit: got %d, want 0", code)
	}
	for _, f := range []string{"discover", "discover-interval", "dns-server", "drain-timeout"} {
		if !strings.Contains(out.String(), "-"+f+" ") {
			t.Errorf("--help does not document --%s", f)
		}
	}
	if !strings.Contains(out.String(), "{host}") {
		t.Error("--help does not explain the --discover template")
	}
}
