package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil/otlptest"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/tracing"
	"github.com/kvgate/kvgate/pkg/worker"
)

// trivialUpstream answers every completion at once with a small fixed JSON body.
func trivialUpstream(b *testing.B) *httptest.Server {
	return fixedUpstream(b, "/v1/completions", `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage":{"prompt_tokens":1000,"completion_tokens":1,"total_tokens":1001}}`)
}

// fixedUpstream is a worker answering path with body at once (health and models too).
func fixedUpstream(b *testing.B, path, body string) *httptest.Server {
	b.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"data":[{"id":"m"}]}`) })
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	})
	s := httptest.NewServer(mux)
	b.Cleanup(s.Close)
	return s
}

// benchGateway runs a router (cache_aware, index + tree + pending, as cmd/gateway builds it)
// over the given workers and serves it on loopback.
func benchGateway(b *testing.B, urls ...string) *httptest.Server {
	b.Helper()
	return benchGatewayTraced(b, nil, urls...)
}

// benchGatewayTraced is benchGateway with tracing tp (nil: off).
func benchGatewayTraced(b *testing.B, tp trace.TracerProvider, urls ...string) *httptest.Server {
	b.Helper()
	p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
	idx, _ := indexer.New(indexer.Config{})
	tree, _ := indexer.NewTree(indexer.TreeConfig{})
	pend, _ := indexer.NewPending(indexer.PendingConfig{})
	rt, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx, Tree: tree, Pending: pend, Tokenizer: byteTokenizer{vocab: 1 << 17}}},
		Logger: zap.NewNop(), Tracing: tp})
	if err != nil {
		b.Fatal(err)
	}
	for _, u := range urls {
		if _, err := rt.Fleet().AddWorker(worker.Spec{URL: u}); err != nil {
			b.Fatal(err)
		}
	}
	return runBenchRouter(b, rt)
}

// runBenchRouter runs rt until the benchmark ends, serves it on loopback and waits until it is
// ready.
func runBenchRouter(b *testing.B, rt *Router) *httptest.Server {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rt.Run(ctx) }()
	srv := httptest.NewServer(rt.Handler())
	b.Cleanup(func() { srv.Close(); cancel(); <-done })
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(defaultTestTimeout)
	for ok, _ := rt.Fleet().Ready(); !ok; ok, _ = rt.Fleet().Ready() {
		if time.Now().After(deadline) {
			b.Fatal("gateway not ready")
		}
		<-tick.C
	}
	return srv
}

// tokenPrompts returns n request bodies with 1000-token token-id prompts: a shared 800-token
// prefix and a 200-token unique suffix, the shape of the reference workload.
func tokenPrompts(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		ids := make([]uint32, 1000)
		for j := range ids {
			if j < 800 {
				ids[j] = uint32(1000 + j)
			} else {
				ids[j] = uint32(5000 + i*1000 + j)
			}
		}
		var buf bytes.Buffer
		buf.WriteString(`{"model":"m","max_tokens":1,"prompt":`)
		buf.Write(openai.AppendTokenArray(nil, ids))
		buf.WriteString("}")
		out[i] = buf.Bytes()
	}
	return out
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
}

func postOnce(c *http.Client, url string, body []byte) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(t0), err
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// startNginx proxies to upstream with keep-alive, as the deployment's nginx does, and returns its
// URL; "" when nginx cannot be started here. It runs under the harness, which stops the master
// and its worker at cleanup (issue 17: killing only the master left the worker running).
func startNginx(b *testing.B, upstream string) string {
	b.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return ""
	}
	port, err := harness.FreeTCPPort()
	if err != nil {
		return ""
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dir := b.TempDir()
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fcgi;
  uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  upstream up { server %[2]s; keepalive 64; }
  server {
    listen %[3]s;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
`, dir, strings.TrimPrefix(upstream, "http://"), addr)
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return ""
	}
	p, err := harness.Start(harness.Command{Name: "nginx", Path: bin, Args: []string{"-p", dir, "-c", cf, "-e", filepath.Join(dir, "error.log")}}, dir)
	if err != nil {
		return ""
	}
	b.Cleanup(func() {
		if err := p.Stop(harness.DefaultStopTimeout); err != nil {
			b.Error(err)
		}
	})
	listening := func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	if !harness.Eventually(5*time.Second, func() bool { exited, _ := p.Exited(); return exited || listening() }) || !listening() {
		return ""
	}
	return "http://" + addr
}

