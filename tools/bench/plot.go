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

// seriesColors are the bar colours of the configurations, in configuration order.
var seriesColors = []color.RGBA{
	{0x9e, 0x9e, 0x9e, 0xff}, // round_robin
	{0x42, 0x85, 0xf4, 0xff}, // cache_aware approx
	{0xe6, 0x7c, 0x22, 0xff}, // cache_aware events
	{0x34, 0xa8, 0x53, 0xff},
	{0xa1, 0x42, 0xf4, 0xff},
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

// plotPNG draws one grouped bar chart per panel, side by side: groups are gateway replica
// counts, bars within a group are the configurations (round_robin, approx, events).
func plotPNG(results []result, panels []panelSpec) ([]byte, error) {
	var labels []string
	var gws []int
	for _, r := range results {
		if !slices.Contains(labels, r.label()) {
			labels = append(labels, r.label())
		}
		if !slices.Contains(gws, r.Gateways) {
			gws = append(gws, r.Gateways)
		}
	}
	slices.Sort(gws)
	if len(labels) == 0 || len(gws) == 0 {
		return nil, fmt.Errorf("bench: plot: no results")
	}
	const (
		panelW, panelH = 560, 420
		legendH        = 30
		scale          = 2
	)
	img := image.NewRGBA(image.Rect(0, 0, panelW*len(panels), panelH+legendH))
	fillRect(img, 0, 0, img.Bounds().Dx(), img.Bounds().Dy(), white)
	for pi, p := range panels {
		ox := pi * panelW
		left, right, top, bottom := ox+70, ox+panelW-20, 40, panelH-50
		drawText(img, ox+(panelW-textWidth(p.title, scale))/2, 10, p.title, scale, black)
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
		groupW := (right - left) / len(gws)
		barW := (groupW - 30) / len(labels)
		for gi, g := range gws {
			gx := left + gi*groupW + 15
			for li, l := range labels {
				for _, r := range results {
					if r.Gateways != g || r.label() != l {
						continue
					}
					v := p.value(r)
					fillRect(img, gx+li*barW+2, y(v), barW-4, bottom-y(v), seriesColors[li%len(seriesColors)])
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
	x := 20
	for li, l := range labels {
		fillRect(img, x, panelH+8, 16, 16, seriesColors[li%len(seriesColors)])
		drawText(img, x+22, panelH+9, l, scale, black)
		x += 22 + textWidth(l, scale) + 30
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("bench: plot: %w", err)
	}
	return buf.Bytes(), nil
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
