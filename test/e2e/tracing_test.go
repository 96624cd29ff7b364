//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// otlpFileSpan is a span as the collector's file exporter writes it (OTLP JSON: ids in hex).
type otlpFileSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
	Attributes   []struct {
		Key   string `json:"key"`
		Value struct {
			String string `json:"stringValue"`
			Int    string `json:"intValue"`
		} `json:"value"`
	} `json:"attributes"`
	Events []struct {
		Name string `json:"name"`
	} `json:"events"`
}

func (s otlpFileSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.String + a.Value.Int
		}
	}
	return ""
}

// readOTLPFile returns the spans of trace in the file exporter's output (one JSON export
// request per line).
func readOTLPFile(path, trace string) map[string]otlpFileSpan {
	out := map[string]otlpFileSpan{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var req struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []otlpFileSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if json.Unmarshal(sc.Bytes(), &req) != nil {
			continue // a line being written
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if s.TraceID == trace {
						out[s.Name] = s
					}
				}
			}
		}
	}
	return out
}

// startCollector builds tools/otelcol (a collector from the official modules, in its own
// module) and runs it with an OTLP gRPC receiver on a free loopback port and a file exporter;
// it returns the receiver's address and the file.
func startCollector(t *testing.T, l *harness.Launcher) (string, string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "otelcol")
	if out, err := harness.CombinedOutput(ctx, harness.Command{Name: "go", Path: "go", Args: []string{"build", "-o", bin, "."},
		Dir: filepath.Join(repoRoot, "tools", "otelcol")}); err != nil {
		t.Fatalf("building tools/otelcol: %v\n%s", err, out)
	}
	port, err := harness.FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	spans := filepath.Join(dir, "spans.jsonl")
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, addr, spans)
	cfgPath := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := harness.Start(harness.Command{Name: "otelcol", Path: bin, Args: []string{"--config", cfgPath}}, l.LogDir)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, p)
	if !harness.Eventually(startTimeout, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the collector did not listen on %s:\n%s", addr, p.LogTail(2000))
	}
	return addr, spans
}

// A streamed chat request through the built gateway, exporting to a real OpenTelemetry
// Collector: its spans arrive in the client's trace with the right parent/child links and
// routing attributes, and the simulated engine received the upstream span as its parent.
func TestTracingToCollector(t *testing.T) {
	l := newLauncher(t)
	addr, spansPath := startCollector(t, l)
	sim := startSim(t, l, harness.SimOptions{})
	gw := startGateway(t, l, harness.GatewayOptions{Workers: []string{sim.URL},
		Args: []string{"--otlp-traces-endpoint", "grpc://" + addr}, Env: []string{"OTEL_BSP_SCHEDULE_DELAY=50"}})
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":4,"messages":[{"role":"user","content":"trace me"}]}`, testModel)
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
		t.Fatalf("chat stream: %d %s", resp.StatusCode, b)
	}
	want := []string{"POST /v1/chat/completions", "kvgate.parse", "kvgate.prompt", "kvgate.route", "kvgate.upstream"}
	var spans map[string]otlpFileSpan
	harness.Eventually(15*time.Second, func() bool {
		spans = readOTLPFile(spansPath, traceID)
		return len(spans) >= len(want)
	})
	for _, name := range want {
		if _, ok := spans[name]; !ok {
			t.Fatalf("span %s missing from the collector's output; have %v", name, keys(spans))
		}
	}
	server := spans["POST /v1/chat/completions"]
	if server.ParentSpanID != clientSpan || server.Kind != 2 {
		t.Errorf("server span parent %q kind %d, want the client's span and SERVER", server.ParentSpanID, server.Kind)
	}
	for _, name := range want[1:] {
		if spans[name].ParentSpanID != server.SpanID {
			t.Errorf("%s's parent %q, want the server span %q", name, spans[name].ParentSpanID, server.SpanID)
		}
	}
	route, up := spans["kvgate.route"], spans["kvgate.upstream"]
	if route.attr("kvgate.worker") != sim.URL || route.attr("kvgate.route.reason") == "" || route.attr("kvgate.matched_blocks") == "" {
		t.Errorf("route span attributes %+v", route.Attributes)
	}
	var events []string
	for _, e := range up.Events {
		events = append(events, e.Name)
	}
	if up.Kind != 3 || up.attr("http.response.status_code") != "200" || !strings.Contains(strings.Join(events, ","), "first_token") {
		t.Errorf("upstream span kind %d attributes %+v events %v", up.Kind, up.Attributes, events)
	}
	// The engine received the client's trace id, with the gateway's upstream span as parent.
	r, err := httpClient.Get(sim.URL + "/debug/traceparents")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	json.NewDecoder(r.Body).Decode(&seen)
	r.Body.Close()
	if wantTP := "00-" + traceID + "-" + up.SpanID + "-01"; len(seen) != 1 || seen[0] != wantTP {
		t.Errorf("the engine received traceparents %v, want [%s]", seen, wantTP)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
