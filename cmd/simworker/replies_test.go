package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/api/vllm"
)

// TestReplyFile: with --reply-file, generation n emits exactly line n mod N, tokenized as the
// model emits it (Qwen3's <think> and <tool_call> as their added tokens), over HTTP and gRPC
// alike, and stops.
func TestReplyFile(t *testing.T) {
	tok := loadQwen3(t)
	lines := []string{"<think>\nplan it\n</think>\n\nDone.", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"}
	var file strings.Builder
	for _, l := range lines {
		file.WriteString(strconv.Quote(l) + "\n")
	}
	path := filepath.Join(t.TempDir(), "replies.jsonl")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	hp, gp := freePort(t), freePort(t)
	o, err := parseFlags([]string{"--host", "127.0.0.1", "--port", strconv.Itoa(hp), "--grpc-port", strconv.Itoa(gp),
		"--tokenizer", qwen3Dir(t), "--model", "m", "--time-scale", "0.001", "--log-level", "error", "--reply-file", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(defaultTestTimeout):
			t.Error("run did not return")
		}
	}()
	base := "http://127.0.0.1:" + strconv.Itoa(hp)
	waitHealthy(t, base)
	want := make([][]uint32, len(lines))
	for i, l := range lines {
		if want[i], err = tok.Encode(nil, l, false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 { // generations 0 and 1 over HTTP
		resp, err := http.Post(base+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":500,"return_token_ids":true}`))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				TokenIDs     []uint32 `json:"token_ids"`
				FinishReason string   `json:"finish_reason"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || len(out.Choices) != 1 {
			t.Fatalf("generation %d: %v %+v", i, err, out)
		}
		if d := cmp.Diff(want[i], out.Choices[0].TokenIDs); d != "" || out.Choices[0].FinishReason != "stop" {
			t.Errorf("generation %d (finish %q), ids (-want +got):\n%s", i, out.Choices[0].FinishReason, d)
		}
	}
	// Generation 2 over gRPC cycles back to line 0.
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(gp), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gctx, gcancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer gcancel()
	mt := uint32(500)
	st, err := vllm.NewVllmEngineClient(conn).Generate(gctx, &vllm.GenerateRequest{RequestId: "g",
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: []uint32{1, 2, 3}}},
		SamplingParams: &vllm.SamplingParams{MaxTokens: &mt}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("gRPC stream ended without a complete: %v", err)
		}
		if c := m.GetComplete(); c != nil {
			if d := cmp.Diff(want[0], c.GetOutputIds()); d != "" || c.GetFinishReason() != "stop" {
				t.Errorf("gRPC generation (finish %q), ids (-want +got):\n%s", c.GetFinishReason(), d)
			}
			break
		}
	}
}
