package main

import (
	"bytes"
	"fmt"
	"image/png"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fptr(x float64) *float64 { return &x }

func sampleResults() []result {
	var out []result
	for i, c := range benchDefaults.plan() {
		ideal := 0.63
		switch c.Workload {
		case "uniform":
		case workloadChat:
			ideal = 0.72
		case workloadResponses:
			ideal = 0.91
		case workloadMessages:
			ideal = 0.93
		default:
			ideal = 0.81
		}
		out = append(out, result{configuration: c, Requests: 100, HitRate: fptr(0.2 + 0.05*float64(i%5)), IdealHitRate: fptr(ideal),
			TTFTms: summary{Mean: 1500 - 200*float64(i%5), P50: 900, P95: 2000 - 100*float64(i%5)}, Workers: map[string]int{"a": 60, "b": 40},
			ResultLine: "RESULT policy=" + c.Policy})
	}
	return out
}

func TestPlotPNG(t *testing.T) {
	b, err := plotPNG(sampleResults(), plotPanels)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("got an undecodable PNG: %v", err)
	}
	if got := img.Bounds().Dx(); got != 2*560 {
		t.Errorf("width: got %d, want two 560-pixel panels", got)
	}
	if got := img.Bounds().Dy(); got < 4*420 {
		t.Errorf("height: got %d, want a row of 420-pixel panels per workload (4)", got)
	}
	// The bars use the series colours: the last configuration's colour must appear somewhere.
	want := seriesColors[5]
	found := false
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y && !found; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, bb, _ := img.At(x, y).RGBA()
			if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(bb>>8) == want.B {
				found = true
				break
			}
		}
	}
	if !found {
		t.Error("no bar in the events colour")
	}
	if _, err := plotPNG(nil, plotPanels); err == nil {
		t.Error("plotPNG(nil): got nil error, want one")
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ raw, want float64 }{{0.07, 0.1}, {0.12, 0.2}, {3, 5}, {7, 10}, {0, 1}} {
		if got := niceStep(tc.raw); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("niceStep(%v): got %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestParseInts(t *testing.T) {
	got, err := parseInts("1, 2,4")
	if err != nil || !cmp.Equal(got, []int{1, 2, 4}) {
		t.Errorf("got %v %v, want [1 2 4]", got, err)
	}
	for _, bad := range []string{"", "0", "a", "1,,2"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("parseInts(%q): got nil error", bad)
		}
	}
}

func TestParseConfigs(t *testing.T) {
	got, err := parseConfigs("round_robin, cache_aware/approx,cost,cache_aware/events/smg,cost/events/queue-weight=0+decode-weight=1")
	if err != nil {
		t.Fatal(err)
	}
	want := []configuration{
		{Policy: "round_robin", Index: "none"},
		{Policy: "cache_aware", Index: "approx"},
		{Policy: "cost", Index: "events"},
		{Policy: "cache_aware", Index: "events", Variant: "smg"},
		{Policy: "cost", Index: "events", Variant: "queue-weight=0+decode-weight=1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseConfigs (-want +got):\n%s", diff)
	}
	if s := joinConfigs(got); s != "round_robin,cache_aware/approx,cost/events,cache_aware/events/smg,cost/events/queue-weight=0+decode-weight=1" {
		t.Errorf("joinConfigs: got %q", s)
	}
	for _, bad := range []string{"least_load/events", "cache_aware/tree", "cache_aware/events/nope", "cost/events/-x=1", "a/b/c/d", "/events"} {
		if _, err := parseConfigs(bad); err == nil {
			t.Errorf("parseConfigs(%q): got nil error", bad)
		}
	}
}

