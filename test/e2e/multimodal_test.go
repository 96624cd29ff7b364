//go:build e2e

package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// mmTurn is one request as test/e2e/npm/multimodal.mjs reports it.
type mmTurn struct {
	Content       string `json:"content"`
	FinishReason  string `json:"finish_reason"`
	Worker        string `json:"worker"`
	Reason        string `json:"reason"`
	MatchedBlocks int    `json:"matched_blocks"`
	PromptTokens  int    `json:"prompt_tokens"`
	CachedTokens  int    `json:"cached_tokens"`
}

type mmReport struct {
	First      mmTurn `json:"first"`
	Repeat     mmTurn `json:"repeat"`
	NextTurn   mmTurn `json:"next_turn"`
	OtherImage mmTurn `json:"other_image"`
	Stream     struct {
		Chunks       int    `json:"chunks"`
		FirstRole    string `json:"first_role"`
		Content      string `json:"content"`
		FinishReason string `json:"finish_reason"`
		Usage        *usage `json:"usage"`
	} `json:"stream"`
	TextModel struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
	} `json:"text_model"`
	DebugRoute struct {
		PromptTokens int `json:"prompt_tokens"`
		Media        *struct {
			Items       int    `json:"items"`
			ExactTokens int    `json:"exact_tokens"`
			ExactBlocks int    `json:"exact_blocks"`
			Note        string `json:"note"`
		} `json:"media"`
	} `json:"debug_route"`
}

// e2ePNG is a data: URL of a small PNG of one colour.
func e2ePNG(t *testing.T, c color.RGBA) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 32, 24))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = c.R, c.G, c.B, c.A
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// TestMultimodalChat is issue 24's serving path end to end with the official openai npm client:
// a gateway whose --model-path is a Qwen2.5-VL-style directory (detected as multimodal) in front
// of three event-publishing simulators over HTTP serves an image_url (data: URL) chat, plain and
// streaming; the repeat and the conversation's next turn land on the first turn's worker with the
// engine's cache covering the image, the same text with another image matches only the exact
// prefix before the image, and /debug/route says so; a text-only model's gateway answers 400.
func TestMultimodalChat(t *testing.T) {
	vl := testutil.VLModelDir(t)
	l := &harness.Launcher{Bin: bins, Tokenizer: filepath.Join(vl, "tokenizer.json"), Model: "qwen2.5-vl-sim", LogDir: t.TempDir(), StartTimeout: startTimeout}
	replies := replyFile(t, plainReplies()...)
	var specs []string
	for i := range 3 {
		s := startSim(t, l, harness.SimOptions{Name: "vl-sim-" + string(rune('a'+i)), Events: true, Args: []string{"--reply-file", replies, "--reasoning-parser", "qwen3"}})
		specs = append(specs, s.WorkerSpec(true))
	}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-vl", Workers: specs})
	tl := newLauncher(t)
	text := startGateway(t, tl, harness.GatewayOptions{Name: "gateway-text", Workers: []string{startSim(t, tl, harness.SimOptions{Name: "text-sim", Args: []string{"--reply-file", replies}}).WorkerSpec(false)}})

	stdout, _ := runNode(t, "multimodal.mjs", gw.URL+"/v1", gw.AdminURL, l.Model, e2ePNG(t, color.RGBA{200, 30, 30, 255}), e2ePNG(t, color.RGBA{30, 30, 200, 255}), text.URL+"/v1", testModel)
	t.Logf("multimodal.mjs: %s", stdout)
	var r mmReport
	if err := json.Unmarshal(stdout, &r); err != nil {
		t.Fatalf("multimodal.mjs output: %v", err)
	}
	f := r.First
	if !isPlainAnswer(f.Content) || f.FinishReason != "stop" || f.Worker == "" || f.PromptTokens < 100 {
		t.Errorf("first: %+v", f)
	}
	if r.Stream.FirstRole != "assistant" || !isPlainAnswer(r.Stream.Content) || r.Stream.FinishReason != "stop" || r.Stream.Usage == nil ||
		r.Stream.Usage.PromptTokens != f.PromptTokens || r.Stream.Usage.PromptTokensDetails == nil || r.Stream.Usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Errorf("stream: %+v (usage %+v)", r.Stream, r.Stream.Usage)
	}
	dr := r.DebugRoute
	if dr.Media == nil || dr.Media.Items != 1 || dr.Media.ExactTokens <= 0 || dr.Media.ExactTokens >= dr.PromptTokens || !strings.Contains(dr.Media.Note, "exactly") {
		t.Fatalf("/debug/route media: %+v", dr.Media)
	}
	// The image sits between the system prompt with the question and more text: the engine's
	// cache must cover it and the block after it on the repeat and on the next turn, which the
	// gateway sent to the same worker.
	for name, tr := range map[string]mmTurn{"repeat": r.Repeat, "next turn": r.NextTurn} {
		if tr.Worker != f.Worker || tr.CachedTokens < f.PromptTokens-16 || tr.CachedTokens < dr.Media.ExactTokens+16 {
			t.Errorf("%s: to %s with %d cached tokens (%s, %d blocks); want %s with the first prompt's %d tokens cached, image included (exact prefix %d)",
				name, tr.Worker, tr.CachedTokens, tr.Reason, tr.MatchedBlocks, f.Worker, f.PromptTokens, dr.Media.ExactTokens)
		}
	}
	if r.OtherImage.MatchedBlocks > dr.Media.ExactBlocks {
		t.Errorf("another image matched %d blocks, more than the %d before the image", r.OtherImage.MatchedBlocks, dr.Media.ExactBlocks)
	}
	if r.TextModel.Status != 400 || !strings.Contains(r.TextModel.Message, "needs a multimodal model") {
		t.Errorf("text model: %+v, want 400 naming the limitation", r.TextModel)
	}
}

