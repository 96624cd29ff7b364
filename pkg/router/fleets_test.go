package router

import (
	"bufio"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// pairTokenizer is a second fake tokenizer: two bytes make one token, so a prompt's ids tell
// which model's tokenizer encoded it.
type pairTokenizer struct{ byteTokenizer }

func (pairTokenizer) Encode(dst []uint32, text string, _ bool) ([]uint32, error) {
	for i := 0; i+1 < len(text); i += 2 {
		dst = append(dst, uint32(text[i])<<8|uint32(text[i+1]))
	}
	return dst, nil
}

func (pairTokenizer) VocabSize() int { return 1 << 16 }

// modelRenderer renders a chat request as its last message wrapped in a model's tag, tokenized by
// tok: which template rendered a prompt shows in the prompt itself.
type modelRenderer struct {
	tag string
	tok pipeline.Tokenizer
}

func (r modelRenderer) Render(req *openai.ChatRequest) (chat.Result, *openai.Error) {
	text := "<" + r.tag + ">" + req.Messages[len(req.Messages)-1].Content.Text + "</" + r.tag + ">"
	ids, _ := r.tok.Encode(nil, text, false)
	return chat.Result{Prompt: text, TokenIDs: ids}, nil
}

// newModel returns a configured model with its own index, tree and pending overlay.
func newModel(t *testing.T, name string, tok pipeline.Tokenizer) Model {
	t.Helper()
	idx, err := indexer.New(indexer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tree, err := indexer.NewTree(indexer.TreeConfig{BlockSize: fleet.DefaultBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	pend, err := indexer.NewPending(indexer.PendingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return Model{Name: name, Tokenizer: tok, Chat: modelRenderer{tag: name, tok: tok}, Index: idx, Tree: tree, Pending: pend}
}

// workersList is the part of GET /workers the tests read.
type workersList struct {
	Workers []struct {
		URL         string `json:"url"`
		Model       string `json:"model"`
		Origin      string `json:"origin"`
		Pool        string `json:"pool"`
		Draining    bool   `json:"draining"`
		InFlight    int64  `json:"in_flight"`
		IndexBlocks int    `json:"index_blocks"`
	} `json:"workers"`
	Pools []poolView `json:"pools"`
}

func (g *testGateway) workers(t *testing.T) workersList {
	t.Helper()
	resp, body := g.do(t, http.MethodGet, "/workers", "", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /workers: %d %s", resp.StatusCode, body)
	}
	var wl workersList
	if err := json.Unmarshal([]byte(body), &wl); err != nil {
		t.Fatal(err)
	}
	return wl
}

// TestModelsRouteInTheirOwnPools: each configured model's requests go only to its workers, are
// tokenized by its tokenizer and rendered by its template, and its blocks live in its own index;
// /v1/models lists every model; an unknown model is a 404 that names nothing but itself.
func TestModelsRouteInTheirOwnPools(t *testing.T) {
	// The default pool's worker calls its model "alpha" too: without a pool of their own,
	// alpha's requests would be its (Worker.Serves answers to a reported name).
	d, a, b := newFakeWorker(t, "alpha"), newFakeWorker(t, "engine-a"), newFakeWorker(t, "engine-b")
	ma, mb := newModel(t, "alpha", byteTokenizer{}), newModel(t, "beta", pairTokenizer{})
	g := newTestGateway(t, testConfig{Policy: &fixedPolicy{}, Models: []Model{ma, mb}}, d.url(), "url="+a.url()+",model=alpha", "url="+b.url()+",model=beta")
	g.waitFor(t, "models discovered", func() bool { return g.member(d.url()).Worker().ReportedModel() == "alpha" })

	for _, tt := range []struct{ model, want string }{{"alpha", a.url()}, {"beta", b.url()}, {"test-model", d.url()}, {"", d.url()}} {
		for i := 0; i < 3; i++ { // whatever the policy's state, never another pool's worker
			resp, body := g.post(t, `{"model":"`+tt.model+`","prompt":"`+strings.Repeat("p", 40)+`"}`)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderWorker) != tt.want {
				t.Fatalf("model %q: got %d from %q, want 200 from %s: %s", tt.model, resp.StatusCode, resp.Header.Get(pipeline.HeaderWorker), tt.want, body)
			}
		}
	}
	// Each pool's tokenizer and template, as /debug/route explains them.
	for _, tt := range []struct {
		model, prompt string
		tokens        int
	}{{"alpha", "<alpha>hello world!</alpha>", 27}, {"beta", "<beta>hello world!</beta>", 12}} {
		resp, body := g.do(t, http.MethodPost, "/debug/route", `{"model":"`+tt.model+`","messages":[{"role":"user","content":"hello world!"}]}`, "")
		var ex pipeline.RouteExplanation
		if err := json.Unmarshal([]byte(body), &ex); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("debug route %s: %d %s", tt.model, resp.StatusCode, body)
		}
		if ex.Pool != tt.model || ex.Prompt != tt.prompt || ex.PromptTokens != tt.tokens || len(ex.Workers) != 1 {
			t.Errorf("debug route %s: got pool %q prompt %q (%d tokens, %d workers), want %q %q (%d, 1)",
				tt.model, ex.Pool, ex.Prompt, ex.PromptTokens, len(ex.Workers), tt.model, tt.prompt, tt.tokens)
		}
	}
	// Blocks routed to alpha's worker are in alpha's structures only.
	if ma.Tree.WorkerBlocks(g.member(a.url()).LookupWorker().IDs[0]) == 0 {
		t.Error("alpha's tree learnt nothing from alpha's requests")
	}
	if n := mb.Tree.WorkerBlocks(g.member(a.url()).LookupWorker().IDs[0]); n != 0 {
		t.Errorf("beta's tree holds %d blocks of alpha's worker, want 0", n)
	}

	resp, body := g.do(t, http.MethodGet, "/v1/models", "", "")
	var list modelList
	if err := json.Unmarshal([]byte(body), &list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("models: %d %s", resp.StatusCode, body)
	}
	var ids []string
	for _, c := range list.Data {
		ids = append(ids, c.ID)
	}
	if d := cmp.Diff([]string{"alpha", "beta", "test-model"}, ids); d != "" {
		t.Errorf("/v1/models (-want +got):\n%s", d)
	}

	resp, body = g.post(t, `{"model":"gamma","prompt":"x"}`)
	e := openAIError(t, body)
	if resp.StatusCode != http.StatusNotFound || e.Code == nil || *e.Code != "model_not_found" {
		t.Errorf("unknown model: got %d %s, want 404 model_not_found", resp.StatusCode, body)
	}
	for _, secret := range []string{a.url(), b.url(), d.url(), "alpha", "beta", "engine-", "test-model"} {
		if strings.Contains(body, strings.TrimPrefix(secret, "http://")) {
			t.Errorf("404 body %s names %q", body, secret)
		}
	}
}

// A configured model with no worker up is listed, and its requests get 503, not 404.
func TestConfiguredModelWithoutWorkers(t *testing.T) {
	d := newFakeWorker(t, "base")
	g := newTestGateway(t, testConfig{Models: []Model{newModel(t, "alpha", byteTokenizer{})}}, d.url())
	resp, body := g.post(t, `{"model":"alpha","prompt":"x"}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("got %d %s, want 503", resp.StatusCode, body)
	}
}

func TestModelConfigErrors(t *testing.T) {
	idx, _ := indexer.New(indexer.Config{})
	p := &fixedPolicy{}
	for _, tt := range []struct {
		name   string
		models []Model
	}{
		{"no name", []Model{{Index: idx, Policy: p}}},
		{"no index", []Model{{Name: "a", Policy: p}}},
		{"no policy", []Model{{Name: "a", Index: idx}}},
		{"twice", []Model{{Name: "a", Index: idx, Policy: p}, {Name: "a", Index: idx, Policy: p}}},
		{"the default model", []Model{{Name: "test-model", Index: idx, Policy: p}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			def := Model{Name: "test-model", Policy: p, Index: idx}
			if _, err := New(Config{Models: append([]Model{def}, tt.models...)}); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

// TestSyncWorkersDrains: a worker its origin stops listing takes no new request, its stream in
// flight finishes, and then it leaves /workers and its blocks leave the index; one listed anew
// joins with its origin.
func TestSyncWorkersDrains(t *testing.T) {
	gate := make(chan struct{})
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	a.handle, b.handle = sseHandler(2, gate), sseHandler(2, gate)
	g := newTestGateway(t, testConfig{Policy: &fixedPolicy{}})
	if err := g.rt.Fleet().SyncWorkers("dns pool.test", []worker.Spec{{URL: a.url()}}); err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "a healthy", func() bool { return len(g.rt.Fleet().Workers()) == 1 && g.rt.Fleet().Workers()[0].Healthy() })
	ma := g.member(a.url())
	g.index().Apply(ma.LookupWorker().IDs[0], storedBatch(bytesOf(strings.Repeat("held by a ......", 2)), 16, 1).Events)

	// A stream in flight on a.
	req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`))
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "t0") {
		t.Fatalf("first chunk: %q %v", line, err)
	}

	// DNS now answers b only.
	if err := g.rt.Fleet().SyncWorkers("dns pool.test", []worker.Spec{{URL: b.url()}}); err != nil {
		t.Fatal(err)
	}
	wl := g.workers(t)
	type row struct {
		URL, Origin string
		Draining    bool
	}
	var rows []row
	for _, w := range wl.Workers {
		rows = append(rows, row{w.URL, w.Origin, w.Draining})
	}
	if d := cmp.Diff([]row{{b.url(), "dns pool.test", false}, {a.url(), "dns pool.test", true}}, rows); d != "" {
		t.Errorf("/workers while a drains (-want +got):\n%s", d)
	}
	g.waitFor(t, "b healthy", func() bool { return len(g.rt.Fleet().Workers()) == 1 && g.rt.Fleet().Workers()[0].Healthy() })
	// New requests go to b (the fixed policy would pick a, the first, were it eligible).
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"y","stream":true}`))
		r, err := g.srv.Client().Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		r.Body.Close()
		done <- r.Header.Get(pipeline.HeaderWorker)
	}()
	// Let both streams finish: a's drain ends with its request.
	for i := 0; i < 2; i++ {
		select {
		case gate <- struct{}{}:
		case <-time.After(defaultTestTimeout):
			t.Fatal("streams did not proceed")
		}
	}
	if got := <-done; got != b.url() {
		t.Errorf("request during the drain went to %q, want b", got)
	}
	rest, err := bufio.NewReader(br).ReadString(0)
	if !strings.Contains(rest, "t1") || !strings.Contains(rest, "[DONE]") {
		t.Errorf("the stream in flight on the draining worker: got %q (%v), want it to finish", rest, err)
	}
	g.waitFor(t, "a drained", func() bool { return len(g.workers(t).Workers) == 1 })
	if n := g.index().Memberships(); n != 0 {
		t.Errorf("index blocks after the drain: got %d, want 0", n)
	}
}

// A draining worker whose requests do not finish is stopped at DrainTimeout.
func TestDrainTimeout(t *testing.T) {
	gate := make(chan struct{}) // never opened
	a := newFakeWorker(t, "m")
	a.handle = sseHandler(2, gate)
	g := newTestGateway(t, testConfig{DrainTimeout: 100 * time.Millisecond}, a.url())
	req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`))
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := g.rt.Fleet().SyncWorkers(fleet.OriginAdmin, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g.waitFor(t, "a torn down", func() bool { return len(g.workers(t).Workers) == 0 })
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("teardown took %v, want about the 100ms drain timeout", el)
	}
}

