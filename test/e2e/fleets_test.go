//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// fleetWorker is one worker of GET /workers as the fleet tests read it.
type fleetWorker struct {
	URL         string `json:"url"`
	Model       string `json:"model"`
	Origin      string `json:"origin"`
	Pool        string `json:"pool"`
	Draining    bool   `json:"draining"`
	Healthy     bool   `json:"healthy"`
	EventStream string `json:"event_stream"`
	IndexBlocks int    `json:"index_blocks"`
}

// fleetView is the part of GET /workers the fleet tests read.
type fleetView struct {
	Workers []fleetWorker `json:"workers"`
	Pools   []struct {
		Model       string `json:"model"`
		Workers     int    `json:"workers"`
		Draining    int    `json:"draining"`
		IndexBlocks int    `json:"index_blocks"`
	} `json:"pools"`
}

func fleetOf(t *testing.T, admin string) fleetView {
	t.Helper()
	var v fleetView
	getJSON(t, admin+"/workers", &v)
	return v
}

// find returns the worker with url in v, or nil.
func (v fleetView) find(url string) *fleetWorker {
	for i := range v.Workers {
		if v.Workers[i].URL == url {
			return &v.Workers[i]
		}
	}
	return nil
}

// serving returns the URLs of the serving (not draining) workers, sorted.
func (v fleetView) serving() []string {
	var out []string
	for _, w := range v.Workers {
		if !w.Draining {
			out = append(out, w.URL)
		}
	}
	slices.Sort(out)
	return out
}

// poll calls cond every 20 ms until it holds, failing the test after timeout; it returns how
// long that took.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
	return time.Since(start)
}

// outcome is one streamed request of a load run.
type outcome struct {
	start, end time.Time
	worker     string
	err        string // "" when the stream completed with [DONE] and no error event
}

// streamLoad streams completions from conc goroutines until stop is closed, each prompt one of
// prefixes plus a unique suffix; it records every request's outcome. It never calls t (its
// goroutines would outlive a failed test): the caller reads outcomes after wait.
type streamLoad struct {
	mu       sync.Mutex
	outcomes []outcome
	stop     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

func startStreamLoad(base, model string, prefixes []string, conc, maxTokens int) *streamLoad {
	l := &streamLoad{stop: make(chan struct{})}
	client := &http.Client{Timeout: defaultTestTimeout}
	for g := range conc {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				prompt := prefixes[(g+i*conc)%len(prefixes)] + fmt.Sprintf(" request %d of client %d.", i, g)
				o := streamOnce(client, base, model, prompt, maxTokens)
				o.end = time.Now()
				l.record(o)
			}
		}()
	}
	return l
}

func (l *streamLoad) record(o outcome) {
	l.mu.Lock()
	l.outcomes = append(l.outcomes, o)
	l.mu.Unlock()
}

// wait stops the load and returns every outcome; it may be called again.
func (l *streamLoad) wait() []outcome {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.outcomes)
}

func (l *streamLoad) snapshot() []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.outcomes)
}

// streamOnce sends one streaming completion and classifies it.
func streamOnce(client *http.Client, base, model, prompt string, maxTokens int) outcome {
	o := outcome{start: time.Now()}
	b, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "stream": true})
	resp, err := client.Post(base+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		o.err = err.Error()
		return o
	}
	defer resp.Body.Close()
	o.worker = resp.Header.Get("X-Kvgate-Worker")
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		o.err = fmt.Sprintf("status %d: %s", resp.StatusCode, body)
		return o
	}
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
		case data == "[DONE]":
			done = true
		case strings.HasPrefix(data, `{"error"`):
			o.err = "error event: " + data
		}
	}
	if err := sc.Err(); err != nil && o.err == "" {
		o.err = "reading stream: " + err.Error()
	}
	if !done && o.err == "" {
		o.err = "stream ended without [DONE]"
	}
	return o
}

func failures(os []outcome) []string {
	var out []string
	for _, o := range os {
		if o.err != "" {
			out = append(out, o.worker+": "+o.err)
		}
	}
	return out
}