// BenchmarkGatewayOverhead measures the latency the gateway adds to a request with a
// 1000-token token-id prompt (parse, hash 62 blocks, index + tree + pending lookup, cache_aware
// pick, tree insert, proxy) against a trivial upstream. Each iteration sends one request
// directly, one through the gateway and one through nginx (when available), interleaved, from
// `conc` concurrent clients (moderate load); the added p50/p99 are the differences of the
// percentiles to the direct path.
func BenchmarkGatewayOverhead(b *testing.B) { gatewayOverhead(b, false) }

// BenchmarkGatewayOverheadTraced is BenchmarkGatewayOverhead with tracing on at 100% sampling,
// the provider built as cmd/gateway builds it (pkg/tracing: its span processor and the OTLP/gRPC
// exporter) exporting to an OTLP receiver on loopback in this process. It also reports the
// spans the receiver got per request the gateway served, so a run that exported nothing shows.
func BenchmarkGatewayOverheadTraced(b *testing.B) { gatewayOverhead(b, true) }

// tracedProvider returns a tracer provider exporting over OTLP/gRPC to a loopback receiver,
// with the receiver; stop flushes and shuts the provider down.
func tracedProvider(b *testing.B) (tp trace.TracerProvider, sink *otlptest.Sink, stop func()) {
	b.Helper()
	b.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	sink, endpoint := otlptest.Start(b, "grpc", false)
	p, _, err := tracing.NewProvider(endpoint, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := p.Shutdown(context.Background()); err != nil {
				b.Error(err)
			}
		})
	}
	b.Cleanup(stop)
	return p, sink, stop
}

