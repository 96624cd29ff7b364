package router

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
)

// vllmModels is a /v1/models body as vLLM serves it with --enable-lora: the base model, then
// each adapter with its parent.
func vllmModels(base string, adapters ...string) string {
	s := `{"object":"list","data":[{"id":"` + base + `","object":"model","root":"/models/base","parent":null}`
	for _, a := range adapters {
		s += `,{"id":"` + a + `","object":"model","root":"/loras/` + a + `","parent":"` + base + `"}`
	}
	return s + `]}`
}

// TestLoRARequestsUseTheAdapterNamespace: a worker's /v1/models lists an adapter; blocks its
// engine stored under that adapter (lora_name) match a request for the adapter and not one for
// the base model; adapter requests go only to workers listing the adapter, with the name
// unchanged.
func TestLoRARequestsUseTheAdapterNamespace(t *testing.T) {
	a, b, c := newFakeWorker(t, "base"), newFakeWorker(t, "base"), newFakeWorker(t, "base")
	a.models = vllmModels("base", "sql-lora")
	b.models = vllmModels("base", "sql-lora")
	_, pubA, repA := startPublisher(t)
	pb, pubB, repB := startPublisher(t)
	g := newTestGateway(t, testConfig{},
		"url="+a.url()+",kv_events="+pubA+",replay="+repA,
		"url="+b.url()+",kv_events="+pubB+",replay="+repB,
		"url="+c.url())
	g.waitFor(t, "event streams up and models discovered", func() bool {
		ok, _ := g.rt.Fleet().Ready()
		return ok && g.member(b.url()).Worker().HasAdapter("sql-lora") && g.member(a.url()).Worker().HasAdapter("sql-lora")
	})
	_, models := g.do(t, http.MethodGet, "/v1/models", "", "")
	if !strings.Contains(models, `"id":"sql-lora","object":"model"`) || !strings.Contains(models, `"parent":"test-model"`) {
		t.Errorf("/v1/models does not list the adapter under the served model: %s", models)
	}

	prefix := strings.Repeat("lora prompt! ", 10) // 130 bytes = 8 blocks of 16
	batch := storedBatch(bytesOf(prefix), 16, 5000)
	batch.Events[0].LoraName = "sql-lora"
	if _, err := pb.Publish(batch); err != nil {
		t.Fatal(err)
	}
	mb := g.member(b.url())
	g.waitFor(t, "b's adapter blocks in the index", func() bool { return mb.IndexBlocks() == 8 })
	keys := indexer.AppendBlockKeys(nil, bytesOf(prefix), 16, indexer.Namespace("sql-lora", 0, false, ""))
	if got := g.index().Match(keys, nil); len(got) != 1 || got[0].Blocks != 8 {
		t.Fatalf("index match under the adapter namespace: got %+v, want 8 blocks on one worker", got)
	}

	// The adapter request matches b's blocks and reaches b with the adapter's name.
	resp, body := g.post(t, `{"model":"sql-lora","prompt":"`+prefix+`tail"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("adapter request: status %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(pipeline.HeaderWorker); got != b.url() {
		t.Errorf("adapter request worker: got %q, want %q", got, b.url())
	}
	if got, want := resp.Header.Get(pipeline.HeaderReason), string(policy.ReasonCacheHit); got != want {
		t.Errorf("adapter request reason: got %q, want %q", got, want)
	}
	if got := resp.Header.Get(pipeline.HeaderMatchedBlocks); got != "8" {
		t.Errorf("adapter request matched blocks: got %q, want 8", got)
	}
	if got := b.nextReq(t)["model"]; got != "sql-lora" {
		t.Errorf("upstream model of the adapter request: got %v, want sql-lora", got)
	}
	var out struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.Model != "sql-lora" {
		t.Errorf("response model: got %q (%v), want sql-lora", out.Model, err)
	}

	// The same prompt for the base model matches nothing: neither the adapter's stored blocks
	// nor the pending entry the adapter request just left.
	_, dbg := g.do(t, http.MethodGet, "/debug/route?tokens="+tokenList(bytesOf(prefix+"tail")), "", "")
	var ex pipeline.RouteExplanation
	if err := json.Unmarshal([]byte(dbg), &ex); err != nil {
		t.Fatalf("/debug/route: %v: %s", err, dbg)
	}
	if len(ex.Workers) != 3 {
		t.Errorf("base request candidates: got %d, want 3", len(ex.Workers))
	}
	for _, w := range ex.Workers {
		if w.MatchedEvents != 0 || w.MatchedPending != 0 || w.MatchedTree != 0 {
			t.Errorf("base request matched adapter blocks on %s: %+v", w.URL, w)
		}
	}
	resp, body = g.post(t, `{"prompt":"`+prefix+`tail"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("base request: status %d %s", resp.StatusCode, body)
	}
	if got, want := resp.Header.Get(pipeline.HeaderReason), string(policy.ReasonNoMatch); got != want {
		t.Errorf("base request reason: got %q, want %q", got, want)
	}

	// Adapter requests are explained under the namespace and consider only a and b.
	_, dbg = g.do(t, http.MethodGet, "/debug/route?model=sql-lora&tokens="+tokenList(bytesOf(prefix+"tail")), "", "")
	ex = pipeline.RouteExplanation{}
	if err := json.Unmarshal([]byte(dbg), &ex); err != nil {
		t.Fatalf("/debug/route: %v: %s", err, dbg)
	}
	var urls []string
	for _, w := range ex.Workers {
		urls = append(urls, w.URL)
	}
	if d := cmp.Diff([]string{a.url(), b.url()}, urls, cmpopts.SortSlices(func(x, y string) bool { return x < y })); d != "" || ex.Namespace != "sql-lora" {
		t.Errorf("adapter explanation: namespace %q, workers (-want +got):\n%s", ex.Namespace, d)
	}
	if ex.Decision == nil || ex.Decision.Worker != b.url() || ex.Decision.MatchedBlocks != 8 {
		t.Errorf("adapter explanation decision: got %+v, want b with 8 blocks", ex.Decision)
	}
	// c may have served the base request (least load on no match); it must never have been
	// sent an adapter request.
	for drained := false; !drained; {
		select {
		case r := <-c.reqs:
			if r["model"] != "base" {
				t.Errorf("worker c, which lists no adapter, received %v", r)
			}
		default:
			drained = true
		}
	}
}

func tokenList(ts []uint32) string {
	var sb strings.Builder
	for i, t := range ts {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.FormatUint(uint64(t), 10))
	}
	return sb.String()
}