// TestDNSDiscovery (issue 16): a real DNS server (dnsmasq) on loopback names the fleet; the
// gateway discovers three simulators on 127.0.0.2-4 through it, drains the one removed from
// DNS while streams run (no request fails, its blocks leave the index), takes in one added,
// and keeps its workers while the DNS server is down.
func TestDNSDiscovery(t *testing.T) {
	l := newLauncher(t)
	const domain = "kvgate.test"
	const name = "pool." + domain + "."
	ports, err := harness.FreeTCPPorts(3) // HTTP, KV events, replay: the same on every address
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	sims := map[string]*harness.Sim{}
	for _, h := range hosts {
		sims[h] = startSim(t, l, harness.SimOptions{Name: "sim-" + h, Host: h, Events: true, Port: ports[0], EventsPort: ports[1], ReplayPort: ports[2],
			TimeScale: 0.1})
	}
	urlOf := func(h string) string { return fmt.Sprintf("http://%s:%d", h, ports[0]) }
	hostsFile := func(hs ...string) string {
		var b strings.Builder
		for _, h := range hs {
			fmt.Fprintf(&b, "%s pool.%s\n", h, domain)
		}
		return b.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	dns, err := l.StartDNS(ctx, domain, hostsFile(hosts[:3]...))
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, dns.Process)

	spec := fmt.Sprintf("dns=%s,url=http://{host}:%d,kv_events=tcp://{host}:%d,replay=tcp://{host}:%d", name, ports[0], ports[1], ports[2])
	started := time.Now()
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-dns",
		Args: []string{"--discover", spec, "--dns-server", dns.Addr, "--discover-interval", "200ms", "--drain-timeout", "20s", "--health-interval", "200ms"}})
	origin := "dns " + name
	want3 := []string{urlOf(hosts[0]), urlOf(hosts[1]), urlOf(hosts[2])}
	took := poll(t, 10*time.Second, "three discovered workers, healthy, events up", func() bool {
		v := fleetOf(t, gw.AdminURL)
		if !slices.Equal(v.serving(), want3) {
			return false
		}
		for _, w := range v.Workers {
			if w.Origin != origin || !w.Healthy || w.EventStream != "up" {
				return false
			}
		}
		return true
	})
	t.Logf("MEASURE dns: 3 workers discovered, healthy and event-fed %v after the gateway started (%v after it was ready)",
		time.Since(started).Round(time.Millisecond), took.Round(time.Millisecond))

	// Streams from 6 clients over 12 shared prefixes spread over the three workers.
	prefixes := make([]string, 12)
	for i := range prefixes {
		prefixes[i] = text(fmt.Sprintf("dns-%d", i), 120)
	}
	load := startStreamLoad(gw.URL, testModel, prefixes, 6, 128)
	defer load.wait()
	victim := urlOf(hosts[2])
	poll(t, 30*time.Second, "the victim holds blocks", func() bool {
		w := fleetOf(t, gw.AdminURL).find(victim)
		return w != nil && w.IndexBlocks > 0
	})

	// 127.0.0.4 leaves DNS while streams run.
	if err := dns.SetHosts(hostsFile(hosts[:2]...)); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	poll(t, 5*time.Second, "the victim draining or gone", func() bool {
		w := fleetOf(t, gw.AdminURL).find(victim)
		return w == nil || w.Draining
	})
	noNewAfter := time.Now() // no request that starts from now on may go to the victim
	poll(t, 30*time.Second, "the victim drained", func() bool { return fleetOf(t, gw.AdminURL).find(victim) == nil })
	goneAt := time.Now()
	t.Logf("MEASURE dns: the removed worker was draining %v after the DNS change and left /workers %v after it",
		noNewAfter.Sub(removed).Round(time.Millisecond), time.Since(removed).Round(time.Millisecond))

	// 127.0.0.5 joins and takes traffic.
	added := urlOf(hosts[3])
	if err := dns.SetHosts(hostsFile(hosts[0], hosts[1], hosts[3])); err != nil {
		t.Fatal(err)
	}
	joined := time.Now()
	// The streams' prefixes are cached on the other workers, and cache-aware routing keeps them
	// there while their loads stay within bounds; new work (a prompt nobody has cached) is what an
	// added worker takes, so each poll also sends one.
	fresh := 0
	poll(t, 30*time.Second, "the added worker takes a request", func() bool {
		for _, o := range load.snapshot() {
			if o.worker == added && o.err == "" {
				return true
			}
		}
		fresh++
		c := postCompletion(t, gw.URL, map[string]any{"model": testModel, "prompt": text(fmt.Sprintf("dns-new-%d", fresh), 120), "max_tokens": 4})
		return c.Status == http.StatusOK && c.worker() == added
	})
	t.Logf("MEASURE dns: the added worker served its first request %v after the DNS change", time.Since(joined).Round(time.Millisecond))

	// The DNS server goes down: the workers stay and requests keep succeeding.
	if err := dns.Stop(harness.DefaultStopTimeout); err != nil {
		t.Fatal(err)
	}
	errorsBefore := scrape(t, gw.MetricsURL())["kvgate_discovery_lookups_total"].sum(map[string]string{"outcome": "error"})
	poll(t, 10*time.Second, "failed lookups counted", func() bool {
		return scrape(t, gw.MetricsURL())["kvgate_discovery_lookups_total"].sum(map[string]string{"outcome": "error"}) >= errorsBefore+3
	})
	downSince := time.Now()
	poll(t, 30*time.Second, "12 streams served while the DNS server is down", func() bool {
		n := 0
		for _, o := range load.snapshot() {
			if o.start.After(downSince) && o.err == "" {
				n++
			}
		}
		return n >= 12
	})
	want := []string{urlOf(hosts[0]), urlOf(hosts[1]), added}
	if got := fleetOf(t, gw.AdminURL).serving(); !slices.Equal(got, want) {
		t.Errorf("workers with the DNS server down: got %v, want %v", got, want)
	}
	outcomes := load.wait()

	var toVictim, whileDown, drained int
	var lastEnd time.Time
	for _, o := range outcomes {
		if o.worker == victim && o.start.After(noNewAfter) {
			toVictim++
		}
		if o.worker == victim && o.start.Before(removed) && o.end.After(noNewAfter) {
			drained++ // in flight on the victim when it began draining
			if o.end.After(lastEnd) {
				lastEnd = o.end
			}
		}
		if o.start.After(downSince) {
			whileDown++
		}
	}
	if toVictim > 0 {
		t.Errorf("%d requests started after the victim began draining went to it", toVictim)
	}
	if drained == 0 {
		t.Error("no stream was in flight on the victim when it began draining: the drain was not exercised")
	}
	// It left the fleet (its streams stopped, its blocks dropped) only once those streams had
	// ended: the client reads a stream's end as the gateway releases the worker, so a little
	// slack covers the two clocks of one machine.
	if lastEnd.After(goneAt.Add(50 * time.Millisecond)) {
		t.Errorf("the victim left /workers %v before its last stream ended: not drained", lastEnd.Sub(goneAt))
	}
	if f := failures(outcomes); len(f) > 0 {
		t.Errorf("%d of %d streamed requests failed, want 0; first: %s", len(f), len(outcomes), f[0])
	}
	// Quiet now: the index holds exactly the blocks the listed workers' engines hold (none of
	// the victim's, not even under a reused worker id), and nothing for anyone else.
	var last string
	defer func() {
		if t.Failed() && last != "" {
			t.Logf("index against the engines' caches at the last look:%s", last)
		}
	}()
	poll(t, 10*time.Second, "the index holds exactly the listed engines' blocks", func() bool {
		v := fleetOf(t, gw.AdminURL)
		sum := 0
		last = ""
		for _, w := range v.Workers {
			sum += w.IndexBlocks
			var dc struct {
				Ranks []struct {
					Hashes []uint64 `json:"hashes"`
				} `json:"ranks"`
			}
			getJSON(t, w.URL+"/debug/cache", &dc)
			if held := len(dc.Ranks[0].Hashes); held != w.IndexBlocks {
				last += fmt.Sprintf(" %s: engine %d, index %d;", w.URL, held, w.IndexBlocks)
			}
		}
		if len(v.Pools) != 1 || v.Pools[0].IndexBlocks != sum {
			last += fmt.Sprintf(" index %d blocks, listed workers %d", v.Pools[0].IndexBlocks, sum)
		}
		return last == "" && v.find(victim) == nil
	})
	t.Logf("MEASURE dns: %d streamed requests, %d failed; %d in flight on the removed worker finished during its drain, none sent to it after; %d while the DNS server was down",
		len(outcomes), len(failures(outcomes)), drained, whileDown)
}

