package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/harness"
)

func TestParsePDConfigs(t *testing.T) {
	got, err := parsePDConfigs("agg, pd/pd-min-uncached-tokens=-1,pd", workloadPDChat)
	if err != nil {
		t.Fatal(err)
	}
	want := []configuration{
		{Policy: "cache_aware", Index: "events", Workload: workloadPDChat, Gateways: 1, Fleet: fleetAggregated},
		{Policy: "cache_aware", Index: "events", Variant: "pd-min-uncached-tokens=-1", Workload: workloadPDChat, Gateways: 1, Fleet: fleetPD},
		{Policy: "cache_aware", Index: "events", Workload: workloadPDChat, Gateways: 1, Fleet: fleetPD},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configs (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"both", "pd/-x=1", "pd/nosuch"} {
		if _, err := parsePDConfigs(bad, workloadPDLong); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got, err := parsePDConfigs("", workloadPDLong); err != nil || got != nil {
		t.Errorf("empty: got %v, %v", got, err)
	}
}

// TestPDFleetRoles: a pd fleet is half prefill and half decode workers running NIXL pairs; an
// aggregated fleet has no roles.
func TestPDFleetRoles(t *testing.T) {
	pd := configuration{Fleet: fleetPD}
	var roles, specs []string
	for i := range pdSims {
		roles = append(roles, strings.Join(pdSimArgs(pd, i), " "))
		specs = append(specs, pdRoleSpec(pd, i))
	}
	wantRoles := []string{"--pd-role prefill --pd-transfer nixl", "--pd-role prefill --pd-transfer nixl", "--pd-role decode --pd-transfer nixl", "--pd-role decode --pd-transfer nixl"}
	if !cmp.Equal(roles, wantRoles) || !cmp.Equal(specs, []string{",role=prefill", ",role=prefill", ",role=decode", ",role=decode"}) {
		t.Errorf("pd fleet: sim flags %q, spec suffixes %q", roles, specs)
	}
	agg := configuration{Fleet: fleetAggregated}
	for i := range pdSims {
		if pdSimArgs(agg, i) != nil || pdRoleSpec(agg, i) != "" {
			t.Errorf("aggregated worker %d has a role", i)
		}
	}
}

// TestPDLoadgenArgs: the long-prompt rows send the P/D workload's sizes at the P/D time scale;
// the multi-turn rows loadgen's chat workload.
func TestPDLoadgenArgs(t *testing.T) {
	o := benchDefaults
	r := &runner{o: &o, l: &harness.Launcher{Tokenizer: "/t/qwen3/tokenizer.json"}}
	f := &fleet{}
	long := strings.Join(r.loadgenArgs(o.pdConfigs[1], 2, "http://x", "/tmp/r.json", f), " ")
	for _, want := range []string{"--time-scale 1 ", "--seed 3 ", "--workload prefix_repetition", "--num-prefixes 64", "--prefix-tokens 1024", "--suffix-tokens 1024",
		"--output-tokens 256", "--num-requests 400", "--rate 8", "--result-line policy=cache_aware index=events gateways=1 workload=pd-long fleet=pd run=2"} {
		if !strings.Contains(long, want) {
			t.Errorf("long-prompt args %q lack %q", long, want)
		}
	}
	chat := strings.Join(r.loadgenArgs(o.pdChatConfigs[0], 0, "http://x", "/tmp/r.json", f), " ")
	for _, want := range []string{"--workload chat", "--turns 4", "--system-tokens 1000", "--user-tokens 100", "--output-tokens 128", "--num-requests 300", "--rate 2", "fleet=agg"} {
		if !strings.Contains(chat, want) {
			t.Errorf("multi-turn args %q lack %q", chat, want)
		}
	}
}

func TestReadPDOutcomes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# HELP kvgate_pd_requests_total x\n# TYPE kvgate_pd_requests_total counter\n"+
			"kvgate_pd_requests_total{outcome=\"decode_cached\"} 120\nkvgate_pd_requests_total{outcome=\"pair\"} 180\n"+
			"kvgate_pd_requests_total{outcome=\"short_prompt\"} 3\nkvgate_pd_missing_kv_params_total 2\n")
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := readPDOutcomes(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]float64{"decode_cached": 120, "pair": 180, "short_prompt": 3}, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if r := (result{PD: got}); r.skipped() != 123 || r.pairs() != 180 {
		t.Errorf("skipped %v, pairs %v; want 123, 180", r.skipped(), r.pairs())
	}
}

