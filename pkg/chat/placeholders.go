package chat

import (
	"bytes"
	"encoding/json"
	"image"
	_ "image/gif" // image sizes from data: URL headers
	_ "image/jpeg"
	_ "image/png"
	"math"
)

// Placeholder counts: how many tokens the engine's processor puts in place of an image's
// placeholder, for the families where that is arithmetic on the image size and the processor
// config, or fixed (tools/multimodal/mm_tokens.py cites the formulas). Expand replaces
// placeholders by these counts (expand.go, gemma3.go).

// visionCounter counts an image's placeholder tokens; nil when the family is not known.
type visionCounter interface {
	imageTokens(width, height int) (int, bool)
}

// qwenVision is Qwen2VLImageProcessor's smart_resize (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).
type qwenVision struct{ patch, merge, minPixels, maxPixels int }

func (q qwenVision) imageTokens(w, h int) (int, bool) {
	if w <= 0 || h <= 0 || float64(max(h, w))/float64(min(h, w)) > 200 {
		return 0, false
	}
	f := float64(q.patch * q.merge)
	hb := math.RoundToEven(float64(h)/f) * f // Python's round
	wb := math.RoundToEven(float64(w)/f) * f
	if hb*wb > float64(q.maxPixels) {
		beta := math.Sqrt(float64(h) * float64(w) / float64(q.maxPixels))
		hb = max(f, math.Floor(float64(h)/beta/f)*f)
		wb = max(f, math.Floor(float64(w)/beta/f)*f)
	} else if hb*wb < float64(q.minPixels) {
		beta := math.Sqrt(float64(q.minPixels) / (float64(h) * float64(w)))
		hb = math.Ceil(float64(h)*beta/f) * f
		wb = math.Ceil(float64(w)*beta/f) * f
	}
	p := q.patch
	return (int(hb) / p) * (int(wb) / p) / (q.merge * q.merge), true
}

// fixedVision is a family with one count per image (Gemma 3's mm_tokens_per_image).
type fixedVision int

func (n fixedVision) imageTokens(int, int) (int, bool) { return int(n), n > 0 }

// newVisionCounter picks the counter of a model type from its processor config (raw
// preprocessor_config.json, nil when absent) and config.json's mm_tokens_per_image.
func newVisionCounter(modelType string, preprocessor []byte, tokensPerImage int) visionCounter {
	switch modelType {
	case "qwen2_vl", "qwen2_5_vl":
		return readQwenVision(preprocessor, qwenVision{patch: 14, merge: 2, minPixels: 56 * 56, maxPixels: 28 * 28 * 16384})
	case "qwen3_vl", "qwen3_vl_moe":
		return readQwenVision(preprocessor, qwenVision{patch: 16, merge: 2, minPixels: 65536, maxPixels: 16777216})
	case "gemma3":
		return readGemmaVision(preprocessor, tokensPerImage)
	}
	return nil
}

// readGemmaVision is Gemma 3's count: image_seq_length tokens an image (the processor's,
// from processor_config.json; else config.json's mm_tokens_per_image, which the published
// models set equal). With pan and scan on (do_pan_and_scan in the preprocessor config) the
// count and the replacement text depend on the image's crops, which the gateway does not
// compute: nil.
func readGemmaVision(preprocessor []byte, n int) visionCounter {
	var c struct {
		PanAndScan *bool `json:"do_pan_and_scan"`
	}
	if len(preprocessor) > 0 && json.Unmarshal(preprocessor, &c) != nil || c.PanAndScan != nil && *c.PanAndScan || n <= 0 {
		return nil
	}
	return fixedVision(n)
}

// readQwenVision overrides q's defaults with the processor config's patch_size, merge_size and
// min_pixels/max_pixels (or size.shortest_edge/longest_edge, the newer spelling).
func readQwenVision(b []byte, q qwenVision) visionCounter {
	var c struct{ Patch, Merge, Min, Max *int }
	var raw struct {
		Patch *int `json:"patch_size"`
		Merge *int `json:"merge_size"`
		Min   *int `json:"min_pixels"`
		Max   *int `json:"max_pixels"`
		Size  *struct {
			ShortestEdge *int `json:"shortest_edge"`
			LongestEdge  *int `json:"longest_edge"`
		} `json:"size"`
	}
	if len(b) > 0 && json.Unmarshal(b, &raw) != nil {
		return nil // a config the gateway cannot read: the count is unknown
	}
	c.Patch, c.Merge, c.Min, c.Max = raw.Patch, raw.Merge, raw.Min, raw.Max
	if raw.Size != nil {
		if c.Min == nil {
			c.Min = raw.Size.ShortestEdge
		}
		if c.Max == nil {
			c.Max = raw.Size.LongestEdge
		}
	}
	for _, p := range []struct {
		src *int
		dst *int
	}{{c.Patch, &q.patch}, {c.Merge, &q.merge}, {c.Min, &q.minPixels}, {c.Max, &q.maxPixels}} {
		if p.src != nil {
			*p.dst = *p.src
		}
	}
	if q.patch <= 0 || q.merge <= 0 || q.minPixels < 0 || q.maxPixels <= 0 {
		return nil
	}
	return q
}

// sizeMedia reads each image's size from its data: URL header and counts its placeholder
// tokens where the family's rule is known (for a fixed count, Gemma 3's, whatever the image);
// an image the gateway cannot count keeps 0.
func (r *Renderer) sizeMedia(items []MediaItem) {
	for i := range items {
		it := &items[i]
		if it.Modality != "image" || it.Type == "image_embeds" {
			continue
		}
		if it.Data != nil {
			if cfg, _, err := image.DecodeConfig(bytes.NewReader(it.Data)); err == nil {
				it.Width, it.Height = cfg.Width, cfg.Height
			}
		}
		if r.vision != nil {
			it.Tokens, _ = r.vision.imageTokens(it.Width, it.Height)
		}
	}
}
