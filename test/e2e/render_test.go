//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestRenderRoutes: vLLM's render routes through the gateway binary answer the ids `gateway
// render` prints for the same chat request (and for its Messages form), in vLLM's
// GenerateRequest, with sampling_params taking the model directory's generation_config.json
// defaults; no worker is needed for them.
func TestRenderRoutes(t *testing.T) {
	// The model directory with a generation_config.json beside the tokenizer and template.
	dir := t.TempDir()
	src := filepath.Dir(tokenizerPath)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	gen := `{"temperature":0.6,"top_p":0.95,"top_k":20,"max_new_tokens":321}`
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o600); err != nil {
		t.Fatal(err)
	}
	l := newLauncher(t)
	sim := startSim(t, l, harness.SimOptions{Name: "render-0"})
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{sim.WorkerSpec(false)}, Args: []string{"--model-path", dir}})

	chatReq := `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bins.Gateway, "render", "--model-path", dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(chatReq+"\n"), &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("gateway render: %v: %s", err, errb.Bytes())
	}
	var rendered struct {
		TokenIDs []uint32 `json:"token_ids"`
	}
	if err := json.Unmarshal(out.Bytes(), &rendered); err != nil || len(rendered.TokenIDs) == 0 {
		t.Fatalf("gateway render output %q: %v", out.Bytes(), err)
	}
	type generateRequest struct {
		RequestID      string          `json:"request_id"`
		TokenIDs       []uint32        `json:"token_ids"`
		SamplingParams json.RawMessage `json:"sampling_params"`
		Model          *string         `json:"model"`
	}
	wantSP := `{"temperature":0.6,"top_p":0.95,"top_k":20,"stop":[],"stop_token_ids":[],"max_tokens":321,"output_kind":2,"skip_clone":true,"bad_words":[],"skip_reading_prefix_cache":false}`

	var chat generateRequest
	postOK(t, gw.URL+"/v1/chat/completions/render", chatReq, &chat)
	if !slices.Equal(chat.TokenIDs, rendered.TokenIDs) || !strings.HasPrefix(chat.RequestID, "chatcmpl-") || chat.Model != nil {
		t.Errorf("chat render %+v, want gateway render's ids %v", chat, rendered.TokenIDs)
	}
	if string(chat.SamplingParams) != wantSP {
		t.Errorf("chat render sampling_params\n got %s\nwant %s", chat.SamplingParams, wantSP)
	}

	// The same conversation as Messages renders to the same ids.
	msgReq := `{"model":"` + testModel + `","max_tokens":321,"system":"Be brief.","messages":[{"role":"user","content":"Hello there"}]}`
	var msg generateRequest
	postOK(t, gw.URL+"/v1/messages/render", msgReq, &msg)
	if !slices.Equal(msg.TokenIDs, rendered.TokenIDs) || msg.Model == nil || *msg.Model != testModel || string(msg.SamplingParams) != wantSP {
		t.Errorf("messages render %+v %s, want gateway render's ids %v", msg, msg.SamplingParams, rendered.TokenIDs)
	}

	var list []generateRequest
	postOK(t, gw.URL+"/v1/completions/render", `{"prompt":["Hello world","Goodbye world"],"max_tokens":4}`, &list)
	if len(list) != 2 || len(list[0].TokenIDs) == 0 || slices.Equal(list[0].TokenIDs, list[1].TokenIDs) || !strings.HasPrefix(list[1].RequestID, "cmpl-") {
		t.Errorf("completions render %+v", list)
	}
}
