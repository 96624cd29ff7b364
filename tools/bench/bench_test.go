package main

import (
	"bytes"
	"image/png"
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
	for _, gw := range []int{1, 2, 4} {
		for i, p := range policies {
			c := p
			c.Gateways = gw
			out = append(out, result{configuration: c, Requests: 100, HitRate: fptr(0.2 + 0.1*float64(i)), IdealHitRate: fptr(0.63),
				TTFTms: summary{Mean: 1500 - 400*float64(i), P50: 900}, ResultLine: "RESULT policy=" + c.Policy})
		}
	}
	return out
}

func TestPlotPNG(t *testing.T) {
	b, err := plotPNG(sampleResults(), plotPanels(sampleResults()))
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
	// The bars use the series colours: the events bar colour must appear somewhere.
	want := seriesColors[2]
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
	if _, err := plotPNG(nil, plotPanels(nil)); err == nil {
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

func TestGatewayOptions(t *testing.T) {
	for _, tc := range []struct {
		c            configuration
		policy, kvix string
	}{
		{configuration{Policy: "round_robin", Index: "none"}, "round_robin", ""},
		{configuration{Policy: "cache_aware", Index: "approx"}, "cache_aware", "off"},
		{configuration{Policy: "cache_aware", Index: "events"}, "cache_aware", "auto"},
	} {
		p, k := tc.c.gatewayOptions()
		if p != tc.policy || k != tc.kvix {
			t.Errorf("%+v: got %s/%s, want %s/%s", tc.c, p, k, tc.policy, tc.kvix)
		}
	}
}

func TestMarkdownAndTable(t *testing.T) {
	o := benchDefaults
	md, err := benchmarkMarkdown(&o, sampleResults(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Ideal hit rate of this workload: 63.0%", "| cache_aware | events | 4 |", "benchmarks.png", "go run ./tools/bench bench", "Machine:", "--time-scale 0.5"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	var b strings.Builder
	printTable(&b, sampleResults()[:3])
	if !strings.Contains(b.String(), "63.0%") || strings.Count(b.String(), "\n") != 5 {
		t.Errorf("table:\n%s\nwant a header, 3 rows and the ideal row", b.String())
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