// mmRoute is /debug/route's answer as multimodal_uuid.mjs records it.
type mmRoute struct {
	PromptTokens int `json:"prompt_tokens"`
	Workers      []struct {
		URL           string `json:"url"`
		MatchedEvents int    `json:"matched_events"`
	} `json:"workers"`
	Media *struct {
		Items       int    `json:"items"`
		ExactTokens int    `json:"exact_tokens"`
		ExactBlocks int    `json:"exact_blocks"`
		KeyedItems  int    `json:"keyed_items"`
		Note        string `json:"note"`
	} `json:"media"`
}

// e2eBigPNG is a data: URL of a 200×200 PNG: Qwen2.5-VL's processor makes it 49 placeholder
// tokens (smart_resize to 196×196, patch 14, merge 2), over three or four blocks of 16.
func e2eBigPNG(t *testing.T) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 200, 200))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = byte(i/800), 90, byte(i%251), 255
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// TestMultimodalChatUUID is issue 24's exact routing past an image, end to end with the
// official openai npm client: a gateway on a Qwen2.5-VL-style directory in front of three
// simulators over HTTP that expand the image's placeholders and publish its uuid as the image
// blocks' extra keys over ZMQ (two in vLLM's current [mm_hash, offset] form, one in the bare
// form). Every later turn of a conversation whose image carries a uuid lands on the first
// turn's worker as a cache hit from events, with the engine's cache covering the whole previous
// prompt, image included, and /debug/route calls the whole prompt exact; the same pixels under
// another uuid (the same placeholder ids) match no block from the image on.
func TestMultimodalChatUUID(t *testing.T) {
	vl := testutil.VLModelDir(t)
	l := &harness.Launcher{Bin: bins, Tokenizer: filepath.Join(vl, "tokenizer.json"), Model: "qwen2.5-vl-sim", LogDir: t.TempDir(), StartTimeout: startTimeout}
	replies := replyFile(t, plainReplies()...)
	var specs []string
	for i, form := range []string{"pairs", "ids", "pairs"} {
		s := startSim(t, l, harness.SimOptions{Name: "vl-uuid-sim-" + string(rune('a'+i)), Events: true, Args: []string{"--reply-file", replies, "--kv-extra-keys", form}})
		specs = append(specs, s.WorkerSpec(true))
	}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-vl-uuid", Workers: specs})

	stdout, _ := runNode(t, "multimodal_uuid.mjs", gw.URL+"/v1", gw.AdminURL, l.Model, e2eBigPNG(t))
	t.Logf("multimodal_uuid.mjs: %s", stdout)
	var r struct {
		Turns       []mmTurn `json:"turns"`
		OtherUUID   mmTurn   `json:"other_uuid"`
		DebugUUID   mmRoute  `json:"debug_uuid"`
		DebugNoUUID mmRoute  `json:"debug_no_uuid"`
		DebugLast   mmRoute  `json:"debug_last"`
	}
	if err := json.Unmarshal(stdout, &r); err != nil || len(r.Turns) != 4 {
		t.Fatalf("multimodal_uuid.mjs output: %v", err)
	}
	du, dn := r.DebugUUID, r.DebugNoUUID
	if du.Media == nil || dn.Media == nil {
		t.Fatalf("/debug/route without media: %+v %+v", du, dn)
	}
	// Without the uuid exactness stops at the image; with it the whole prompt is exact.
	imageAt := dn.Media.ExactTokens
	if du.Media.ExactTokens != du.PromptTokens || du.Media.KeyedItems != 1 || !strings.Contains(du.Media.Note, "every id is the engine's") ||
		imageAt <= 16 || imageAt+49 > dn.PromptTokens || !strings.Contains(dn.Media.Note, "no uuid") {
		t.Fatalf("/debug/route: with uuid %+v (%d tokens), without %+v (%d tokens)", du.Media, du.PromptTokens, dn.Media, dn.PromptTokens)
	}
	first := r.Turns[0]
	if first.PromptTokens != du.PromptTokens || first.Worker == "" || first.FinishReason != "stop" {
		t.Fatalf("first turn: %+v, want %d prompt tokens (the image expanded to 49)", first, du.PromptTokens)
	}
	for i := 1; i < len(r.Turns); i++ {
		tr, prev := r.Turns[i], r.Turns[i-1]
		// The previous prompt, image and its following blocks included, is cached: all but
		// the partial last block (and the token vLLM always recomputes).
		if tr.Worker != first.Worker || tr.Reason != "cache_hit" || tr.CachedTokens < prev.PromptTokens-16 || tr.CachedTokens < imageAt+49+16 {
			t.Errorf("turn %d: to %s (%s, %d blocks) with %d of %d tokens cached; want %s with the previous %d-token prompt cached past the image (%d..%d)",
				i+1, tr.Worker, tr.Reason, tr.MatchedBlocks, tr.CachedTokens, tr.PromptTokens, first.Worker, prev.PromptTokens, imageAt, imageAt+48)
		}
		if tr.MatchedBlocks < prev.PromptTokens/16 {
			t.Errorf("turn %d: the gateway matched %d blocks, want the previous prompt's %d (exact past the image)", i+1, tr.MatchedBlocks, prev.PromptTokens/16)
		}
	}
	// The match comes from the engine's own events, past the image: the first worker's events
	// hold at least the third turn's prompt.
	events := -1
	for _, w := range r.DebugLast.Workers {
		if w.URL == first.Worker {
			events = w.MatchedEvents
		}
	}
	if events < r.Turns[2].PromptTokens/16 {
		t.Errorf("last turn: the first worker's events match %d blocks, want at least the third prompt's %d (the image at %d..%d)", events, r.Turns[2].PromptTokens/16, imageAt, imageAt+48)
	}
	o := r.OtherUUID
	if o.MatchedBlocks > imageAt/16 || (o.Worker == first.Worker && o.CachedTokens > imageAt/16*16) {
		t.Errorf("same pixels, another uuid: %d blocks matched, %d tokens cached on %s; want at most the %d blocks before the image", o.MatchedBlocks, o.CachedTokens, o.Worker, imageAt/16)
	}
}
