package main

import (
	"fmt"
	"sort"
	"testing"

	"github.com/ardanlabs/jinja"
)

func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func runBench(tmpls []tmpl, convs []conv, runs int) {
	var t tmpl
	for _, x := range tmpls {
		if x.name == "qwen3" {
			t = x
		}
	}
	var c conv
	for _, x := range convs {
		if x.id == "bench-10msg-4k" {
			c = x
		}
	}
	gold := loadGolden("qwen3")[c.id]
	rv := must(buildVars(t.src, templateNames(t.src), t.special, c.req, gold.Format))

	a := must(compileArdan(t.src)).(*ardan)
	g := must(compileGonja(t.src)).(*gonjaT)
	// correctness of the benchmarked render, for the record
	for name, r := range map[string]renderer{"ardanlabs": a, "gonja": g} {
		out, err := r.render(rv)
		fmt.Printf("%s: bench case output %d bytes, err=%v, exact=%v (golden %d bytes)\n", name, len(out), err, err == nil && out == *gold.Prompt, len(*gold.Prompt))
	}

	aVals := ardanValues(rv)
	gCtx := gonjaContext(rv)
	cases := []struct {
		name string
		fn   func(b *testing.B)
	}{
		{"ardanlabs RenderValues (values pre-built)", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := a.t.RenderValues(aVals); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"ardanlabs build values + RenderValues", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := a.t.RenderValues(ardanValues(rv)); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"gonja ExecuteToString (context pre-built)", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := g.t.ExecuteToString(gCtx); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"gonja build context + ExecuteToString", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := g.t.ExecuteToString(gonjaContext(rv)); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"ardanlabs Compile (qwen3)", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := jinja.Compile(t.src); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"gonja compile (qwen3)", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := compileGonja(t.src); err != nil {
					b.Fatal(err)
				}
			}
		}},
	}
	for _, bc := range cases {
		var ns, allocs, bytes []float64
		var n int
		for r := 0; r < runs; r++ {
			res := testing.Benchmark(bc.fn)
			if res.N == 0 {
				fmt.Printf("%s: benchmark failed\n", bc.name)
				break
			}
			n += res.N
			ns = append(ns, float64(res.NsPerOp()))
			allocs = append(allocs, float64(res.AllocsPerOp()))
			bytes = append(bytes, float64(res.AllocedBytesPerOp()))
		}
		if len(ns) == 0 {
			continue
		}
		mn, mx := ns[0], ns[0]
		for _, x := range ns {
			mn, mx = min(mn, x), max(mx, x)
		}
		fmt.Printf("%-45s median %9.1f µs/op  (min %.1f, max %.1f over %d testing.Benchmark runs, %d iterations)  %6.0f allocs/op  %8.0f B/op\n",
			bc.name, median(ns)/1e3, mn/1e3, mx/1e3, len(ns), n, median(allocs), median(bytes))
	}
}