func TestGatewayOptions(t *testing.T) {
	for _, tc := range []struct {
		c            configuration
		policy, kvix string
		args         []string
	}{
		{configuration{Policy: "round_robin", Index: "none"}, "round_robin", "", nil},
		{configuration{Policy: "cache_aware", Index: "approx"}, "cache_aware", "off", nil},
		{configuration{Policy: "cache_aware", Index: "events"}, "cache_aware", "auto", nil},
		{configuration{Policy: "cache_aware", Index: "events", Variant: "smg"}, "cache_aware", "auto", []string{"--bounded-load-factor", "0"}},
		{configuration{Policy: "cost", Index: "events", Variant: "queue-weight=1+decode-weight=0"}, "cost", "auto", []string{"--queue-weight", "1", "--decode-weight", "0"}},
	} {
		p, k, args := tc.c.gatewayOptions()
		if p != tc.policy || k != tc.kvix || !cmp.Equal(args, tc.args) {
			t.Errorf("%+v: got %s/%s %q, want %s/%s %q", tc.c, p, k, args, tc.policy, tc.kvix, tc.args)
		}
	}
}

func TestPlan(t *testing.T) {
	o := benchDefaults
	var got []string
	for _, c := range o.plan() {
		got = append(got, fmt.Sprintf("%s %s %d", c.Workload, c.spec(), c.Gateways))
	}
	steady := 5*3 + 6 + 3*2 + 2*2 + 2*2
	if len(got) != steady+3*3+2+4+4 || got[0] != "uniform round_robin 1" || got[1] != "uniform prefix_hash 1" || got[5*3+5] != "zipf:1.2 cost/events 1" ||
		got[5*3+6+3*2-1] != "chat cache_aware/events 4" || got[steady-8] != "responses round_robin 1" || got[steady-5] != "responses cache_aware/events 4" ||
		got[steady-4] != "messages round_robin 1" || got[steady-3] != "messages cache_aware/events 1" || got[steady-1] != "messages cache_aware/events 4" {
		t.Errorf("plan: got %q, want 5 configurations × 3 replica counts on uniform, 6 on zipf:1.2, 3 × 2 on chat, 2 × 2 on responses, 2 × 2 on messages, then 3 × 3 scenarios, 6 P/D rows and 4 overload rows", got)
	}
	var scen []string
	for _, c := range o.plan()[steady : steady+3*3] {
		scen = append(scen, fmt.Sprintf("%s %s %s %d", c.Scenario, c.Workload, c.spec(), c.Gateways))
	}
	if want := []string{"race uniform cache_aware/events 1", "race uniform cost/events 1", "race uniform least_load 1",
		"late uniform cache_aware/events 1", "late uniform cost/events 1", "late uniform least_load 1",
		"leave uniform cache_aware/events 1", "leave uniform cost/events 1", "leave uniform least_load 1"}; !cmp.Equal(scen, want) {
		t.Errorf("scenario rows: got %q, want %q", scen, want)
	}
	var pd []string
	for _, c := range o.plan()[steady+3*3 : steady+3*3+6] {
		pd = append(pd, fmt.Sprintf("%s %s %d", c.Workload, c.pdSpec(), c.Gateways))
	}
	if want := []string{"pd-long agg 1", "pd-long pd 1", "pd-chat agg 1", "pd-chat pd/pd-min-uncached-tokens=-1 1", "pd-chat pd 1",
		"pd-chat pd/decode-policy=cache_aware 1"}; !cmp.Equal(pd, want) {
		t.Errorf("P/D rows: got %q, want %q", pd, want)
	}
	if want, got := []string{"overload cache_aware/events/unloaded 1", "overload cache_aware/events 1", "overload cache_aware/events/queue 1",
		"overload cache_aware/events/queue-reserve1 1"}, got[steady+3*3+6:]; !cmp.Equal(got, want) {
		t.Errorf("overload rows: got %q, want %q", got, want)
	}
	o.chatConfigs, o.respConfigs, o.msgConfigs, o.scenarios, o.pdConfigs, o.pdChatConfigs, o.overload.on = nil, nil, nil, nil, nil, nil, false
	if n := len(o.plan()); n != 5*3+6 {
		t.Errorf("plan without chat configurations, scenarios and P/D rows: %d rows, want %d", n, 5*3+6)
	}
}

