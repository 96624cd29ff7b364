package router

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/conversation"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// BenchmarkGatewayOverheadResponses is the cost of the Responses API over chat: the latency the
// gateway adds to a turn continuing a 10-turn stored chain by previous_response_id (the chain
// read from the store, expanded, rendered with Qwen3's template and tokenized, routed, the
// answer converted and the new response stored) against the equivalent chat request (the same
// 21 messages sent whole), one client, direct, chat and Responses interleaved against a trivial
// upstream, with the memory store and with Redis (a redis-server on loopback). gw-added-p50-µs
// is each request's median through the gateway minus the direct median; ratio-p50 is
// Responses over chat. With Redis, store-wait-mean-µs is the mean time a turn waited for Redis
// (kvgate_responses_store_round_trip_seconds over the loop: one round trip per turn by design,
// docs/responses.md), and ratio-p50-less-store is Responses less that wait over chat: the
// gateway's own share.
func BenchmarkGatewayOverheadResponses(b *testing.B) {
	dir := filepath.Join("..", "..", ".cache", "tokenizers", "qwen3")
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		b.Fatalf("Qwen3 model directory (make testdata): %v", err)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: tok})
	if err != nil {
		b.Fatal(err)
	}
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			var st conversation.Store
			var waited func() (time.Duration, uint64)
			if kind == "memory" {
				st, _ = conversation.NewMemory(conversation.MemoryConfig{})
			} else {
				rs := testutil.StartRedis(b, 0)
				reg := prometheus.NewRegistry()
				rd, err := conversation.NewRedis(conversation.RedisConfig{URL: rs.URL, Registerer: reg})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { rd.Close() })
				st = rd
				waited = func() (time.Duration, uint64) { return storeWait(b, reg) }
			}
			svc, _ := conversation.New(conversation.Config{Store: st})
			ups := trivialChatUpstream(b)
			p, _ := policy.New(policy.NameCacheAware, policy.DefaultConfig())
			idx, _ := indexer.New(indexer.Config{})
			tree, _ := indexer.NewTree(indexer.TreeConfig{})
			pend, _ := indexer.NewPending(indexer.PendingConfig{})
			rt, err := New(Config{Models: []Model{{Name: "m", Policy: p, Index: idx, Tree: tree, Pending: pend, Tokenizer: pipeline.FromTokenizer(tok), Chat: r}},
				Logger: zap.NewNop(), Responses: svc})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rt.Fleet().AddWorker(worker.Spec{URL: ups.URL}); err != nil {
				b.Fatal(err)
			}
			gw := runBenchRouter(b, rt)
			benchResponsesTurns(b, gw, ups, waited)
		})
	}
}

// benchTurns are the 10 user turns of the benchmark's conversation (about 330 Qwen3 tokens each).
func benchTurns() []string {
	words := strings.Fields("the train from paris to lyon leaves every hour and the journey takes about two hours with a stop in dijon " +
		"travellers should book early because fares rise close to departure and luggage allowances differ between operators " +
		"a rail pass may be cheaper for several trips while the night train to marseille saves a hotel")
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]string, 10)
	for i := range out {
		var sb strings.Builder
		fmt.Fprintf(&sb, "Turn %d. ", i)
		for range 260 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		out[i] = sb.String()
	}
	return out
}

func benchResponsesTurns(b *testing.B, gw, ups *httptest.Server, waited func() (time.Duration, uint64)) {
	c := benchClient()
	defer c.CloseIdleConnections()
	const instructions = "You are a meticulous travel assistant. Answer in short sentences."
	turns := benchTurns()
	// The stored chain: 10 turns, each answered "ok" by the trivial upstream.
	prev := ""
	msgs := []map[string]any{{"role": "system", "content": instructions}}
	for _, q := range turns {
		body := map[string]any{"model": "m", "instructions": instructions, "input": q, "max_output_tokens": 1}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		bb, _ := json.Marshal(body)
		resp, err := c.Post(gw.URL+"/v1/responses", "application/json", strings.NewReader(string(bb)))
		if err != nil {
			b.Fatal(err)
		}
		var out struct{ ID string }
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out.ID == "" {
			b.Fatalf("chain turn: status %d", resp.StatusCode)
		}
		prev = out.ID
		msgs = append(msgs, map[string]any{"role": "user", "content": q}, map[string]any{"role": "assistant", "content": "ok"})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 1024
	chatBodies, respBodies := make([][]byte, n), make([][]byte, n)
	for i := range n {
		scramble := testutil.Scrambler(rng)
		q := scramble("And how long does the night train to Marseille take, and where does it arrive?")
		chatBodies[i], _ = json.Marshal(map[string]any{"model": "m", "max_completion_tokens": 1, "messages": append(append([]map[string]any{}, msgs...), map[string]any{"role": "user", "content": q})})
		respBodies[i], _ = json.Marshal(map[string]any{"model": "m", "max_output_tokens": 1, "instructions": instructions, "input": q, "previous_response_id": prev})
	}
	for i := range 32 {
		postOnce(c, gw.URL+"/v1/chat/completions", chatBodies[n-1-i])
		postOnce(c, gw.URL+"/v1/responses", respBodies[n-1-i])
		postOnce(c, ups.URL+"/v1/chat/completions", chatBodies[n-1-i])
	}
	var direct, viaChat, viaResp []time.Duration
	var wait0 time.Duration
	var trips0 uint64
	if waited != nil {
		wait0, trips0 = waited()
	}
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
		if t, err = postOnce(c, gw.URL+"/v1/responses", respBodies[i%n]); err != nil {
			b.Fatal(err)
		}
		viaResp = append(viaResp, t)
		i++
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	d50 := pct(direct, 0.5)
	chatAdded, respAdded := pct(viaChat, 0.5)-d50, pct(viaResp, 0.5)-d50
	b.ReportMetric(us(d50), "direct-p50-µs")
	b.ReportMetric(us(chatAdded), "chat-gw-added-p50-µs")
	b.ReportMetric(us(respAdded), "resp-gw-added-p50-µs")
	b.ReportMetric(float64(respAdded)/float64(chatAdded), "ratio-p50")
	b.ReportMetric(us(pct(viaResp, 0.99)-pct(direct, 0.99)), "resp-gw-added-p99-µs")
	if waited != nil {
		w, n := waited()
		if n == trips0 {
			b.Fatal("no store round trips counted")
		}
		wait := (w - wait0) / time.Duration(i)
		b.ReportMetric(float64(n-trips0)/float64(i), "store-trips/turn")
		b.ReportMetric(us(wait), "store-wait-mean-µs")
		b.ReportMetric(float64(respAdded-wait)/float64(chatAdded), "ratio-p50-less-store")
	}
}

// storeWait is the time and count kvgate_responses_store_round_trip_seconds holds in reg.
func storeWait(b *testing.B, reg *prometheus.Registry) (time.Duration, uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kvgate_responses_store_round_trip_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return time.Duration(h.GetSampleSum() * 1e9), h.GetSampleCount()
		}
	}
	return 0, 0
}
