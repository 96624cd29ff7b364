package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/metricnames"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// updateNginx rewrites deploy/nginx/kvgate.conf from the template.
var updateNginx = flag.Bool("update-nginx", false, "rewrite deploy/nginx/kvgate.conf from the template")

// deployFiles returns the files under deploy/ with one of the given extensions.
func deployFiles(t *testing.T, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && slices.Contains(exts, filepath.Ext(path)) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no %v files under deploy/", exts)
	}
	return out
}

func TestYAMLAndJSONParse(t *testing.T) {
	for _, path := range deployFiles(t, ".yml", ".yaml", ".json") {
		t.Run(path, func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Ext(path) == ".json" {
				var v any
				if err := json.Unmarshal(b, &v); err != nil {
					t.Fatalf("got %v, want valid JSON", err)
				}
				return
			}
			dec := yaml.NewDecoder(bytes.NewReader(b))
			docs := 0
			for {
				var v any
				err := dec.Decode(&v)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("document %d: got %v, want valid YAML", docs, err)
				}
				docs++
			}
			if docs == 0 {
				t.Fatal("no YAML document")
			}
		})
	}
}

func TestK8sManifests(t *testing.T) {
	kinds := map[string]map[string]any{}
	for _, path := range deployFiles(t, ".yaml") {
		if !strings.HasPrefix(path, "k8s/") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		kind, _ := m["kind"].(string)
		if kind == "" || m["apiVersion"] == nil {
			t.Fatalf("%s: got kind %q apiVersion %v, want both set", path, kind, m["apiVersion"])
		}
		kinds[kind] = m
	}
	for _, k := range []string{"Deployment", "Service", "ConfigMap", "Kustomization"} {
		if kinds[k] == nil {
			t.Errorf("no %s manifest in deploy/k8s", k)
		}
	}
	// The workers file in the ConfigMap must itself be YAML with a non-empty workers list.
	cm := kinds["ConfigMap"]
	data, _ := cm["data"].(map[string]any)
	workersYAML, _ := data["workers.yaml"].(string)
	var workers struct {
		Workers []map[string]string `yaml:"workers"`
	}
	if err := yaml.Unmarshal([]byte(workersYAML), &workers); err != nil || len(workers.Workers) == 0 {
		t.Fatalf("ConfigMap workers.yaml: got %d workers, err %v; want a parsed non-empty list", len(workers.Workers), err)
	}
	for _, w := range workers.Workers {
		if !strings.HasPrefix(w["url"], "http://") && !strings.HasPrefix(w["url"], "grpc://") {
			t.Errorf("worker %v: url must be http:// or grpc://", w)
		}
	}
	// Probes: readiness on /readiness, liveness on /health (DESIGN §7).
	dep, _ := yaml.Marshal(kinds["Deployment"])
	for _, want := range []string{"path: /readiness", "path: /health", "--prometheus-port=29000"} {
		if !bytes.Contains(dep, []byte(want)) {
			t.Errorf("Deployment lacks %q", want)
		}
	}
}