// TestMedianOf: a row is the median of its runs (the middle one, or the mean of the middle
// two), with the runs' min–max, summed errors and pooled worker shares.
func TestMedianOf(t *testing.T) {
	run := func(hit, ttft float64, errs int, keys, blocks int) result {
		return result{configuration: configuration{Policy: "cost"}, HitRate: fptr(hit), TTFTms: summary{Mean: ttft, P95: 2 * ttft}, Errors: errs,
			Workers: map[string]int{"a": 1}, IndexKeys: keys, IndexBlocks: blocks, ResultLine: fmt.Sprint("RESULT ", hit)}
	}
	row := medianOf([]result{run(0.60, 300, 0, 100, 110), run(0.64, 100, 1, 100, 130), run(0.62, 200, 2, 100, 120)})
	if row.hit() != 0.62 || row.TTFTms.Mean != 200 || row.TTFTms.P95 != 400 || row.Errors != 3 || row.Runs != 3 || row.Workers["a"] != 3 || row.duplicated() != 20 {
		t.Errorf("median row: got hit %v, TTFT mean %v p95 %v, errors %d, runs %d, workers %v, duplicated %d",
			row.hit(), row.TTFTms.Mean, row.TTFTms.P95, row.Errors, row.Runs, row.Workers, row.duplicated())
	}
	want := runSpread{Hit: [2]float64{0.60, 0.64}, TTFTMean: [2]float64{100, 300}, TTFTP95: [2]float64{200, 600}, Duplicated: [2]float64{10, 30}}
	if diff := cmp.Diff(&want, row.Spread); diff != "" {
		t.Errorf("spread (-want +got):\n%s", diff)
	}
	if len(row.ResultLines) != 3 {
		t.Errorf("result lines: got %q, want one per run", row.ResultLines)
	}
	if got := medianOf([]result{run(0.5, 100, 0, 0, 0), run(0.7, 300, 0, 0, 0)}); got.hit() != 0.6 || got.TTFTms.Mean != 200 {
		t.Errorf("even count: got hit %v, TTFT %v, want the means of the middle two", got.hit(), got.TTFTms.Mean)
	}
	if got := medianOf([]result{run(0.5, 100, 0, 0, 0)}); got.Spread != nil {
		t.Errorf("one run: got a spread %+v, want none", got.Spread)
	}
	if cell := hitCell(row); cell != "62.0% (60.0–64.0)" {
		t.Errorf("hit cell: got %q", cell)
	}
}

// TestScenarioSection: the scenarios' table sets each row against its clean row and says
// which of issue 21's targets the numbers meet.
func TestScenarioSection(t *testing.T) {
	o := benchDefaults
	row := func(c configuration, hit, mean, p95 float64, keys, blocks int) result {
		return result{configuration: c, HitRate: fptr(hit), TTFTms: summary{Mean: mean, P95: p95}, IndexKeys: keys, IndexBlocks: blocks}
	}
	ca := configuration{Policy: "cache_aware", Index: "events", Workload: "uniform", Gateways: 1}
	ll := configuration{Policy: "least_load", Index: "none", Workload: "uniform", Gateways: 1}
	at := func(c configuration, s string) configuration { c.Scenario = s; return c }
	results := []result{
		row(ca, 0.60, 100, 200, 1000, 1000),
		row(at(ca, scenarioRace), 0.59, 120, 250, 1000, 1010),
		row(at(ca, scenarioLate), 0.50, 150, 300, 1000, 1200),
		row(at(ll, scenarioLate), 0.40, 200, 280, 1000, 1500),
	}
	md := scenarioSection(&o, results)
	for _, want := range []string{"### Fleets that are not steady", "| cache_aware | events | race | 1 | 59.0% | 0.98× | 120 ms | 1.20× |",
		"cache_aware events race: hit 0.983 × clean (target ≥ 0.97: met), TTFT mean 1.20 × (target ≤ 1.3: met).",
		"cache_aware events late: hit 0.833 × clean (target ≥ 0.95: **missed**), TTFT p95 300 ms against least_load's 280 ms in the same scenario (target no worse: **missed**), duplicated blocks 20.0% of clean's (target ≤ 5.0%: **missed**)."} {
		if !strings.Contains(md, want) {
			t.Errorf("scenario section lacks %q:\n%s", want, md)
		}
	}
	if scenarioSection(&o, results[:1]) != "" {
		t.Error("a section without scenario rows")
	}
}

