package router

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// trivialChatUpstream answers every chat completion at once with a small fixed body.
func trivialChatUpstream(b *testing.B) *httptest.Server {
	return fixedUpstream(b, "/v1/chat/completions", `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":4000,"completion_tokens":1,"total_tokens":4001}}`)
}

// benchChatConversation is pkg/chat's bench-10msg-4k request (12 messages, 3 tools, ~3.8k Qwen3
// tokens) as a generic JSON object.
func benchChatConversation(b *testing.B) map[string]any {
	f, err := os.Open(filepath.Join("..", "chat", "testdata", "conversations.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c struct {
			ID      string         `json:"id"`
			Request map[string]any `json:"request"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			b.Fatal(err)
		}
		if c.ID == "bench-10msg-4k" {
			return c.Request
		}
	}
	b.Fatal("no bench-10msg-4k conversation")
	return nil
}

// chatBodies returns n variants of the conversation, each with its own letter permutation
// (testutil.Scrambler). With all set, every message's content is scrambled (a conversation the
// gateway has never seen); otherwise only the last user message is (the next turn of a
// conversation whose history the gateway tokenized on the previous turn).
func chatBodies(b *testing.B, n int, all bool) [][]byte {
	conv := benchChatConversation(b)
	msgs := conv["messages"].([]any)
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([][]byte, n)
	for i := range out {
		scramble := testutil.Scrambler(rng)
		vm := make([]any, len(msgs))
		for j, m := range msgs {
			c := map[string]any{}
			for k, v := range m.(map[string]any) {
				c[k] = v
			}
			if s, ok := c["content"].(string); ok && (all || j == len(msgs)-1) {
				c["content"] = scramble(s)
			}
			vm[j] = c
		}
		body := map[string]any{}
		for k, v := range conv {
			body[k] = v
		}
		body["messages"], body["model"], body["max_tokens"] = vm, "m", 1
		var err error
		if out[i], err = json.Marshal(body); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// BenchmarkGatewayOverheadChat is the latency the gateway adds to a chat request of the
// bench-10msg-4k conversation (parse, render with Qwen3's template, tokenize ~4k tokens, hash,
// index + tree + pending lookup, cache_aware pick, proxy) against a trivial upstream, one client,
// direct and through the gateway interleaved; gw-added-p50-µs is the difference of the medians.
// next-turn: only the new user message is text the tokenizer has not seen; cold: all of it is.
func BenchmarkGatewayOverheadChat(b *testing.B) {
	dir := filepath.Join("..", "..", ".cache", "tokenizers", "qwen3")
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		b.Fatalf("Qwen3 model directory (make testdata): %v", err)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: tok})
	if err != nil {
		b.Fatalf("Qwen3 model directory (make testdata): %v", err)
	}
	for _, v := range []struct {
		name string
		all  bool
	}{{"next-turn", false}, {"cold", true}} {
		b.Run(v.name, func(b *testing.B) {
			ups := []*httptest.Server{trivialChatUpstream(b), trivialChatUpstream(b), trivialChatUpstream(b)}
			p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
			idx, _ := indexer.New(indexer.Config{})
			tree, _ := indexer.NewTree(indexer.TreeConfig{})
			pend, _ := indexer.NewPending(indexer.PendingConfig{})
			rt, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx, Tree: tree, Pending: pend, Tokenizer: pipeline.FromTokenizer(tok),
				Chat: r}}, Logger: zap.NewNop()})
			if err != nil {
				b.Fatal(err)
			}
			for _, u := range ups {
				if _, err := rt.Fleet().AddWorker(worker.Spec{URL: u.URL}); err != nil {
					b.Fatal(err)
				}
			}
			gw := runBenchRouter(b, rt)
			bodies := chatBodies(b, 2048, v.all)
			req := mustParseChat(b, string(bodies[0]))
			res, aerr := r.Render(req)
			if aerr != nil {
				b.Fatal(aerr.Message)
			}
			c := benchClient()
			defer c.CloseIdleConnections()
			for i := range 32 { // warm connections (on bodies the loop uses last)
				postOnce(c, gw.URL+"/v1/chat/completions", bodies[len(bodies)-1-i])
				postOnce(c, ups[0].URL+"/v1/chat/completions", bodies[len(bodies)-1-i])
			}
			var direct, viaGW []time.Duration
			i := 0
			for b.Loop() {
				body := bodies[i%len(bodies)]
				if t, err := postOnce(c, ups[i%3].URL+"/v1/chat/completions", body); err == nil {
					direct = append(direct, t)
				}
				t, err := postOnce(c, gw.URL+"/v1/chat/completions", body)
				if err != nil {
					b.Fatal(err)
				}
				viaGW = append(viaGW, t)
				i++
			}
			us := func(d time.Duration) float64 { return float64(d) / 1e3 }
			b.ReportMetric(float64(len(res.TokenIDs)), "prompt-tokens")
			b.ReportMetric(us(pct(direct, 0.5)), "direct-p50-µs")
			b.ReportMetric(us(pct(viaGW, 0.5)), "gw-p50-µs")
			b.ReportMetric(us(pct(viaGW, 0.5)-pct(direct, 0.5)), "gw-added-p50-µs")
			b.ReportMetric(us(pct(viaGW, 0.99)-pct(direct, 0.99)), "gw-added-p99-µs")
		})
	}
}
