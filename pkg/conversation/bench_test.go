package conversation

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/openai"
)

// BenchmarkStoreOps times the store's part of a turn, with the memory store and with Redis (a
// redis-server on loopback): turn, a follow-up on a stored 10-turn chain from its request to
// its stored record (Begin: read, parse, convert; Confirm; the answer converted; Finish:
// stored; with Redis on the replica that wrote the chain), turn-stream the same streamed
// (its chain confirmed before Finish); put, a record written alone; and with Redis ping, one
// bare round trip for scale.
func BenchmarkStoreOps(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			var st Store
			var rd *Redis
			if kind == "memory" {
				st, _ = NewMemory(MemoryConfig{})
			} else {
				rs := testutil.StartRedis(b, 0)
				var err error
				if rd, err = NewRedis(RedisConfig{URL: rs.URL}); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { rd.Close() })
				st = rd
			}
			svc, _ := New(Config{Store: st})
			prev := benchChain(b, svc)
			for _, stream := range []bool{false, true} {
				name := map[bool]string{false: "turn", true: "turn-stream"}[stream]
				b.Run(name, func(b *testing.B) {
					for b.Loop() {
						req := &openai.ResponsesRequest{Model: "m", Store: true, Stream: stream, PreviousResponseID: prev, Input: []openai.Item{userItem("and then?")}}
						if _, aerr := runTurn(ctx, svc, "k", req); aerr != nil {
							b.Fatal(aerr.Message)
						}
					}
				})
			}
			b.Run("put", func(b *testing.B) {
				rec := &Record{ID: "resp_x", Previous: prev, Ancestors: make([]string, 10), Response: make([]byte, 1500), Input: make([]byte, 1600), Output: make([]byte, 100)}
				for b.Loop() {
					if err := st.PutResponse(ctx, "k", rec); err != nil {
						b.Fatal(err)
					}
				}
			})
			if rd != nil {
				b.Run("ping", func(b *testing.B) {
					for b.Loop() {
						if err := rd.Ping(ctx); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

func userItem(text string) openai.Item {
	return openai.Item{Type: openai.ItemMessage, Role: "user", Parts: []openai.ItemPart{{Type: "input_text", Text: text}}}
}

// benchChain stores a chain of 10 turns (about 1.5 KB of input each, answered "ok") and
// returns the id of its last.
func benchChain(b *testing.B, svc *Service) string {
	b.Helper()
	prev := ""
	for i := range 10 {
		q := fmt.Sprintf("Turn %d. ", i) + strings.Repeat("the train from paris to lyon leaves every hour ", 32)
		req := &openai.ResponsesRequest{Model: "m", Store: true, PreviousResponseID: prev, Input: []openai.Item{userItem(q)}}
		t, aerr := svc.Begin(context.Background(), "k", req)
		if aerr != nil {
			b.Fatal(aerr.Message)
		}
		res := &Result{Status: openai.ResponseCompleted, Items: []openai.Item{{Type: openai.ItemMessage, Role: "assistant", Status: "completed",
			Parts: []openai.ItemPart{{Type: "output_text", Text: "ok"}}}}}
		if _, aerr := svc.Finish(context.Background(), t, res); aerr != nil {
			b.Fatal(aerr.Message)
		}
		prev = t.ID
	}
	return prev
}
