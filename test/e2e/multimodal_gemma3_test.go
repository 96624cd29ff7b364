//go:build e2e

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// gemmaImageTokens is the length of a Gemma 3 image's placeholder range: "\n\n", boi, 256
// image tokens, eoi, "\n\n" (pkg/chat/gemma3.go).
const gemmaImageTokens = 260

// TestMultimodalChatGemma3UUID is TestMultimodalChatUUID on a Gemma 3-style model directory
// (the Gemma 3 tokenizer and chat template, config.json with its vision tower and image token
// ids): an image by http URL, which the gateway never fetches or sizes, expands to its fixed
// 260-token range with the newline merges, in the gateway and in the simulators alike; every
// later turn of the conversation lands on the first turn's worker as a cache hit from events
// with the whole previous prompt, image included, cached; the same URL under another uuid
// matches no block from the image on.
func TestMultimodalChatGemma3UUID(t *testing.T) {
	dir := testutil.Gemma3ModelDir(t)
	l := &harness.Launcher{Bin: bins, Tokenizer: filepath.Join(dir, "tokenizer.json"), Model: "gemma3-sim", LogDir: t.TempDir(), StartTimeout: startTimeout}
	replies := replyFile(t, plainReplies()...)
	var specs []string
	for i, form := range []string{"pairs", "ids", "pairs"} {
		s := startSim(t, l, harness.SimOptions{Name: "gemma3-sim-" + string(rune('a'+i)), Events: true, Args: []string{"--reply-file", replies, "--kv-extra-keys", form}})
		specs = append(specs, s.WorkerSpec(true))
	}
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-gemma3", Workers: specs})

	stdout, _ := runNode(t, "multimodal_uuid.mjs", gw.URL+"/v1", gw.AdminURL, l.Model, "https://images.example.com/museum/photo-1.jpg")
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
	imageAt := dn.Media.ExactTokens
	if du.Media.ExactTokens != du.PromptTokens || du.Media.KeyedItems != 1 || !strings.Contains(du.Media.Note, "every id is the engine's") ||
		dn.PromptTokens != du.PromptTokens || imageAt <= 16 || imageAt+gemmaImageTokens > dn.PromptTokens || !strings.Contains(dn.Media.Note, "no uuid") {
		t.Fatalf("/debug/route: with uuid %+v (%d tokens), without %+v (%d tokens)", du.Media, du.PromptTokens, dn.Media, dn.PromptTokens)
	}
	first := r.Turns[0]
	if first.PromptTokens != du.PromptTokens || first.Worker == "" || first.Content == "" {
		t.Fatalf("first turn: %+v, want the gateway's %d prompt tokens (the simulator expands the image alike)", first, du.PromptTokens)
	}
	for i := 1; i < len(r.Turns); i++ {
		tr, prev := r.Turns[i], r.Turns[i-1]
		if tr.Worker != first.Worker || tr.Reason != "cache_hit" || tr.CachedTokens < prev.PromptTokens-16 || tr.CachedTokens < imageAt+gemmaImageTokens+16 {
			t.Errorf("turn %d: to %s (%s, %d blocks) with %d of %d tokens cached; want %s with the previous %d-token prompt cached past the image (%d..%d)",
				i+1, tr.Worker, tr.Reason, tr.MatchedBlocks, tr.CachedTokens, tr.PromptTokens, first.Worker, prev.PromptTokens, imageAt, imageAt+gemmaImageTokens-1)
		}
		if tr.MatchedBlocks < prev.PromptTokens/16 {
			t.Errorf("turn %d: the gateway matched %d blocks, want the previous prompt's %d (exact past the image)", i+1, tr.MatchedBlocks, prev.PromptTokens/16)
		}
	}
	events := -1
	for _, w := range r.DebugLast.Workers {
		if w.URL == first.Worker {
			events = w.MatchedEvents
		}
	}
	if events < r.Turns[2].PromptTokens/16 {
		t.Errorf("last turn: the first worker's events match %d blocks, want at least the third prompt's %d", events, r.Turns[2].PromptTokens/16)
	}
	o := r.OtherUUID
	if o.MatchedBlocks > imageAt/16 || (o.Worker == first.Worker && o.CachedTokens > imageAt/16*16) {
		t.Errorf("same URL, another uuid: %d blocks matched, %d tokens cached on %s; want at most the %d blocks before the image", o.MatchedBlocks, o.CachedTokens, o.Worker, imageAt/16)
	}
}
