package chat

import (
	"slices"
	"strings"
	"testing"
)

// TestExpandQwenVL: an image the gateway can size is expanded as Qwen2.5-VL's processor
// replaces <|image_pad|> (the pad repeated smart_resize's count, 6 for 32x24 with this
// processor config, TestMediaSizes), and its range is keyed by its uuid; the exact prefix ends at
// the first item whose count or identifier is unknown, with the reason.
func TestExpandQwenVL(t *testing.T) {
	r := vlRenderer(t, Options{})
	a, _ := pngDataURL(t, 32, 24, 1)
	b, _ := pngDataURL(t, 32, 24, 2)
	part := func(url, uuid string) string {
		p := `{"type":"image_url","image_url":{"url":"` + url + `"}`
		if uuid != "" {
			p += `,"uuid":"` + uuid + `"`
		}
		return p + `}`
	}
	body := func(parts ...string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"Compare"},` + strings.Join(parts, ",") + `,{"type":"text","text":"please."}]}]}`
	}
	cases := []struct {
		name      string
		body      string
		exactItem int // the item the exact prefix ends at; -1: the whole prompt is exact
		stop      string
		lengths   []int
		ids       []string
	}{
		{"two sized images with uuids", body(part(a, "u-a"), part(b, "u-b")), -1, "", []int{6, 6}, []string{"u-a", "u-b"}},
		{"second without uuid", body(part(a, "u-a"), part(b, "")), 1, "no uuid", []int{6, 6}, []string{"u-a", ""}},
		{"first is a URL", body(part("https://x/a.png", "u-a"), part(b, "u-b")), 0, "not a data: URL", []int{1, 6}, []string{"u-a", "u-b"}},
		{"unreadable header", body(part("data:image/png;base64,AAAA", "u-a")), 0, "could not be read", []int{1}, []string{"u-a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := r.Render(mustParse(t, c.body))
			if err != nil {
				t.Fatal(err.Message)
			}
			e := r.Expand(&res, UUIDIdentity)
			// The reference: each expanded placeholder becomes a run of the pad id, the rest
			// of the rendered ids unchanged around it.
			var want []uint32
			prev := 0
			for k, at := range res.MediaAt {
				want = append(want, res.TokenIDs[prev:at]...)
				for range c.lengths[k] {
					want = append(want, vlImagePad)
				}
				prev = at + 1
			}
			want = append(want, res.TokenIDs[prev:]...)
			if !slices.Equal(e.IDs, want) {
				t.Fatalf("ids:\ngot  %v\nwant %v", e.IDs, want)
			}
			if len(e.Spans) != len(c.lengths) {
				t.Fatalf("got %d spans, want %d", len(e.Spans), len(c.lengths))
			}
			for k, sp := range e.Spans {
				if sp.Length != c.lengths[k] || sp.Identifier != c.ids[k] || e.IDs[sp.Offset] != vlImagePad || e.IDs[sp.Offset+sp.Length-1] != vlImagePad {
					t.Errorf("span %d: got %+v, want length %d identifier %q over pad tokens", k, sp, c.lengths[k], c.ids[k])
				}
				if sp.Offset > 0 && e.IDs[sp.Offset-1] == vlImagePad || sp.Offset+sp.Length < len(e.IDs) && e.IDs[sp.Offset+sp.Length] == vlImagePad {
					t.Errorf("span %d: %+v does not cover its whole run of pads", k, sp)
				}
			}
			wantExact := len(e.IDs)
			if c.exactItem >= 0 {
				wantExact = e.Spans[c.exactItem].Offset
			}
			if e.Exact != wantExact || !strings.Contains(e.Stop, c.stop) || (c.stop == "") != (e.Stop == "") {
				t.Errorf("exact %d (%q), want %d (%q)", e.Exact, e.Stop, wantExact, c.stop)
			}
		})
	}
}

// TestExpandUnknownFamily: a model whose expansion rule the gateway does not have keeps its
// rendered ids and is exact only before its first item.
func TestExpandUnknownFamily(t *testing.T) {
	r := vlRenderer(t, Options{})
	r.modelType = "llava"
	a, _ := pngDataURL(t, 32, 24, 1)
	res, err := r.Render(mustParse(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+a+`"},"uuid":"u"}]}]}`))
	if err != nil {
		t.Fatal(err.Message)
	}
	e := r.Expand(&res, UUIDIdentity)
	if !slices.Equal(e.IDs, res.TokenIDs) || e.Exact != res.MediaAt[0] || !strings.Contains(e.Stop, "llava") || e.Spans[0].Length != 1 {
		t.Errorf("got exact %d (%q), spans %+v; want the rendered ids, exact %d", e.Exact, e.Stop, e.Spans, res.MediaAt[0])
	}
}