func TestParseScenarios(t *testing.T) {
	if got, err := parseScenarios("race, late,leave"); err != nil || !cmp.Equal(got, []string{"race", "late", "leave"}) {
		t.Errorf("got %q, %v", got, err)
	}
	if got, err := parseScenarios(""); err != nil || got != nil {
		t.Errorf("empty: got %q, %v", got, err)
	}
	if _, err := parseScenarios("race,storm"); err == nil {
		t.Error("unknown scenario accepted")
	}
}

func TestMarkdownAndTable(t *testing.T) {
	o := benchDefaults
	md, err := benchmarkMarkdown(&o, sampleResults(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Ideal hit rate of this workload: 63.0%", "Ideal hit rate of this workload: 81.0%", "| cache_aware | events | 4 |",
		"| cache_aware (smg) | events | 1 |", "### Skewed prefixes (`--prefix-dist zipf:1.2`", "× prefix_hash's", "vs least_load's",
		"benchmarks.png", "go run ./tools/bench bench", "Machine:", "--time-scale 0.5", "| 60.0% |",
		"### Chat (multi-turn sessions", "Ideal hit rate of this workload: 72.0%", "× its ideal 72.0%", "-chat-configs 'round_robin,cache_aware/approx,cache_aware/events'",
		"Chat workload (`cmd/loadgen --workload chat`",
		"### Responses (agent sessions on `/v1/responses`", "Ideal hit rate of this workload: 91.0%", "× its ideal 91.0%", "-responses-configs 'round_robin,cache_aware/events' -responses-replicas 1,4",
		"Responses workload (`cmd/loadgen --workload responses`", "--responses-store redis://",
		"### Messages (coding-agent sessions on Anthropic's `/v1/messages`)", "Ideal hit rate of this workload: 93.0%", "× its ideal 93.0%",
		"-messages-configs 'round_robin,cache_aware/events' -messages-replicas 1,4", "Messages workload (`cmd/loadgen --workload messages`", "--workload messages --num-requests 1200"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	var b strings.Builder
	printTable(&b, sampleResults()[:3])
	if !strings.Contains(b.String(), "63.0%") || strings.Count(b.String(), "\n") != 5 {
		t.Errorf("table:\n%s\nwant a header, 3 rows and the ideal row", b.String())
	}
	b.Reset()
	printTable(&b, sampleResults())
	if !strings.Contains(b.String(), "91.0%") || strings.Count(b.String(), "\n") != 1+35+5+9+6 {
		t.Errorf("table:\n%s\nwant a header, 35 rows and an ideal row per workload, then 9 scenario rows and 6 P/D rows", b.String())
	}
}

func TestNginxConfCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(t.Context(), []string{"nginx-conf", "-listen", "8080", "10.0.0.1:30000", "10.0.0.2:30000"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"listen 8080;", "server 10.0.0.1:30000", "server 10.0.0.2:30000", "proxy_buffering off;"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if err := run(t.Context(), []string{"nginx-conf"}, &out, &errb); err == nil {
		t.Error("nginx-conf without upstreams: got nil error")
	}
}

// TestDefaultsParse: make demo and make bench run their commands without flags, so each
// command's defaults must parse.
func TestDefaultsParse(t *testing.T) {
	for name, def := range map[string]options{"demo": demoDefaults, "bench": benchDefaults} {
		if _, err := parseOptions(name, nil, def, io.Discard); err != nil {
			t.Errorf("%s defaults: %v", name, err)
		}
	}
}
