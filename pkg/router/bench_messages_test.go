package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// BenchmarkGatewayOverheadMessages is the cost of the Messages API over chat: the latency the
// gateway adds to an agent turn (a system prompt, a tool, 10 tool-use rounds: 31 messages,
// about 3.5k Qwen3 tokens) sent as /v1/messages (converted, rendered with Qwen3's template and
// tokenized, routed, the chat answer converted into a message) against the same conversation
// sent as /v1/chat/completions, one client, direct, chat and Messages interleaved against a
// trivial upstream. gw-added-p50-µs is each request's median through the gateway minus the
// direct median; ratio-p50 is Messages over chat.
func BenchmarkGatewayOverheadMessages(b *testing.B) {
	dir := filepath.Join("..", "..", ".cache", "tokenizers", "qwen3")
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		b.Fatalf("Qwen3 model directory (make testdata): %v", err)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: tok})
	if err != nil {
		b.Fatal(err)
	}
	ups := trivialChatUpstream(b)
	p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
	idx, _ := indexer.New(indexer.Config{})
	tree, _ := indexer.NewTree(indexer.TreeConfig{})
	pend, _ := indexer.NewPending(indexer.PendingConfig{})
	rt, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx, Tree: tree, Pending: pend, Tokenizer: pipeline.FromTokenizer(tok), Chat: r}}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := rt.Fleet().AddWorker(worker.Spec{URL: ups.URL}); err != nil {
		b.Fatal(err)
	}
	gw := runBenchRouter(b, rt)
	c := benchClient()
	defer c.CloseIdleConnections()
	const n = 1024
	chatBodies, msgBodies := make([][]byte, n), make([][]byte, n)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		chatBodies[i], msgBodies[i] = agentTurn(testutil.Scrambler(rng)("Now run the tests of the router package and report what fails."))
	}
	// The two bodies are one conversation: the Messages body renders to the chat body's prompt.
	cr, aerr := openai.ParseChat(chatBodies[0], openai.Limits{})
	if aerr != nil {
		b.Fatal(aerr)
	}
	want, aerr := r.Render(cr)
	got, cerr := countTokensOver(c, gw.URL, msgBodies[0])
	if aerr != nil || cerr != nil || got != len(want.TokenIDs) {
		b.Fatalf("the Messages body renders to %d tokens (%v), the chat body to %d (%v)", got, cerr, len(want.TokenIDs), aerr)
	}
	for i := range 32 {
		postOnce(c, gw.URL+"/v1/chat/completions", chatBodies[n-1-i])
		postOnce(c, gw.URL+"/v1/messages", msgBodies[n-1-i])
		postOnce(c, ups.URL+"/v1/chat/completions", chatBodies[n-1-i])
	}
	var direct, viaChat, viaMsg []time.Duration
	i := 0
	for b.Loop() {
		if t, err := postOnce(c, ups.URL+"/v1/chat/completions", chatBodies[i%n]); err == nil {
			direct = append(direct, t)
		}
		t, err := postOnce(c, gw.URL+"/v1/chat/completions", chatBodies[i%n])
		if err != nil {
			b.Fatal(err)
		}
		viaChat = append(viaChat, t)
		if t, err = postOnce(c, gw.URL+"/v1/messages", msgBodies[i%n]); err != nil {
			b.Fatal(err)
		}
		viaMsg = append(viaMsg, t)
		i++
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	d50 := pct(direct, 0.5)
	chatAdded, msgAdded := pct(viaChat, 0.5)-d50, pct(viaMsg, 0.5)-d50
	b.ReportMetric(us(d50), "direct-p50-µs")
	b.ReportMetric(us(chatAdded), "chat-gw-added-p50-µs")
	b.ReportMetric(us(msgAdded), "msg-gw-added-p50-µs")
	b.ReportMetric(float64(msgAdded)/float64(chatAdded), "ratio-p50")
	b.ReportMetric(us(pct(viaMsg, 0.99)-pct(direct, 0.99)), "msg-gw-added-p99-µs")
}

// agentTurn returns one agent turn ending in the user's question q as a chat body and as the
// Messages body that converts to it.
func agentTurn(q string) (chatBody, msgBody []byte) {
	system := strings.Repeat("You are a careful coding agent in a Go repository. Read before you write, keep functions short and run the tests. ", 12)
	schema := map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}, "required": []string{"cmd"}}
	chatMsgs := []map[string]any{{"role": "system", "content": system}}
	msgMsgs := []map[string]any{}
	for turn := range 10 {
		ask := fmt.Sprintf("Step %d: look at pkg/router/file%d.go and summarise what it does in two sentences.", turn, turn)
		id := fmt.Sprintf("toolu_%02d", turn)
		args := fmt.Sprintf(`{"cmd":"cat pkg/router/file%d.go"}`, turn)
		result := strings.Repeat(fmt.Sprintf("line %d of the file, a comment and some code; ", turn), 12)
		chatMsgs = append(chatMsgs, map[string]any{"role": "user", "content": ask},
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": args}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": result})
		msgMsgs = append(msgMsgs, map[string]any{"role": "user", "content": ask},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "bash", "input": json.RawMessage(args)}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": result}}})
	}
	chatMsgs = append(chatMsgs, map[string]any{"role": "user", "content": q})
	msgMsgs[len(msgMsgs)-1]["content"] = append(msgMsgs[len(msgMsgs)-1]["content"].([]any), map[string]any{"type": "text", "text": q})
	chatBody, _ = json.Marshal(map[string]any{"model": "m", "max_tokens": 1, "max_completion_tokens": 1, "messages": chatMsgs, "tool_choice": "auto",
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "bash", "description": "Run a shell command", "parameters": schema}}}})
	msgBody, _ = json.Marshal(map[string]any{"model": "m", "max_tokens": 1, "system": system, "messages": msgMsgs,
		"tools": []any{map[string]any{"name": "bash", "description": "Run a shell command", "input_schema": schema}}})
	return chatBody, msgBody
}

// countTokensOver asks the gateway at url how many tokens a Messages body renders to
// (/v1/messages/count_tokens).
func countTokensOver(c *http.Client, url string, body []byte) (int, error) {
	resp, err := c.Post(url+"/v1/messages/count_tokens", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("count_tokens: %d %v", resp.StatusCode, err)
	}
	return out.InputTokens, nil
}