// gatewayOverhead runs BenchmarkGatewayOverhead on a gateway with tracing on or off.
func gatewayOverhead(b *testing.B, traced bool) {
	for _, conc := range []int{1, 4} {
		b.Run("clients="+strconv.Itoa(conc), func(b *testing.B) {
			var tp trace.TracerProvider
			var sink *otlptest.Sink
			stopTracing := func() {}
			if traced {
				tp, sink, stopTracing = tracedProvider(b)
			}
			ups := []*httptest.Server{trivialUpstream(b), trivialUpstream(b), trivialUpstream(b)}
			gw := benchGatewayTraced(b, tp, ups[0].URL, ups[1].URL, ups[2].URL)
			ngx := startNginx(b, ups[0].URL)
			prompts := tokenPrompts(64)
			c := benchClient()
			defer c.CloseIdleConnections()
			// Warm connections, the tree and the pending overlay.
			for i := 0; i < 64; i++ {
				postOnce(c, gw.URL+"/v1/completions", prompts[i])
				postOnce(c, ups[0].URL+"/v1/completions", prompts[i])
				if ngx != "" {
					postOnce(c, ngx+"/v1/completions", prompts[i])
				}
			}
			var mu sync.Mutex
			var direct, viaGW, viaNginx []time.Duration
			var next int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := 0; w < conc; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var d, g, n []time.Duration
					for {
						mu.Lock()
						i := next
						next++
						mu.Unlock()
						if i >= int64(b.N) {
							break
						}
						body := prompts[i%int64(len(prompts))]
						if t, err := postOnce(c, ups[i%3].URL+"/v1/completions", body); err == nil {
							d = append(d, t)
						}
						if t, err := postOnce(c, gw.URL+"/v1/completions", body); err == nil {
							g = append(g, t)
						} else {
							b.Error(err)
							return
						}
						if ngx != "" {
							if t, err := postOnce(c, ngx+"/v1/completions", body); err == nil {
								n = append(n, t)
							}
						}
					}
					mu.Lock()
					direct, viaGW, viaNginx = append(direct, d...), append(viaGW, g...), append(viaNginx, n...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			if len(direct) == 0 || len(viaGW) == 0 {
				b.Fatal("no samples")
			}
			us := func(d time.Duration) float64 { return float64(d) / 1e3 }
			b.ReportMetric(us(pct(direct, 0.5)), "direct-p50-µs")
			b.ReportMetric(us(pct(viaGW, 0.5)), "gw-p50-µs")
			b.ReportMetric(us(pct(viaGW, 0.99)), "gw-p99-µs")
			b.ReportMetric(us(pct(viaGW, 0.5)-pct(direct, 0.5)), "gw-added-p50-µs")
			b.ReportMetric(us(pct(viaGW, 0.99)-pct(direct, 0.99)), "gw-added-p99-µs")
			if len(viaNginx) > 0 {
				b.ReportMetric(us(pct(viaNginx, 0.5)-pct(direct, 0.5)), "nginx-added-p50-µs")
				b.ReportMetric(us(pct(viaNginx, 0.99)-pct(direct, 0.99)), "nginx-added-p99-µs")
			}
			if sink != nil {
				stopTracing()
				spans, _ := sink.Count()
				b.ReportMetric(float64(spans)/float64(len(viaGW)+64), "spans/req")
			}
		})
	}
}

// BenchmarkGatewayThroughput is requests/s through the gateway with parallel clients (1000-token
// token-id prompts, trivial upstream): the whole machine, client included.
func BenchmarkGatewayThroughput(b *testing.B) {
	ups := []*httptest.Server{trivialUpstream(b), trivialUpstream(b), trivialUpstream(b)}
	gw := benchGateway(b, ups[0].URL, ups[1].URL, ups[2].URL)
	prompts := tokenPrompts(64)
	c := benchClient()
	defer c.CloseIdleConnections()
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	var mu sync.Mutex
	var n int
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := postOnce(c, gw.URL+"/v1/completions", prompts[i%len(prompts)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
		mu.Lock()
		n += i
		mu.Unlock()
	})
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkTokenize1000 is the cost of tokenizing 1000 tokens of English prose with the Qwen3
// tokenizer (from `make testdata`), the text-prompt path's extra work.
func BenchmarkTokenize1000(b *testing.B) {
	path := filepath.Join("..", "..", ".cache", "tokenizers", "qwen3", "tokenizer.json")
	tk, err := tokenizer.LoadFile(path)
	if err != nil {
		b.Skipf("no tokenizer test data (%v): run make testdata", err)
	}
	words := strings.Fields(`The gateway sends each request to the worker whose cache already holds the longest
prefix of the request's tokens, balanced against load, learning every worker's cache from the engine's own
event stream and falling back to an approximate tree when a worker has none. Operators deploy several
replicas behind a load balancer and scrape their metrics with Prometheus; each replica reads the same event
streams, so the index does not degrade as replicas are added.`)
	var sb strings.Builder
	for i := 0; ; i++ {
		sb.WriteString(words[i%len(words)])
		sb.WriteByte(' ')
		if i%len(words) == 0 && i > 0 {
			ids, _ := tk.Encode(nil, sb.String(), false)
			if len(ids) >= 1000 {
				break
			}
		}
	}
	text := sb.String()
	ids, _ := tk.Encode(nil, text, false)
	rtk := pipeline.FromTokenizer(tk)
	buf := make([]uint32, 0, len(ids)+16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf, _ = rtk.Encode(buf[:0], text, true)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ids))*1000/1e3, "µs/1000tok")
}