func TestNginxCommittedConfigIsTemplateRendering(t *testing.T) {
	want, err := NginxConfig(DefaultNginxParams)
	if err != nil {
		t.Fatal(err)
	}
	if *updateNginx {
		if err := os.WriteFile("nginx/kvgate.conf", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("nginx/kvgate.conf")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("deploy/nginx/kvgate.conf differs from the template rendering (-want +got); regenerate it with `go test ./deploy -run Nginx -update-nginx`:\n%s", diff)
	}
}

func TestNginxConfigSSESettings(t *testing.T) {
	conf, err := NginxConfig(NginxParams{Listen: "127.0.0.1:8080", Upstreams: []string{"127.0.0.1:1", "127.0.0.1:2"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"proxy_buffering off;", "proxy_http_version 1.1;", `proxy_set_header Connection "";`,
		"keepalive 64;", "proxy_read_timeout 3600s;", "server 127.0.0.1:1 ", "server 127.0.0.1:2 ",
		"listen 127.0.0.1:8080;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("rendered config lacks %q", want)
		}
	}
	for _, p := range []NginxParams{{Listen: "80"}, {Upstreams: []string{"a:1"}}, {Listen: "80", Upstreams: []string{"a:1"}, Standalone: true}} {
		if _, err := NginxConfig(p); err == nil {
			t.Errorf("NginxConfig(%+v): got nil error, want one", p)
		}
	}
}

// TestNginxAcceptsConfig runs `nginx -t` on the standalone rendering and on the shipped conf.d
// snippet wrapped in a minimal main configuration.
func TestNginxAcceptsConfig(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx not installed (tools/deps.sh test installs it)")
	}
	dir := t.TempDir()
	standalone, err := NginxConfig(NginxParams{Listen: "127.0.0.1:18080", Upstreams: []string{"127.0.0.1:30000", "127.0.0.1:30001"}, Standalone: true, Prefix: dir})
	if err != nil {
		t.Fatal(err)
	}
	snippet, err := filepath.Abs("nginx/kvgate.conf")
	if err != nil {
		t.Fatal(err)
	}
	wrapped := fmt.Sprintf("pid %[1]s/w.pid;\nerror_log %[1]s/w.log;\nevents {}\nhttp {\n access_log off;\n client_body_temp_path %[1]s/cb;\n proxy_temp_path %[1]s/px;\n fastcgi_temp_path %[1]s/fc;\n uwsgi_temp_path %[1]s/uw;\n scgi_temp_path %[1]s/sc;\n include %[2]s;\n}\n", dir, snippet)
	for name, conf := range map[string]string{"standalone": standalone, "snippet": wrapped} {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(dir, name+".conf")
			if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := harness.CombinedOutput(t.Context(), harness.Command{Path: nginx, Args: []string{"-t", "-q", "-p", dir, "-e", filepath.Join(dir, "t.log"), "-c", f}})
			if err != nil {
				t.Fatalf("nginx -t: %v\n%s\n%s", err, out, conf)
			}
		})
	}
}

func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus; tools/deps.sh test installs it)")
	}
	for _, args := range [][]string{
		{"check", "config", "prometheus/prometheus.yml"}, // also checks rules.yml via rule_files
		{"check", "rules", "prometheus/rules.yml"},
	} {
		out, err := harness.CombinedOutput(t.Context(), harness.Command{Path: promtool, Args: args})
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func TestPrometheusConfigRewritesTargets(t *testing.T) {
	b, err := PrometheusConfig(PrometheusParams{
		Gateways: []string{"127.0.0.1:1", "127.0.0.1:2"}, Engines: []string{"127.0.0.1:3"},
		RulesFile: "/tmp/rules.yml", ScrapeInterval: "1s",
	})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Global struct {
			ScrapeInterval string `yaml:"scrape_interval"`
		} `yaml:"global"`
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			got[sc.JobName] = append(got[sc.JobName], st.Targets...)
		}
	}
	want := map[string][]string{"kvgate": {"127.0.0.1:1", "127.0.0.1:2"}, "engines": {"127.0.0.1:3"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if cfg.Global.ScrapeInterval != "1s" || !slices.Equal(cfg.RuleFiles, []string{"/tmp/rules.yml"}) {
		t.Errorf("got interval %q rules %v, want 1s and [/tmp/rules.yml]", cfg.Global.ScrapeInterval, cfg.RuleFiles)
	}
}

func TestSystemdUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	b, err := os.ReadFile("systemd/kvgate.service")
	if err != nil {
		t.Fatal(err)
	}
	// The gateway binary is not installed here; point ExecStart at an executable that exists so
	// verify checks everything else.
	unit := strings.Replace(string(b), "ExecStart=/usr/local/bin/gateway", "ExecStart=/bin/true", 1)
	if unit == string(b) {
		t.Fatal("ExecStart=/usr/local/bin/gateway not found in the unit")
	}
	f := filepath.Join(t.TempDir(), "kvgate.service")
	if err := os.WriteFile(f, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := harness.CombinedOutput(t.Context(), harness.Command{Path: sa, Args: []string{"verify", f}})
	// Only complaints about this unit count: in containers verify may also warn about the
	// host's own units or a missing systemd instance.
	var complaints []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "kvgate.service") {
			complaints = append(complaints, line)
		}
	}
	if len(complaints) > 0 || (err != nil && len(bytes.TrimSpace(out)) == 0) {
		t.Errorf("systemd-analyze verify: err %v, output:\n%s", err, out)
	}
}

