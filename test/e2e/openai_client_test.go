//go:build e2e

package e2e

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
)

// nodeReport is what test/e2e/npm/client.mjs prints.
type nodeReport struct {
	Models    []string `json:"models"`
	Nonstream struct {
		ID           string `json:"id"`
		Object       string `json:"object"`
		Model        string `json:"model"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Usage        usage  `json:"usage"`
	} `json:"nonstream"`
	Stream struct {
		Chunks       int     `json:"chunks"`
		Text         string  `json:"text"`
		FinishReason string  `json:"finish_reason"`
		Usage        *usage  `json:"usage"`
		ArrivalsMS   []int64 `json:"arrivals_ms"`
	} `json:"stream"`
	TokenIDs struct {
		Text  string `json:"text"`
		Usage usage  `json:"usage"`
	} `json:"token_ids"`
	UnknownModel struct {
		Status  *int   `json:"status"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"unknown_model"`
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// TestOpenAINodeClient drives the gateway with the official openai npm client (version pinned
// in test/e2e/npm/package.json): model listing, a non-streaming and a streaming completion with
// usage, a token-id prompt, and the error for an unknown model. Client compatibility is checked
// by code nobody here wrote.
func TestOpenAINodeClient(t *testing.T) {
	l := newLauncher(t)
	sim := startSim(t, l, harness.SimOptions{Name: "sim"})
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{sim.WorkerSpec(false)}})
	stdout, _ := runNode(t, "client.mjs", gw.URL+"/v1", testModel, text("openai-client", 60))
	out := stdout
	t.Logf("client report: %s", out)
	var r nodeReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}

	if !slices.Contains(r.Models, testModel) {
		t.Errorf("models.list: got %v, want it to contain %q", r.Models, testModel)
	}

	ns := r.Nonstream
	if ns.Object != "text_completion" || ns.ID == "" || ns.Model != testModel {
		t.Errorf("non-streaming: got object %q id %q model %q, want text_completion, an id, %q", ns.Object, ns.ID, ns.Model, testModel)
	}
	if ns.Text == "" || ns.FinishReason != "length" {
		t.Errorf("non-streaming: got text %q finish_reason %q, want text and length", ns.Text, ns.FinishReason)
	}
	if ns.Usage.CompletionTokens != 12 || ns.Usage.PromptTokens < 60 || ns.Usage.TotalTokens != ns.Usage.PromptTokens+12 {
		t.Errorf("non-streaming usage: got %+v, want 12 completion tokens of >= 60 prompt tokens", ns.Usage)
	}

	st := r.Stream
	if st.Chunks < 16 {
		t.Errorf("streaming: got %d chunks, want at least one per token (16)", st.Chunks)
	}
	if st.Text == "" || st.FinishReason != "length" {
		t.Errorf("streaming: got text %q finish_reason %q, want text and length", st.Text, st.FinishReason)
	}
	if st.Usage == nil || st.Usage.CompletionTokens != 16 || st.Usage.PromptTokens != ns.Usage.PromptTokens {
		t.Errorf("streaming usage (stream_options.include_usage): got %+v, want 16 completion tokens and %d prompt tokens", st.Usage, ns.Usage.PromptTokens)
	}

	// The streaming request repeats the non-streaming prompt on the only worker, so the engine
	// reports cached prompt tokens and the gateway must pass them through.
	if st.Usage == nil || st.Usage.PromptTokensDetails == nil || st.Usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Errorf("streaming usage: got %+v, want prompt_tokens_details.cached_tokens > 0 for a repeated prompt", st.Usage)
	}

	if r.TokenIDs.Text == "" || r.TokenIDs.Usage.PromptTokens != 8 || r.TokenIDs.Usage.CompletionTokens != 4 {
		t.Errorf("token-id prompt: got text %q usage %+v, want text, 8 prompt and 4 completion tokens", r.TokenIDs.Text, r.TokenIDs.Usage)
	}

	if r.UnknownModel.Status == nil || *r.UnknownModel.Status != 404 || r.UnknownModel.Type != "NotFoundError" {
		t.Errorf("unknown model: got status %v type %q (%s), want the client's NotFoundError for 404", r.UnknownModel.Status, r.UnknownModel.Type, r.UnknownModel.Message)
	}
}
