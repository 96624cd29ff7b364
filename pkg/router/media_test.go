package router

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

func vlChat(t *testing.T) *chat.Renderer {
	t.Helper()
	dir := testutil.VLModelDir(t)
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pngURL(t *testing.T, seed byte) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 8, 8))
	for i := range img.Pix {
		img.Pix[i] = seed * byte(i)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// imageChat is a chat body: a long system prompt, then a user turn with text and an image, and
// optionally more turns.
func imageChat(url string, more ...string) string {
	msgs := []any{
		map[string]any{"role": "system", "content": strings.Repeat("You describe pictures for people who cannot see them. ", 6)},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "What is in this picture? Please answer in detail."},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}},
			map[string]any{"type": "text", "text": strings.Repeat("Name the colours, the shapes and where they are. ", 4)},
		}},
	}
	for i, c := range more {
		role := "assistant"
		if i%2 == 1 {
			role = "user"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": c})
	}
	b, _ := json.Marshal(map[string]any{"model": "test-model", "messages": msgs, "max_tokens": 4})
	return string(b)
}

// TestChatMediaHTTP: an image request to a multimodal model is served by an http:// worker with
// the client's messages unchanged; its repeat and its next turn land where it was served by
// affinity over the whole prompt, image included, while the same text with another image
// matches only the exact prefix before the image; /debug/route says where exactness stops.
func TestChatMediaHTTP(t *testing.T) {
	a, b := newFakeWorker(t, "wa"), newFakeWorker(t, "wb")
	g := newTestGateway(t, testConfig{Chat: vlChat(t)}, a.url(), b.url())
	img1, img2 := pngURL(t, 3), pngURL(t, 5)
	first := imageChat(img1)
	resp, out := g.postChat(t, first)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", resp.StatusCode, out)
	}
	var got map[string]any
	select {
	case got = <-a.reqs:
	case got = <-b.reqs:
	}
	var sent map[string]any
	_ = json.Unmarshal([]byte(first), &sent)
	gm, _ := json.Marshal(got["messages"])
	sm, _ := json.Marshal(sent["messages"])
	if !bytes.Equal(gm, sm) {
		t.Fatalf("the worker got other messages:\n%s\nwant\n%s", gm, sm)
	}
	w1 := resp.Header.Get(pipeline.HeaderWorker)
	var prompt, exact int
	{
		_, dbg := g.do(t, http.MethodPost, "/debug/route", first, "")
		var e pipeline.RouteExplanation
		if err := json.Unmarshal([]byte(dbg), &e); err != nil || e.Media == nil {
			t.Fatalf("/debug/route: %s", dbg)
		}
		if e.Media.Items != 1 || e.Media.ExactTokens <= 16 || e.Media.ExactTokens/16+2 > e.PromptTokens/16 || !strings.Contains(e.Media.Note, "affinity") {
			t.Fatalf("/debug/route media: %+v of %d tokens", e.Media, e.PromptTokens)
		}
		prompt, exact = e.PromptTokens, e.Media.ExactTokens
	}
	blocks := func(r *http.Response) int { n, _ := strconv.Atoi(r.Header.Get(pipeline.HeaderMatchedBlocks)); return n }
	resp, out = g.postChat(t, first)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderWorker) != w1 || blocks(resp) != prompt/16 {
		t.Fatalf("repeat: %d to %s with %s blocks (want %s, %d): %s", resp.StatusCode, resp.Header.Get(pipeline.HeaderWorker), resp.Header.Get(pipeline.HeaderMatchedBlocks), w1, prompt/16, out)
	}
	resp, _ = g.postChat(t, imageChat(img1, "A red square on white.", "Which shade of red?"))
	if resp.Header.Get(pipeline.HeaderWorker) != w1 || blocks(resp) < prompt/16 {
		t.Fatalf("next turn: to %s with %s blocks, want %s with at least %d", resp.Header.Get(pipeline.HeaderWorker), resp.Header.Get(pipeline.HeaderMatchedBlocks), w1, prompt/16)
	}
	resp, _ = g.postChat(t, imageChat(img2))
	if blocks(resp) != exact/16 {
		t.Fatalf("another image: %s blocks matched, want the exact prefix's %d", resp.Header.Get(pipeline.HeaderMatchedBlocks), exact/16)
	}
	// Bad media is the engine's 400, never forwarded.
	before := len(a.reqs) + len(b.reqs)
	resp, out = g.postChat(t, imageChat("data:image/png;base64,%%%"))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(out, "not valid base64") {
		t.Fatalf("bad data URL: %d %s", resp.StatusCode, out)
	}
	if len(a.reqs)+len(b.reqs) != before {
		t.Fatal("a refused request reached a worker")
	}
}

// TestChatMediaGRPC: grpc:// workers cannot take media: a request with an image is refused
// naming why when only they serve the model, and goes to the http:// worker in a mixed pool.
func TestChatMediaGRPC(t *testing.T) {
	f := newFakeVLLM()
	f.gen = scriptedVLLM("x")
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	r := vlChat(t)
	g := newTestGateway(t, testConfig{Chat: r}, "url=grpc://"+addr+",runtime=vllm")
	resp, out := g.postChat(t, imageChat(pngURL(t, 1)))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(out, "media_over_grpc") {
		t.Fatalf("got %d %s", resp.StatusCode, out)
	}
	hw := newFakeWorker(t, "h")
	g2 := newTestGateway(t, testConfig{Chat: r, Policy: &fixedPolicy{}}, "url=grpc://"+addr+",runtime=vllm", hw.url())
	for range 3 {
		resp, out = g2.postChat(t, imageChat(pngURL(t, 1)))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(pipeline.HeaderWorker) != hw.url() {
			t.Fatalf("mixed pool: %d from %s: %s", resp.StatusCode, resp.Header.Get(pipeline.HeaderWorker), out)
		}
	}
}
