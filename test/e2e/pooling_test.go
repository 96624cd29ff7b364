//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestPoolingWorkers is issue 23's pooling and audio endpoints end to end: the openai client's
// embeddings.create (base64, as the client asks by default, and float), a rerank call and the
// audio uploads (transcriptions, plain and streamed, and translations) go through the gateway
// to simulators that serve them; a model served only by grpc:// workers
// answers them with a 400 naming the endpoint.
func TestPoolingWorkers(t *testing.T) {
	l := newLauncher(t)
	a := startSim(t, l, harness.SimOptions{Name: "pool-0", Events: true})
	b := startSim(t, l, harness.SimOptions{Name: "pool-1", Events: true})
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{a.WorkerSpec(true), b.WorkerSpec(true)}})
	stdout, _ := runNode(t, "pooling.mjs", gw.URL+"/v1", testModel)
	t.Logf("pooling.mjs: %s", stdout)
	var r struct {
		Embeddings struct {
			Model, Object string
			Vectors       [][]float64
			Usage         struct {
				PromptTokens int `json:"prompt_tokens"`
				TotalTokens  int `json:"total_tokens"`
			}
			Worker string
		}
		Float               []float64
		Unknown             any
		Transcription       string `json:"transcription"`
		TranscriptionStream string `json:"transcription_stream"`
		Translation         string `json:"translation"`
		Rerank              struct {
			Model   string
			Results []struct {
				Index          int
				RelevanceScore float64 `json:"relevance_score"`
			}
		}
	}
	if err := json.Unmarshal(stdout, &r); err != nil {
		t.Fatalf("pooling.mjs output %q: %v", stdout, err)
	}
	e := r.Embeddings
	if e.Model != testModel || e.Object != "list" || len(e.Vectors) != 3 || e.Usage.PromptTokens < 8 || e.Usage.TotalTokens != e.Usage.PromptTokens || !strings.HasPrefix(e.Worker, "http://") {
		t.Fatalf("embeddings %+v", e)
	}
	for i, v := range e.Vectors {
		var n float64
		for _, f := range v {
			n += f * f
		}
		if len(v) != 16 || math.Abs(n-1) > 1e-4 {
			t.Errorf("vector %d: %d dims, norm %v; want a unit vector of 16", i, len(v), n)
		}
	}
	if !slices.Equal(e.Vectors[0], e.Vectors[2]) || slices.Equal(e.Vectors[0], e.Vectors[1]) {
		t.Errorf("the same input must embed the same, another input differently: %v", e.Vectors)
	}
	for i := range r.Float {
		if math.Abs(r.Float[i]-e.Vectors[0][i]) > 1e-6 {
			t.Fatalf("float encoding %v, base64 %v: want the same vector", r.Float, e.Vectors[0])
		}
	}
	if fmt.Sprint(r.Unknown) != "404" {
		t.Errorf("unknown model: %v, want 404", r.Unknown)
	}
	rr := r.Rerank
	if rr.Model != testModel || len(rr.Results) != 3 || rr.Results[0].Index != 1 || rr.Results[0].RelevanceScore != 1 || rr.Results[2].Index != 0 {
		t.Errorf("rerank %+v, want the document holding the whole query first", rr)
	}

	if r.Transcription != "1000 bytes of clip.wav (transcriptions)" || r.TranscriptionStream != r.Transcription || r.Translation != "1000 bytes of clip.wav (translations)" {
		t.Errorf("audio: %q, streamed %q, translation %q: want the whole upload seen by the worker", r.Transcription, r.TranscriptionStream, r.Translation)
	}
	t.Run("tokenize", func(t *testing.T) { checkTokenize(t, gw.URL) })

	port := testutil.FreePorts(t, 1)[0]
	startSim(t, l, harness.SimOptions{Name: "pool-grpc", Args: []string{"--grpc-port", fmt.Sprint(port), "--runtime", "vllm"}})
	ggw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-grpc", Workers: []string{fmt.Sprintf("url=grpc://127.0.0.1:%d,runtime=vllm", port)}})
	resp, err := http.Post(ggw.URL+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"`+testModel+`","input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error struct{ Message string } }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(body.Error.Message, "POST /v1/embeddings is served by http:// workers only") {
		t.Errorf("gRPC-only embeddings: %d %q", resp.StatusCode, body.Error.Message)
	}
}

// checkTokenize: /tokenize with messages answers the ids `gateway render` prints for the same
// chat request, with their vocabulary strings; /detokenize gives the prompt text back.
func checkTokenize(t *testing.T, base string) {
	chatReq := `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}],"add_generation_prompt":true}`
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bins.Gateway, "render", "--model-path", filepath.Dir(tokenizerPath))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(chatReq+"\n"), &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("gateway render: %v: %s", err, errb.Bytes())
	}
	var rendered struct {
		Prompt   string   `json:"prompt"`
		TokenIDs []uint32 `json:"token_ids"`
	}
	if err := json.Unmarshal(out.Bytes(), &rendered); err != nil || len(rendered.TokenIDs) == 0 {
		t.Fatalf("gateway render output %q: %v", out.Bytes(), err)
	}
	body := strings.TrimSuffix(chatReq, "}") + `,"return_token_strs":true}`
	var tok struct {
		Count     int      `json:"count"`
		Tokens    []uint32 `json:"tokens"`
		TokenStrs []string `json:"token_strs"`
	}
	postOK(t, base+"/tokenize", body, &tok)
	if !slices.Equal(tok.Tokens, rendered.TokenIDs) || tok.Count != len(tok.Tokens) || len(tok.TokenStrs) != tok.Count || tok.TokenStrs[0] != "<|im_start|>" {
		t.Errorf("/tokenize %+v, want gateway render's %v with their strings", tok, rendered.TokenIDs)
	}
	ids, _ := json.Marshal(tok.Tokens)
	var detok struct{ Prompt string }
	postOK(t, base+"/detokenize", `{"tokens":`+string(ids)+`}`, &detok)
	if detok.Prompt != rendered.Prompt {
		t.Errorf("/detokenize %q, want the rendered prompt %q", detok.Prompt, rendered.Prompt)
	}
}

// postOK posts body to url and decodes a 200 answer into v.
func postOK(t *testing.T, url, body string, v any) {
	t.Helper()
	code, b := postJSON(t, http.MethodPost, url, body)
	if code != http.StatusOK || json.Unmarshal([]byte(b), v) != nil {
		t.Fatalf("POST %s: %d %s", url, code, b)
	}
}
