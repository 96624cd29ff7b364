package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"slices"
)

// seriesColors are the bar colours of the configurations, in order of first appearance in the
// results (the same configuration has the same colour in every workload's row).
var seriesColors = []color.RGBA{
	{0x9e, 0x9e, 0x9e, 0xff},
	{0x42, 0x85, 0xf4, 0xff},
	{0xe6, 0x7c, 0x22, 0xff},
	{0x34, 0xa8, 0x53, 0xff},
	{0xa1, 0x42, 0xf4, 0xff},
	{0x00, 0x96, 0x88, 0xff},
	{0x79, 0x55, 0x48, 0xff},
	{0xf4, 0xb4, 0x00, 0xff},
}

var (
	black = color.RGBA{0, 0, 0, 0xff}
	grey  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	red   = color.RGBA{0xd0, 0x21, 0x21, 0xff}
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// panelSpec is one bar chart of the figure: a value per (configuration label, gateway count).
type panelSpec struct {
	title string
	value func(result) float64
	// format renders a tick or bar value.
	format func(float64) string
	// refLine, when not NaN, is drawn as a horizontal line labelled refLabel.
	refLine  float64
	refLabel string
}

// plotPNG draws the figure: one row per workload (in order of first appearance), each row
// one grouped bar chart per panel of panelsFor(that workload's results), side by side; groups
// are gateway replica counts, bars within a group the configurations. A legend of every
// configuration ends the figure.
func plotPNG(results []result, panelsFor func([]result) []panelSpec) ([]byte, error) {
	var labels, workloads []string
	for _, r := range results {
		if !slices.Contains(labels, r.label()) {
			labels = append(labels, r.label())
		}
		if !slices.Contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
	}
	if len(labels) == 0 {
		return nil, fmt.Errorf("bench: plot: no results")
	}
	const (
		panelW, panelH = 560, 420
		scale          = 2
	)
	colorOf := func(l string) color.RGBA { return seriesColors[slices.Index(labels, l)%len(seriesColors)] }
	cols := 0
	rows := make([][]result, len(workloads))
	for i, w := range workloads {
		for _, r := range results {
			if r.Workload == w {
				rows[i] = append(rows[i], r)
			}
		}
		cols = max(cols, len(panelsFor(rows[i])))
	}
	// The legend wraps to as many lines as the labels need.
	legendLines, x := 1, 20
	for _, l := range labels {
		w := 22 + textWidth(l, scale) + 30
		if x+w > panelW*cols && x > 20 {
			legendLines, x = legendLines+1, 20
		}
		x += w
	}
	legendH := 8 + 26*legendLines
	img := image.NewRGBA(image.Rect(0, 0, panelW*cols, panelH*len(workloads)+legendH))
	fillRect(img, 0, 0, img.Bounds().Dx(), img.Bounds().Dy(), white)
	for wi, rowResults := range rows {
		for pi, p := range panelsFor(rowResults) {
			drawPanel(img, pi*panelW, wi*panelH, panelW, panelH, scale, p, rowResults, labels, colorOf)
		}
	}
	x, y := 20, panelH*len(workloads)+8
	for _, l := range labels {
		w := 22 + textWidth(l, scale) + 30
		if x+w > panelW*cols && x > 20 {
			x, y = 20, y+26
		}
		fillRect(img, x, y, 16, 16, colorOf(l))
		drawText(img, x+22, y+1, l, scale, black)
		x += w
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	return buf.Bytes(), nil
}

// drawPanel draws one grouped bar chart with its top-left corner at (ox, oy).
func drawPanel(img *image.RGBA, ox, oy, panelW, panelH, scale int, p panelSpec, results []result, labels []string, colorOf func(string) color.RGBA) {
	var gws []int
	var present []string
	for _, l := range labels {
		for _, r := range results {
			if r.label() == l && !slices.Contains(present, l) {
				present = append(present, l)
			}
		}
	}
	for _, r := range results {
		if !slices.Contains(gws, r.Gateways) {
			gws = append(gws, r.Gateways)
		}
	}
	slices.Sort(gws)
	left, right, top, bottom := ox+70, ox+panelW-20, oy+40, oy+panelH-50
	drawText(img, ox+(panelW-textWidth(p.title, scale))/2, oy+10, p.title, scale, black)
	maxV := 0.0
	for _, r := range results {
		maxV = math.Max(maxV, p.value(r))
	}
	if !math.IsNaN(p.refLine) {
		maxV = math.Max(maxV, p.refLine)
	}
	if maxV <= 0 {
		maxV = 1
	}
	step := niceStep(maxV / 5)
	maxV = math.Ceil(maxV/step) * step
	y := func(v float64) int { return bottom - int(math.Round(v/maxV*float64(bottom-top))) }
	for t := 0.0; t <= maxV+step/2; t += step {
		yy := y(t)
		fillRect(img, left, yy, right-left, 1, grey)
		lbl := p.format(t)
		drawText(img, left-8-textWidth(lbl, 1)*scale/1, yy-7, lbl, scale, black)
	}
	fillRect(img, left, top, 1, bottom-top, black)
	fillRect(img, left, bottom, right-left, 1, black)
	if len(gws) == 0 {
		return
	}
	groupW := (right - left) / len(gws)
	barW := (groupW - 30) / max(len(present), 1)
	for gi, g := range gws {
		gx := left + gi*groupW + 15
		for li, l := range present {
			for _, r := range results {
				if r.Gateways != g || r.label() != l {
					continue
				}
				v := p.value(r)
				fillRect(img, gx+li*barW+2, y(v), barW-4, bottom-y(v), colorOf(l))
			}
		}
		gl := fmt.Sprintf("%d GW", g)
		drawText(img, left+gi*groupW+(groupW-textWidth(gl, scale))/2, bottom+10, gl, scale, black)
	}
	if !math.IsNaN(p.refLine) {
		yy := y(p.refLine)
		for x := left; x < right; x += 12 {
			fillRect(img, x, yy-1, 7, 3, red)
		}
		drawText(img, right-textWidth(p.refLabel, scale)-4, yy-20, p.refLabel, scale, red)
	}
	drawText(img, ox+(panelW-textWidth("GATEWAY REPLICAS", scale))/2, bottom+32, "GATEWAY REPLICAS", scale, black)
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}