// Origins: the first origin to list a URL owns it; when it stops listing it, the other's spec
// takes over. A changed spec rebuilds the worker; a bad list changes nothing.
func TestSyncWorkersOrigins(t *testing.T) {
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{})
	if err := g.rt.Fleet().SyncWorkers(fleet.OriginFile, []worker.Spec{{URL: a.url()}}); err != nil {
		t.Fatal(err)
	}
	if err := g.rt.Fleet().SyncWorkers("dns x", []worker.Spec{{URL: a.url(), BlockSize: 32}, {URL: b.url()}}); err != nil {
		t.Fatal(err)
	}
	origins := func() map[string]string {
		out := map[string]string{}
		for _, m := range g.members() {
			out[m.Worker().URL()] = m.Origin()
		}
		return out
	}
	if d := cmp.Diff(map[string]string{a.url(): fleet.OriginFile, b.url(): "dns x"}, origins()); d != "" {
		t.Errorf("owners (-want +got):\n%s", d)
	}
	first := g.member(a.url())
	// The same list again changes nothing.
	if err := g.rt.Fleet().SyncWorkers(fleet.OriginFile, []worker.Spec{{URL: a.url()}}); err != nil || g.member(a.url()) != first {
		t.Errorf("an unchanged list rebuilt the worker (%v)", err)
	}
	// Bad lists fail whole.
	for _, bad := range [][]worker.Spec{{{URL: b.url()}, {URL: "ftp://x:1"}}, {{URL: a.url()}, {URL: a.url() + "/"}}} {
		if err := g.rt.Fleet().SyncWorkers(fleet.OriginFile, bad); err == nil {
			t.Errorf("SyncWorkers(%v) succeeded", bad)
		}
	}
	if g.member(a.url()) != first || len(g.rt.Fleet().Snapshot().Draining()) != 0 {
		t.Error("a failed SyncWorkers changed the fleet")
	}
	// The file drops a: DNS's spec of it (block_size 32) takes over.
	if err := g.rt.Fleet().SyncWorkers(fleet.OriginFile, nil); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{a.url(): "dns x", b.url(): "dns x"}, origins()); d != "" {
		t.Errorf("owners after the file dropped a (-want +got):\n%s", d)
	}
	if m := g.member(a.url()); m == first || m.Worker().Spec().BlockSize != 32 {
		t.Error("a was not rebuilt with DNS's spec")
	}
	// A changed spec rebuilds the worker, the old one drains.
	if err := g.rt.Fleet().SyncWorkers("dns x", []worker.Spec{{URL: a.url()}, {URL: b.url()}}); err != nil {
		t.Fatal(err)
	}
	if m := g.member(a.url()); m.Worker().Spec().BlockSize != 0 {
		t.Error("a was not rebuilt with its new spec")
	}
	// The admin API cannot add a URL the fleet has.
	if _, err := g.rt.Fleet().AddWorker(worker.Spec{URL: b.url()}); err == nil {
		t.Error("AddWorker of a URL DNS holds succeeded")
	}
}