func TestDockerfileBuildsExistingCommands(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	cmds := regexp.MustCompile(`\./cmd/([a-z0-9_-]+)`).FindAllStringSubmatch(string(b), -1)
	if len(cmds) == 0 {
		t.Fatal("Dockerfile builds no ./cmd/ package")
	}
	for _, m := range cmds {
		if st, err := os.Stat(filepath.Join("..", "cmd", m[1])); err != nil || !st.IsDir() {
			t.Errorf("Dockerfile builds ./cmd/%s, which does not exist", m[1])
		}
	}
	for _, want := range []string{"libzmq3-dev", "libzmq5", "CGO_ENABLED=1", "AS build", "COPY --from=build"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// A module go.mod replaces by a directory must be in the image before go mod download.
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	download := bytes.Index(b, []byte("RUN go mod download"))
	for _, m := range regexp.MustCompile(`=> \./([^/\s]+)`).FindAllSubmatch(mod, -1) {
		at := bytes.Index(b, []byte("COPY "+string(m[1])+"/"))
		if at < 0 || download < 0 || at > download {
			t.Errorf("go.mod replaces a module by ./%s, which the Dockerfile does not copy before go mod download", m[1])
		}
	}
}

func TestMetricNamesInPromQL(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum(rate(vllm:prefix_cache_hits_total[5m])) / clamp_min(sum(rate(vllm:prefix_cache_queries_total[5m])), 1)`,
			[]string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"}},
		{`histogram_quantile(0.95, sum by (le) (rate(kvgate_ttft_seconds_bucket{job="kvgate"}[$__rate_interval])))`,
			[]string{"kvgate_ttft_seconds_bucket"}},
		{`sum(x{code=~"5.."}) / clamp_min(sum(y), 1e-9) > 0.05 and on (instance) up == 0`, []string{"x", "y", "up"}},
		{`sum(a offset 5m) by (reason, worker)`, []string{"a"}},
		{`fleet:prefix_cache_hit_rate:ratio_rate5m < .05`, []string{"fleet:prefix_cache_hit_rate:ratio_rate5m"}},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			names, err := metricNamesInPromQL(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// shippedExprs returns every PromQL expression in the rules and the dashboard, keyed by where
// it is, plus the names the rules record.
func shippedExprs(t *testing.T) (map[string]string, map[string]bool) {
	t.Helper()
	exprs := map[string]string{}
	recorded := map[string]bool{}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Record string `yaml:"record"`
				Alert  string `yaml:"alert"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rulesYAML, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["rules.yml "+r.Record+r.Alert] = r.Expr
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	b, err := os.ReadFile("grafana/kvgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs["kvgate.json "+p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("found only %d expressions in rules and dashboard", len(exprs))
	}
	return exprs, recorded
}

// TestShippedMetricNamesAreExported checks every metric name that the Prometheus rules and the
// Grafana dashboard query against the names the Go source of kvgate (pkg/, cmd/) registers:
// kvgate_* from the gateway and its libraries, vllm:* from the simulator (standing in for the
// engines, whose names it copies). Recording-rule outputs and Prometheus's own "up" are allowed.
func TestShippedMetricNamesAreExported(t *testing.T) {
	exported, unparsed, err := metricnames.Source("..", "pkg", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	if len(unparsed) > 0 {
		t.Logf("files that did not parse (skipped): %v", unparsed)
	}
	exprs, recorded := shippedExprs(t)
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	used := map[string]bool{}
	for _, k := range keys {
		names, err := metricNamesInPromQL(exprs[k])
		if err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric name in %q", k, exprs[k])
		}
		for _, n := range names {
			used[n] = true
			if !metricKnown(n, exported, recorded) {
				t.Errorf("%s: %q is neither exported by the source nor recorded by a rule", k, n)
			}
		}
	}
	// The check must cover both sides of the fleet.
	for _, prefix := range []string{"kvgate_", "vllm:"} {
		found := false
		for n := range used {
			found = found || strings.HasPrefix(n, prefix)
		}
		if !found {
			t.Errorf("no %s metric used by the rules or the dashboard", prefix)
		}
	}
}

// metricKnown reports whether name is exported (directly, or as a histogram/summary series),
// recorded by a rule, or Prometheus's synthetic "up".
func metricKnown(name string, exported, recorded map[string]bool) bool {
	if exported[name] || recorded[name] || name == "up" {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && exported[base] {
			return true
		}
	}
	return false
}

func TestRulesIntervalRewrite(t *testing.T) {
	b, err := Rules("1s")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name     string `yaml:"name"`
			Interval string `yaml:"interval"`
			Rules    []any  `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Groups) < 2 {
		t.Fatalf("got %d groups, want the shipped ones", len(doc.Groups))
	}
	for _, g := range doc.Groups {
		if g.Interval != "1s" || len(g.Rules) == 0 {
			t.Errorf("group %s: got interval %q and %d rules, want 1s and the shipped rules", g.Name, g.Interval, len(g.Rules))
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		f := filepath.Join(t.TempDir(), "rules.yml")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := harness.CombinedOutput(t.Context(), harness.Command{Path: promtool, Args: []string{"check", "rules", f}}); err != nil {
			t.Errorf("promtool check rules on the rewritten file: %v\n%s", err, out)
		}
	}
}

// TestOnlyPublicRoutesExposed: the shipped files expose the API (/v1/*, vLLM's endpoints outside
// /v1, /health, /readiness)
// and the metrics, never the admin API (DESIGN.md §11).
func TestOnlyPublicRoutesExposed(t *testing.T) {
	t.Run("nginx", func(t *testing.T) {
		for _, p := range []NginxParams{DefaultNginxParams, {Listen: "127.0.0.1:1", Upstreams: []string{"a:1"}, Standalone: true, Prefix: "/tmp"}} {
			conf, err := NginxConfig(p)
			if err != nil {
				t.Fatal(err)
			}
			var locs []string
			for _, m := range regexp.MustCompile(`(?m)^\s*location\s+([^{]+?)\s*\{`).FindAllStringSubmatch(conf, -1) {
				locs = append(locs, m[1])
			}
			if d := cmp.Diff([]string{"/v1/", "~ ^/(pooling|classify|score|rerank|v2/rerank|tokenize|detokenize|version|ping)$", "= /health", "= /readiness", "/"}, locs); d != "" {
				t.Errorf("locations (-want +got):\n%s", d)
			}
			catchAll := conf[strings.LastIndex(conf, "location / {"):]
			catchAll = catchAll[:strings.Index(catchAll, "}")]
			if !strings.Contains(catchAll, "return 404") || strings.Contains(catchAll, "proxy_pass") {
				t.Errorf("location / must answer 404 itself, got:\n%s", catchAll)
			}
		}
	})
	t.Run("kubernetes", func(t *testing.T) {
		var dep struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Args  []string `yaml:"args"`
							Ports []struct {
								ContainerPort int `yaml:"containerPort"`
							} `yaml:"ports"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		b, err := os.ReadFile("k8s/deployment.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &dep); err != nil {
			t.Fatal(err)
		}
		c := dep.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "--admin-host=127.0.0.1") || !slices.Contains(c.Args, "--admin-port=30900") {
			t.Errorf("args %v: want the admin listener pinned to 127.0.0.1:30900", c.Args)
		}
		var ports []int
		for _, p := range c.Ports {
			ports = append(ports, p.ContainerPort)
		}
		if d := cmp.Diff([]int{30000, 29000}, ports); d != "" {
			t.Errorf("container ports (-want +got):\n%s", d)
		}
	})
	t.Run("systemd", func(t *testing.T) {
		b, err := os.ReadFile("systemd/kvgate.service")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("--admin-host=127.0.0.1 ")) || !bytes.Contains(b, []byte("ExecReload=/bin/kill -HUP $MAINPID")) {
			t.Errorf("unit: want --admin-host=127.0.0.1 on ExecStart and ExecReload sending SIGHUP")
		}
	})
	t.Run("docker", func(t *testing.T) {
		b, err := os.ReadFile("Dockerfile")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^EXPOSE (.*)$`).FindSubmatch(b)
		if m == nil || string(m[1]) != "30000 29000" {
			t.Errorf("EXPOSE: got %q, want 30000 29000 (no admin port)", m)
		}
	})
}