// TestPDSection: the P/D rows are medians of their runs with the runs' min–max, set against
// the aggregated row, and counted skipped prefill legs; they are not in the other tables.
func TestPDSection(t *testing.T) {
	o := benchDefaults
	run := func(c configuration, ttft, itl50, itl99, tok, skipped float64) result {
		r := result{configuration: c, HitRate: fptr(0.5), TTFTms: summary{Mean: ttft, P95: 2 * ttft}, ITLms: summary{P50: itl50, P99: itl99}, OutputTokensPerS: tok}
		if c.Fleet == fleetPD {
			r.PD = map[string]float64{"pair": 300 - skipped, "decode_cached": skipped}
		}
		return r
	}
	agg, pd := o.pdChatConfigs[0], o.pdChatConfigs[2]
	rows := []result{
		medianOf([]result{run(agg, 200, 30, 190, 900, 0), run(agg, 220, 31, 210, 880, 0), run(agg, 240, 29, 200, 910, 0)}),
		medianOf([]result{run(pd, 400, 28, 45, 890, 100), run(pd, 420, 27, 50, 870, 120), run(pd, 380, 28.5, 40, 900, 110)}),
	}
	md := pdSection(&o, rows)
	for _, want := range []string{"### Prefill/decode disaggregation", "Multi-turn (conditional disaggregation): 300 requests",
		"| 4 aggregated | 3 | 0 | 0 | 220 ms (200 ms–240 ms) | 440 ms (400 ms–480 ms) | 30.0 ms (29.0–31.0) | 200.0 ms (190.0–210.0) | 900 (880–910) | 50.0% (50.0–50.0) | — | — |",
		"| 2 prefill + 2 decode | 3 | 0 | 0 | 400 ms (380 ms–420 ms) | 800 ms (760 ms–840 ms) | 28.0 ms (27.0–28.5) | 45.0 ms (40.0–50.0) | 890 (870–900) | 50.0% (50.0–50.0) | 190 | 110 (100–120) |",
		"2 prefill + 2 decode: ITL p99 0.23× the aggregated fleet's, p50 0.93×, TTFT mean 1.82×, output throughput 0.99×; 110 of 300 prefill legs skipped (37%).",
		"-pd-chat-configs 'agg,pd/pd-min-uncached-tokens=-1,pd,pd/decode-policy=cache_aware'"} {
		if !strings.Contains(md, want) {
			t.Errorf("P/D section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Long prompts:") {
		t.Error("a long-prompt paragraph without long-prompt rows")
	}
	if len(workloads(rows)) != 0 || len(steadyRows(rows)) != 0 {
		t.Error("P/D rows in the steady workloads' tables or plot")
	}
	if pdSection(&o, nil) != "" {
		t.Error("a P/D section without P/D rows")
	}
}

// TestReportReadsPDRows: bench report re-renders a kept run's P/D rows, their fleet from the
// labels and their outcomes from the side file, which (like the index's) is not a report.
func TestReportReadsPDRows(t *testing.T) {
	dir := t.TempDir()
	tag := filepath.Join(dir, "pd-chat-cache_aware-events-pd-1gw-run0")
	rep := `{"labels":{"policy":"cache_aware","index":"events","gateways":"1","workload":"pd-chat","fleet":"pd","run":"0"},"requests":10,"completed":10,` +
		`"hit_rate":0.5,"ttft_ms":{"mean":100,"p95":200},"itl_ms":{"p50":28,"p99":61}}`
	for name, body := range map[string]string{".json": rep, ".loadgen.txt": "RESULT policy=cache_aware fleet=pd run=0\n",
		".index.json": `{"index_keys":5,"index_blocks":6}`, ".pd.json": `{"pair":7,"decode_cached":3}`} {
		if err := os.WriteFile(tag+name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := benchDefaults
	o.logDir, o.out, o.png = dir, filepath.Join(dir, "out.md"), ""
	var stdout strings.Builder
	if err := runReport(&o, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(o.out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "| 2 prefill + 2 decode | 1 | 10 | 0 | 100 ms | 200 ms | 28.0 ms | 61.0 ms | 0 | 50.0% | 7 | 3 |"; !strings.Contains(string(md), want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
}
