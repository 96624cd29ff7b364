package chat

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"net/http"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/internal/testutil"
)

// pngDataURL is a data: URL of a w×h PNG whose pixels depend on seed.
func pngDataURL(t testing.TB, w, h int, seed byte) (string, []byte) {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = seed + byte(i)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes()), b.Bytes()
}

func vlRenderer(t testing.TB, opts Options) *Renderer {
	t.Helper()
	opts.Tokenizer = loadTok(t, "qwen3")
	r, err := New(testutil.VLModelDir(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const vlImagePad = 151655

// TestMediaRenderQwenVL: an image part reaches the template as {"type": "image"}, so the
// Qwen2.5-VL template prints its placeholder where the part was; the ids are exact up to the
// <|image_pad|> token, and the item is hashed by its bytes (or its uuid when given).
func TestMediaRenderQwenVL(t *testing.T) {
	r := vlRenderer(t, Options{})
	if !r.Multimodal() {
		t.Fatal("a directory with vision_config and preprocessor_config.json is not detected as multimodal")
	}
	url, data := pngDataURL(t, 4, 3, 7)
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"` + url + `"}}]},` +
		`{"role":"assistant","content":"A cat."},{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/b.jpg"},"uuid":"img-b"},"and this?"]}]}`
	res, err := r.Render(mustParse(t, body))
	if err != nil {
		t.Fatal(err.Message)
	}
	want := "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
		"<|im_start|>user\nWhat is this?<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n" +
		"<|im_start|>assistant\nA cat.<|im_end|>\n" +
		"<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>and this?<|im_end|>\n<|im_start|>assistant\n"
	if res.Prompt != want {
		t.Fatalf("prompt:\n%q\nwant\n%q", res.Prompt, want)
	}
	if len(res.Media) != 2 {
		t.Fatalf("media: %+v", res.Media)
	}
	a, b := res.Media[0], res.Media[1]
	if a.Modality != "image" || a.Hash != xxh3.Hash(data) || a.MediaType != "image/png" || !bytes.Equal(a.Data, data) || a.Message != 0 || a.Part != 1 {
		t.Fatalf("first item: %+v", a)
	}
	if !b.HasUUID || b.UUID != "img-b" || b.Hash != xxh3.HashString("uuid:img-b") || b.URL != "https://example.com/b.jpg" {
		t.Fatalf("second item: %+v", b)
	}
	first := -1
	for i, id := range res.TokenIDs {
		if id == vlImagePad {
			first = i
			break
		}
	}
	if first <= 0 || res.Exact != first {
		t.Fatalf("exact %d, first <|image_pad|> at %d", res.Exact, first)
	}
	if len(res.MediaAt) != 2 || res.MediaAt[0] != first || res.MediaAt[1] <= first || res.TokenIDs[res.MediaAt[1]] != vlImagePad {
		t.Fatalf("placeholders at %v", res.MediaAt)
	}
	// Without media every id is exact.
	res, err = r.Render(mustParse(t, `{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil || res.Exact != len(res.TokenIDs) || len(res.Media) != 0 {
		t.Fatalf("text request: exact %d of %d, media %v, %v", res.Exact, len(res.TokenIDs), res.Media, err)
	}
}

// TestMediaStringFormat: with a string-format template (here the tokenizer's Qwen3 template,
// which the request's tools select), vLLM puts the model's placeholders in front of the
// message's text, one a line; a model whose placeholder text the gateway does not know is
// served unrendered.
func TestMediaStringFormat(t *testing.T) {
	r := vlRenderer(t, Options{})
	url, _ := pngDataURL(t, 2, 2, 1)
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image_url","image_url":{"url":"` + url + `"}},{"type":"text","text":"briefly."}]}],` +
		`"tools":[{"type":"function","function":{"name":"f"}}]}`
	res, err := r.Render(mustParse(t, body))
	if err != nil {
		t.Fatal(err.Message)
	}
	if !strings.Contains(res.Prompt, "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>\nDescribe\nbriefly.<|im_end|>") {
		t.Fatalf("prompt %q", res.Prompt)
	}
	lit := literalRenderer(t, "{% for m in messages %}{{ m.content }}|{% endfor %}", Options{Multimodal: MultimodalOn, ModelType: "qwen2_5_vl"})
	got, err := lit.RenderText(mustParse(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+url+`"}},{"type":"video_url","video_url":{"url":"https://x/v.mp4"}},{"type":"text","text":""}]}]}`))
	if err != nil || got != "<|vision_start|><|image_pad|><|vision_end|>\n<|vision_start|><|video_pad|><|vision_end|>|" {
		t.Fatalf("got %q, %v", got, err)
	}
	// A placeholder already in the text counts; one too many is vLLM's error.
	got, err = lit.RenderText(mustParse(t, `{"messages":[{"role":"user","content":[{"type":"text","text":"see <|vision_start|><|image_pad|><|vision_end|>"},{"type":"image_url","image_url":{"url":"`+url+`"}}]}]}`))
	if err != nil || got != "see <|vision_start|><|image_pad|><|vision_end|>|" {
		t.Fatalf("got %q, %v", got, err)
	}
	_, err = lit.RenderText(mustParse(t, `{"messages":[{"role":"user","content":"<|vision_start|><|image_pad|><|vision_end|>"},{"role":"user","content":[{"type":"text","text":"<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>"},{"type":"image_url","image_url":{"url":"`+url+`"}}]}]}`))
	if err == nil || !strings.HasPrefix(err.Message, "Found more '<|vision_start|><|image_pad|><|vision_end|>' placeholders") {
		t.Fatalf("extra placeholder: %v", err)
	}
	unknown := literalRenderer(t, "{% for m in messages %}{{ m.content }}{% endfor %}", Options{Multimodal: MultimodalOn, ModelType: "some_vlm"})
	res, err = unknown.Render(mustParse(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+url+`"}}]}]}`))
	if err != nil || res.Unrendered == "" || res.Prompt != "" || len(res.Media) != 1 {
		t.Fatalf("unknown placeholder: %+v, %v", res, err)
	}
}

// TestMediaOpenAIFormatParts: every media part type and the typeless and uuid forms vLLM
// reads become {"type": modality}; a tool message with media keeps its list.
func TestMediaOpenAIFormatParts(t *testing.T) {
	r := literalRenderer(t, "{% for m in messages %}{{ m.role }}:{% if m.content is string %}S={{ m.content }}{% else %}{% for c in m.content %}[{{ c.type }}{% if c.text is defined %}={{ c.text }}{% endif %}]{% endfor %}{% endif %};{% endfor %}",
		Options{Multimodal: MultimodalOn})
	url, _ := pngDataURL(t, 1, 1, 0)
	body := `{"messages":[{"role":"user","content":[` +
		`{"type":"image_url","image_url":{"url":"` + url + `","detail":"high"}},` +
		`{"type":"input_image","image_url":"https://x/a.png"},` +
		`{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}},` +
		`{"type":"audio_url","audio_url":{"url":"https://x/a.wav"}},` +
		`{"type":"video_url","video_url":{"url":"https://x/v.mp4"}},` +
		`{"image_url":{"url":"https://x/typeless.png"}},` +
		`{"type":"text","text":"t","uuid":"u1","image_url":null},` +
		`{"type":"image_url","uuid":"cached-only"},` +
		`"s"]},{"role":"tool","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x/t.png"}}]},` +
		`{"role":"tool","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`
	res, err := r.Render(mustParse(t, body))
	if err != nil {
		t.Fatal(err.Message)
	}
	want := "user:[image][image][audio][audio][video][image][image][image][text=s];tool:[text=a][image];tool:S=a\nb;"
	if res.Prompt != want {
		t.Fatalf("prompt %q, want %q", res.Prompt, want)
	}
	mods := ""
	for _, m := range res.Media {
		mods += m.Modality[:1]
	}
	if mods != "iiaaviiii" {
		t.Fatalf("media modalities %q", mods)
	}
	if u := res.Media[2].URL; u != "data:audio/wav;base64,UklGRg==" {
		t.Fatalf("input_audio URL %q", u)
	}
}

// TestMediaBadInput: what the engine refuses before fetching is refused with its message, and
// a text-only model keeps its refusal.
func TestMediaBadInput(t *testing.T) {
	r := literalRenderer(t, "{% for m in messages %}{% for c in m.content %}{{ c.type }}{% endfor %}{% endfor %}",
		Options{Multimodal: MultimodalOn, MediaLimits: map[string]int{"image": 2, "video": 0}, MaxMediaBytes: 64})
	img := func(u string) string { return `{"type":"image_url","image_url":{"url":"` + u + `"}}` }
	for _, tt := range []struct {
		name, parts, want string
		status            int
	}{
		{"no comma", img("data:image/png;base64"), "malformed data URL", 400},
		{"no encoding", img("data:image/png,abc"), "malformed data URL", 400},
		{"not base64 encoding", img("data:image/png;utf8,abc"), "Only base64 data URLs are supported for now.", 400},
		{"bad base64", img("data:image/png;base64,@@@@"), "malformed data URL: the data is not valid base64", 400},
		{"oversized", img("data:image/png;base64," + strings.Repeat("A", 200)), "a data URL may carry at most 64 bytes", http.StatusRequestEntityTooLarge},
		{"scheme", img("ftp://x/a.png"), "The URL must be either a HTTP, data or file URL.", 400},
		{"too many images", img("https://x/1") + "," + img("https://x/2") + "," + img("https://x/3"), "At most 2 image(s) may be provided in one prompt.", 400},
		{"limit zero", `{"type":"video_url","video_url":{"url":"https://x/v"}}`, "At most 0 video(s) may be provided in one prompt.", 400},
		{"missing url", `{"type":"image_url","image_url":{}}`, ".image_url.url must be a string", 400},
		{"null media", `{"type":"image_url","image_url":null}`, "image_url is required", 400},
		{"no type", `{"foo":1}`, "Missing 'type' field in multimodal part.", 400},
		{"unknown type", `{"type":"hologram"}`, "Unsupported chat content part type: 'hologram'", 400},
		{"bad input_audio", `{"type":"input_audio","input_audio":{"data":1}}`, "must be an object with string data and format", 400},
	} {
		_, err := r.Render(mustParse(t, `{"messages":[{"role":"user","content":[`+tt.parts+`]}]}`))
		if err == nil || !strings.Contains(err.Message, tt.want) || err.Status != tt.status {
			t.Errorf("%s: got %+v, want %d %q", tt.name, err, tt.status, tt.want)
		}
	}
	off := vlRenderer(t, Options{Multimodal: MultimodalOff})
	_, err := off.Render(mustParse(t, `{"messages":[{"role":"user","content":[`+img("https://x/a.png")+`]}]}`))
	if err == nil || err.Message != `content part type "image_url" needs a multimodal model; this model takes text only` {
		t.Fatalf("--multimodal off: %v", err)
	}
	if _, err := New(testutil.VLModelDir(t), Options{Tokenizer: loadTok(t, "qwen3"), Multimodal: "maybe"}); err == nil {
		t.Fatal("a bad --multimodal value was accepted")
	}
}

func TestParseMediaLimits(t *testing.T) {
	got, err := ParseMediaLimits(`{"image": 3, "video": {"count": 1, "num_frames": 8}}`)
	if err != nil || got["image"] != 3 || got["video"] != 1 || len(got) != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{`{"image": -1}`, `[1]`, `{"image": "x"}`} {
		if _, err := ParseMediaLimits(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
