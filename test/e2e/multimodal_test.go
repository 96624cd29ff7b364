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