// TestTwoModels (issue 16): two models with different tokenizer families (Qwen3 and Llama 3.1)
// and two simulator pools behind one gateway: each request goes to its model's pool, chat is
// rendered with that model's template (as /debug/route shows and the engine's prompt length
// confirms), repeated chat prefixes hit the pool's own index, and /v1/models lists both.
func TestTwoModels(t *testing.T) {
	llamaTok := filepath.Join(repoRoot, ".cache", "tokenizers", "llama3_1", "tokenizer.json")
	if _, err := os.Stat(llamaTok); err != nil {
		t.Fatalf("llama3_1 tokenizer missing (make testdata): %v", err)
	}
	type model struct {
		name, dir, tok string
		marker         string
		urls           []string // the gRPC workers of its pool
		httpURL        string   // one of its simulators' HTTP API, which tokenizes text itself
	}
	models := []*model{
		{name: "qwen3", dir: filepath.Dir(tokenizerPath), tok: tokenizerPath, marker: "<|im_start|>user\n"},
		{name: "llama", dir: filepath.Dir(llamaTok), tok: llamaTok, marker: "<|start_header_id|>user<|end_header_id|>\n\n"},
	}
	logDir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("models:\n")
	for _, m := range models {
		l := &harness.Launcher{Bin: bins, Tokenizer: m.tok, Model: m.name + "-engine", LogDir: logDir, StartTimeout: startTimeout}
		fmt.Fprintf(&cfg, "  - name: %s\n    model_path: %s\n    workers:\n", m.name, m.dir)
		grpcPorts, err := harness.FreeTCPPorts(2)
		if err != nil {
			t.Fatal(err)
		}
		for i, gp := range grpcPorts {
			sim := startSim(t, l, harness.SimOptions{Name: fmt.Sprintf("%s-%d", m.name, i), TimeScale: 0.05,
				Args: []string{"--grpc-port", fmt.Sprint(gp), "--runtime", "vllm"}})
			m.httpURL = sim.URL
			u := fmt.Sprintf("grpc://127.0.0.1:%d", gp)
			m.urls = append(m.urls, u)
			fmt.Fprintf(&cfg, "      - url=%s,runtime=vllm\n", u)
		}
	}
	cfgPath := filepath.Join(logDir, "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &harness.Launcher{Bin: bins, Tokenizer: tokenizerPath, Model: "default-unused", LogDir: logDir, StartTimeout: startTimeout}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-models", Args: []string{"--config", cfgPath, "--health-interval", "200ms"}})

	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	getJSON(t, gw.URL+"/v1/models", &list)
	var ids []string
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, []string{"llama", "qwen3"}) {
		t.Errorf("/v1/models: got %v, want [llama qwen3]", ids)
	}
	poll(t, 10*time.Second, "every worker healthy and event-fed", func() bool {
		v := fleetOf(t, gw.AdminURL)
		n := 0
		for _, w := range v.Workers {
			if w.Healthy && w.EventStream == "up" {
				n++
			}
		}
		return n == 4
	})

	system := text("two-models system prompt", 200)
	for _, m := range models {
		for i := range 6 {
			body := map[string]any{"model": m.name, "max_tokens": 8, "messages": []map[string]any{
				{"role": "system", "content": system}, {"role": "user", "content": fmt.Sprintf("question %d for %s", i, m.name)}}}
			b, _ := json.Marshal(body)
			// What the gateway renders and routes on, in this model's pool.
			resp, err := httpClient.Post(gw.AdminURL+"/debug/route", "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			var ex struct {
				Pool         string `json:"pool"`
				Prompt       string `json:"prompt"`
				PromptTokens int    `json:"prompt_tokens"`
				Workers      []struct {
					URL string `json:"url"`
				} `json:"workers"`
			}
			json.NewDecoder(resp.Body).Decode(&ex)
			resp.Body.Close()
			if ex.Pool != m.name || !strings.Contains(ex.Prompt, m.marker) || len(ex.Workers) != 2 {
				t.Fatalf("%s: /debug/route pool %q, %d workers, prompt %.120q: want its pool, its 2 workers, its template", m.name, ex.Pool, len(ex.Workers), ex.Prompt)
			}
			for _, w := range ex.Workers {
				if !slices.Contains(m.urls, w.URL) {
					t.Errorf("%s: /debug/route offers %s of another pool", m.name, w.URL)
				}
			}
			resp, err = httpClient.Post(gw.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			rb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var out struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			}
			json.Unmarshal(rb, &out)
			worker := resp.Header.Get("X-Kvgate-Worker")
			if resp.StatusCode != http.StatusOK || !slices.Contains(m.urls, worker) {
				t.Fatalf("%s chat %d: got %d from %q, want 200 from its pool %v: %s", m.name, i, resp.StatusCode, worker, m.urls, rb)
			}
			// The engine received the ids the gateway rendered with this model's template.
			if out.Usage.PromptTokens != ex.PromptTokens {
				t.Errorf("%s chat %d: the engine got %d prompt tokens, the gateway rendered %d", m.name, i, out.Usage.PromptTokens, ex.PromptTokens)
			}
			if i == 5 {
				// By now the pool's engines reported the system prompt's blocks to its own index.
				matched := resp.Header.Get("X-Kvgate-Matched-Blocks")
				if matched == "" || matched == "0" {
					t.Errorf("%s: the 6th chat with a shared system prompt matched %q blocks, want the prefix", m.name, matched)
				}
				t.Logf("MEASURE models: %s: %d prompt tokens rendered with its template, matched %s blocks on %s (%s)",
					m.name, ex.PromptTokens, matched, worker, resp.Header.Get("X-Kvgate-Route-Reason"))
			}
		}
	}
	// Completions too: the same text tokenizes differently in the two pools, each exactly as
	// an engine with that model's tokenizer counts it (a simulator's HTTP API tokenizes the
	// text itself).
	prompt := text("two-models completion", 80)
	counts := map[string]int{}
	for _, m := range models {
		own := postCompletion(t, m.httpURL, map[string]any{"model": m.name + "-engine", "prompt": prompt, "max_tokens": 1})
		var ownOut struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		json.Unmarshal(own.Body, &ownOut)
		c := postCompletion(t, gw.URL, map[string]any{"model": m.name, "prompt": prompt, "max_tokens": 4})
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		json.Unmarshal(c.Body, &out)
		if c.Status != http.StatusOK || !slices.Contains(m.urls, c.worker()) {
			t.Fatalf("%s completion: got %d from %q: %s", m.name, c.Status, c.worker(), c.Body)
		}
		counts[m.name] = out.Usage.PromptTokens
		if own.Status != http.StatusOK || ownOut.Usage.PromptTokens != out.Usage.PromptTokens {
			t.Errorf("%s: the gateway routed %d prompt tokens, the model's own tokenizer makes %d (%d %s)", m.name, out.Usage.PromptTokens,
				ownOut.Usage.PromptTokens, own.Status, own.Body)
		}
	}
	t.Logf("MEASURE models: one completion prompt is %d tokens for qwen3 and %d for llama, as their engines count", counts["qwen3"], counts["llama"])
	if counts["qwen3"] == counts["llama"] {
		t.Errorf("prompt tokens: both models counted %d; two tokenizers should differ", counts["qwen3"])
	}
	// Each pool's index holds its own engines' blocks only.
	v := fleetOf(t, gw.AdminURL)
	for _, p := range v.Pools {
		sum := 0
		for _, w := range v.Workers {
			if w.Pool == p.Model {
				sum += w.IndexBlocks
			}
		}
		if p.Model != "default-unused" && (p.IndexBlocks == 0 || p.IndexBlocks != sum) {
			t.Errorf("pool %s: index blocks %d, its workers' sum %d; want equal and > 0", p.Model, p.IndexBlocks, sum)
		}
	}
	c := postCompletion(t, gw.URL, map[string]any{"model": "mistral", "prompt": "x"})
	if c.Status != http.StatusNotFound || !strings.Contains(string(c.Body), `"code":"model_not_found"`) || strings.Contains(string(c.Body), "127.0.0.1") {
		t.Errorf("unknown model: got %d %s, want a 404 model_not_found naming no worker", c.Status, c.Body)
	}
}

