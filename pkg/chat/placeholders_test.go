package chat

import (
	"encoding/json"
	"os"
	"testing"
)

// TestQwenVisionTokens: the placeholder counts of Qwen2/2.5/3-VL images equal the values the
// published smart_resize formula gives (tools/multimodal/mm_tokens.py, which writes the test
// data), rounding half to even as Python does.
func TestQwenVisionTokens(t *testing.T) {
	b, err := os.ReadFile("testdata/mm_tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Qwen json.RawMessage `json:"qwen_vl"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Patch     int  `json:"patch_size"`
		Merge     int  `json:"merge_size"`
		MinPixels int  `json:"min_pixels"`
		MaxPixels int  `json:"max_pixels"`
		Height    int  `json:"height"`
		Width     int  `json:"width"`
		Tokens    *int `json:"tokens"`
	}
	if err := json.Unmarshal(golden.Qwen, &cases); err != nil || len(cases) < 40 {
		t.Fatalf("%d cases, %v", len(cases), err)
	}
	for _, c := range cases {
		q := qwenVision{patch: c.Patch, merge: c.Merge, minPixels: c.MinPixels, maxPixels: c.MaxPixels}
		got, ok := q.imageTokens(c.Width, c.Height)
		if c.Tokens == nil {
			if ok {
				t.Errorf("%+v: got %d, want no count (aspect ratio over 200)", c, got)
			}
			continue
		}
		if !ok || got != *c.Tokens {
			t.Errorf("patch %d max %d, %dx%d: got %d (%v), want %d", c.Patch, c.MaxPixels, c.Width, c.Height, got, ok, *c.Tokens)
		}
	}
}

// TestMediaSizes: a data: URL image is sized from its header and counted with the model
// directory's processor config; a URL image and an unreadable header are not, and are still
// served.
func TestMediaSizes(t *testing.T) {
	r := vlRenderer(t, Options{})
	url, _ := pngDataURL(t, 32, 24, 1)
	body := `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + url + `"}},` +
		`{"type":"image_url","image_url":{"url":"https://x/a.png"}},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
	res, err := r.Render(mustParse(t, body))
	if err != nil {
		t.Fatal(err.Message)
	}
	m := res.Media
	if m[0].Width != 32 || m[0].Height != 24 || m[0].Tokens != 6 {
		t.Errorf("data: image: %dx%d, %d tokens; want 32x24, 6 (smart_resize to 84x56)", m[0].Width, m[0].Height, m[0].Tokens)
	}
	if m[1].Tokens != 0 || m[2].Tokens != 0 || m[2].Width != 0 {
		t.Errorf("unsized images: %+v %+v", m[1], m[2])
	}
	if v := newVisionCounter("gemma3", nil, 256); v == nil {
		t.Error("gemma3 with mm_tokens_per_image has no count")
	} else if n, ok := v.imageTokens(10, 10); !ok || n != 256 {
		t.Errorf("gemma3: %d", n)
	}
	if newVisionCounter("llava", nil, 0) != nil || newVisionCounter("qwen2_vl", []byte("{"), 0) != nil {
		t.Error("a count for an unknown family or an unreadable config")
	}
	q := readQwenVision([]byte(`{"patch_size":16,"size":{"shortest_edge":100,"longest_edge":2000}}`), qwenVision{patch: 14, merge: 2, minPixels: 1, maxPixels: 2})
	if q != (qwenVision{patch: 16, merge: 2, minPixels: 100, maxPixels: 2000}) {
		t.Errorf("processor config read as %+v", q)
	}
}
