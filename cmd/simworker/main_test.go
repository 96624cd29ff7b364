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
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const defaultTestTimeout = 10 * time.Second

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.port != 8000 || o.runtime != "vllm" || o.kvFormat != "array" || o.kvHash != "int" || o.kvExtraKeys != "pairs" || o.kvTopic != "" ||
		o.kvHistory != 10000 || o.kvSeqStart != 0 || o.dpSize != 1 || o.timeScale != 1 || o.core.BlockSize != 16 || o.core.NumBlocks != 12500 {
		t.Errorf("defaults: %+v", o)
	}
	bad := [][]string{
		{"--runtime", "trtllm"},
		{"--kv-event-format", "json"},
		{"--kv-hash", "hex"},
		{"--kv-extra-keys", "tuples"},
		{"--dp-size", "0"},
		{"--time-scale", "0"},
		{"--no-such-flag"},
		{"extra"},
	}
	for _, args := range bad {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if _, err := parseFlags(args, io.Discard); err == nil {
				t.Errorf("parseFlags(%q): got nil error", args)
			}
		})
	}
}

func freePort(t *testing.T) int { return testutil.FreePort(t) }

// qwen3Dir returns the cached real tokenizer (`make testdata`); the test fails when missing.
func qwen3Dir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../.cache/tokenizers/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("tokenizer missing (%v): run `make testdata`", err)
	}
	return dir
}

func TestRunServesTextPromptsAndShutsDown(t *testing.T) {
	dir := qwen3Dir(t)
	hp, gp := freePort(t), freePort(t)
	o, err := parseFlags([]string{
		"--host", "127.0.0.1", "--port", strconv.Itoa(hp), "--grpc-port", strconv.Itoa(gp),
		"--tokenizer", dir, "--model", "qwen-sim", "--time-scale", "0.001", "--log-level", "error",
		"--kv-events", "tcp://127.0.0.1:" + strconv.Itoa(freePort(t)), "--kv-replay", "tcp://127.0.0.1:" + strconv.Itoa(freePort(t)),
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()

	base := "http://127.0.0.1:" + strconv.Itoa(hp)
	waitHealthy(t, base)

	tok := loadQwen3(t)
	text := "The quick brown fox jumps over the lazy dog. Ünïcödé ✓"
	wantIDs, err := tok.Encode(nil, text, true)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"qwen-sim","prompt":`+strconv.Quote(text)+`,"max_tokens":6,"return_token_ids":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Choices []struct {
			Text     string   `json:"text"`
			TokenIDs []uint32 `json:"token_ids"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("completion: %d %v", resp.StatusCode, err)
	}
	if out.Usage.PromptTokens != len(wantIDs) {
		t.Errorf("prompt_tokens: got %d, want %d (tokenizer)", out.Usage.PromptTokens, len(wantIDs))
	}
	full, err := tok.Decode(out.Choices[0].TokenIDs, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Choices[0].Text; !strings.HasPrefix(full, got) || len(out.Choices[0].TokenIDs) != 6 {
		t.Errorf("text %q is not the decoding %q of its 6 token ids", got, full)
	}

	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(gp), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gctx, gcancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer gcancel()
	mi, err := vllm.NewVllmEngineClient(conn).GetModelInfo(gctx, &vllm.GetModelInfoRequest{})
	if err != nil || mi.ServedModelName != "qwen-sim" || int(mi.VocabSize) != tok.VocabSize() {
		t.Errorf("GetModelInfo: %v %v", mi, err)
	}
	conn.Close()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("run did not return after cancellation")
	}
}

// waitHealthy waits for the simulator's /health.
func waitHealthy(t *testing.T, base string) {
	t.Helper()
	// Loading a 150k-token vocabulary takes seconds under -race on a busy machine.
	deadline := time.Now().Add(6 * defaultTestTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health never answered: %v", err)
		}
		<-tick.C
	}
}

var (
	qwenOnce sync.Once
	qwenTok  *tokenizer.Tokenizer
	qwenErr  error
)

func loadQwen3(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	dir := qwen3Dir(t)
	qwenOnce.Do(func() { qwenTok, qwenErr = tokenizer.LoadDir(dir) })
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}