// TestConfigHotReload (issue 16): the gateway binary watches its --config file: a worker added
// to it takes traffic within 2 s, a broken file (bad YAML, a model whose tokenizer is missing)
// changes nothing, and SIGHUP reloads it too.
func TestConfigHotReload(t *testing.T) {
	l := newLauncher(t)
	a := startSim(t, l, harness.SimOptions{Name: "reload-a", Events: true, TimeScale: 0.05})
	b := startSim(t, l, harness.SimOptions{Name: "reload-b", Events: true, TimeScale: 0.05})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	write := func(s string) {
		t.Helper()
		tmp := filepath.Join(dir, "gateway.yaml.tmp") // written aside and renamed over, as a ConfigMap is
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	workers := func(sims ...*harness.Sim) string {
		var s strings.Builder
		s.WriteString("policy: round_robin\nworkers:\n")
		for _, sim := range sims {
			fmt.Fprintf(&s, "  - %s\n", sim.WorkerSpec(true))
		}
		return s.String()
	}
	write(workers(a))
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-reload", Args: []string{"--config", cfg, "--health-interval", "200ms"}})
	if got := fleetOf(t, gw.AdminURL).serving(); !slices.Equal(got, []string{a.URL}) {
		t.Fatalf("workers at start: got %v", got)
	}

	write(workers(a, b))
	took := poll(t, 2*time.Second, "the added worker serves a request", func() bool {
		c := postCompletion(t, gw.URL, map[string]any{"prompt": "hello", "max_tokens": 2})
		return c.Status == http.StatusOK && c.worker() == b.URL
	})
	t.Logf("MEASURE reload: a worker added to the file served its first request %v after the write", took.Round(time.Millisecond))
	both := []string{a.URL, b.URL}
	slices.Sort(both)

	rejected := func() float64 {
		return scrape(t, gw.MetricsURL())["kvgate_config_reloads_total"].sum(map[string]string{"outcome": "rejected"})
	}
	for i, broken := range []string{
		"policy: round_robin\nworkers: [" + a.URL + ",\n",
		workers(a) + "models:\n  - name: other\n    model_path: " + filepath.Join(dir, "no-such-model") + "\n",
	} {
		write(broken)
		poll(t, 5*time.Second, "the broken file rejected", func() bool { return rejected() == float64(i+1) })
		if got := fleetOf(t, gw.AdminURL).serving(); !slices.Equal(got, both) {
			t.Errorf("workers after broken file %d: got %v, want %v unchanged", i+1, got, both)
		}
		for range 4 {
			if c := postCompletion(t, gw.URL, map[string]any{"prompt": "still", "max_tokens": 2}); c.Status != http.StatusOK {
				t.Errorf("request after broken file %d: %d %s", i+1, c.Status, c.Body)
			}
		}
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	getJSON(t, gw.URL+"/v1/models", &models)
	if len(models.Data) != 1 || models.Data[0].ID != testModel {
		t.Errorf("/v1/models after the broken files: got %+v, want %s only", models.Data, testModel)
	}

	// Written in place, the file is re-read on the watch's event or on SIGHUP, whichever comes
	// first (cmd/gateway's TestConfigReload checks SIGHUP alone).
	if err := os.WriteFile(cfg, []byte(workers(b)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := gw.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll(t, 5*time.Second, "a drained after the reload", func() bool {
		return slices.Equal(fleetOf(t, gw.AdminURL).serving(), []string{b.URL}) && fleetOf(t, gw.AdminURL).find(a.URL) == nil
	})
}