// SetModel moves the workers whose spec names the model into its new pool; replacing it
// rebuilds them; RemoveModel puts them back in the default pool.
func TestSetAndRemoveModel(t *testing.T) {
	a := newFakeWorker(t, "m")
	g := newTestGateway(t, testConfig{}, "url="+a.url()+",model=alpha")
	poolOf := func() string {
		m := g.member(a.url())
		if m == nil {
			return "(none)"
		}
		if m.Pool().Default() {
			return ""
		}
		return m.Pool().Name()
	}
	if got := poolOf(); got != "" {
		t.Fatalf("pool before: got %q, want the default", got)
	}
	ma := newModel(t, "alpha", pairTokenizer{})
	ma.Policy = mustPolicy(t, policy.NameCacheAware)
	if err := g.rt.SetModel(ma); err != nil {
		t.Fatal(err)
	}
	if got := poolOf(); got != "alpha" {
		t.Errorf("pool after SetModel: got %q, want alpha", got)
	}
	g.waitFor(t, "a healthy again", func() bool { return g.rt.Fleet().Workers()[0].Healthy() })
	resp, _ := g.do(t, http.MethodPost, "/debug/route", `{"model":"alpha","prompt":"abcd"}`, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("debug route: %d", resp.StatusCode)
	}
	if !slices.Equal(g.rt.ModelNames(), []string{"alpha"}) {
		t.Errorf("model names: got %v", g.rt.ModelNames())
	}
	if err := g.rt.RemoveModel("alpha"); err != nil {
		t.Fatal(err)
	}
	if got := poolOf(); got != "" {
		t.Errorf("pool after RemoveModel: got %q, want the default", got)
	}
	if err := g.rt.RemoveModel("alpha"); err == nil {
		t.Error("removing a model twice succeeded")
	}
}
