package main

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestChatImageSessions: with --chat-image-px each session's first turn carries a picture of
// its own before its text, with the session's uuid, and the ideal's renderer counts the ids the
// engine runs: a 200x200 PNG on Qwen2.5-VL is 49 <|image_pad|> tokens (smart_resize to
// 196x196, patch 14, merge 2).
func TestChatImageSessions(t *testing.T) {
	dir := testutil.VLModelDir(t)
	c, err := loadCodec(dir)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := newTextBuilder(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := genConfig{kind: workloadChat, numRequests: 6, turns: 2, systemTokens: 40, userTokens: 20, outputTokens: 8, seed: 3, imagePx: 200, imageUUID: true}
	p, err := genChat(cfg, promptMaker{tb: tb})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.sessions) != 3 || p.sessions[0].image == p.sessions[1].image || p.sessions[1].uuid != "loadgen-3-1" || !strings.Contains(p.describe, "200x200 PNG") {
		t.Fatalf("sessions: %d, uuids %q %q, %s", len(p.sessions), p.sessions[0].uuid, p.sessions[1].uuid, p.describe)
	}
	s := p.sessions[0]
	body, err := newChatBody("m", []chatMessage{{Role: "system", Content: p.system.text}, {Role: "user", Content: imageUserContent(s.users[0], s.image, s.uuid)}}, 8)
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &sent); err != nil || !strings.HasPrefix(string(sent.Messages[1].Content), `[{"type":"image_url","image_url":{"url":"data:image/png;base64,`) ||
		!strings.Contains(string(sent.Messages[1].Content), `"uuid":"loadgen-3-0"`) {
		t.Fatalf("first turn: %s (%v)", body, err)
	}
	ci, err := loadChatIDs(dir, "", c.t)
	if err != nil || ci == nil {
		t.Fatalf("renderer: %v", err)
	}
	ids, err := ci.ids(body)
	if err != nil {
		t.Fatal(err)
	}
	pads := 0
	for _, id := range ids {
		if id == 151655 {
			pads++
		}
	}
	if pads != 49 {
		t.Errorf("the rendered first turn has %d image pad tokens, want 49", pads)
	}
	if at := firstMediaToken(ids, ci.r.MediaTokens()); at == len(ids) || ids[at] != 151655 || slices.Contains(ids[:at], 151655) {
		t.Errorf("first media token at %d of %d", at, len(ids))
	}
	if _, err := parseFlags([]string{"--tokenizer", dir, "--workload", "prefix_repetition", "--chat-image-px", "64"}, io.Discard); err == nil {
		t.Error("--chat-image-px accepted for prefix_repetition")
	}
}
