//go:build e2e || reliability

package reliability

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// hostilePayloads are msgpack payloads an attacker on the event port could send: length
// headers claiming gigabytes, deep nesting, wrong types, truncation and noise.
func hostilePayloads() map[string][]byte {
	u32 := func(tag byte, n uint32) []byte {
		b := []byte{tag, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return b
	}
	env := func(events []byte) []byte {
		b := []byte{0x93, 0xcb, 0x41, 0xd9, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00} // [float64 ts,
		b = append(b, events...)
		return append(b, 0xc0) // , nil]
	}
	str := func(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }
	stored := func(rest ...[]byte) []byte {
		b := append([]byte{0x91, 0x90 | byte(1+len(rest))}, str("BlockStored")...)
		for _, r := range rest {
			b = append(b, r...)
		}
		return b
	}
	rng := rand.New(rand.NewPCG(42, 42))
	noise := make([]byte, 4096)
	for i := range noise {
		noise[i] = byte(rng.UintN(256))
	}
	return map[string][]byte{
		"array32_bomb_envelope": u32(0xdd, 0xffffffff),
		"array32_bomb_events":   env(u32(0xdd, 0xffffffff)),
		"map32_bomb_events":     env(u32(0xdf, 0xffffffff)),
		"str32_bomb_tag":        env(append([]byte{0x91, 0x92}, u32(0xdb, 0xffffffff)...)),
		"bin32_bomb_hash":       env(stored(append([]byte{0x91}, u32(0xc6, 0xfffffff0)...), []byte{0xc0}, u32(0xdd, 0x7fffffff))),
		"token_ids_bomb":        env(stored([]byte{0x91, 0x01}, []byte{0xc0}, u32(0xdd, 0xffffffff))),
		"ext32_bomb":            env(u32(0xc9, 0xffffffff)),
		"deep_arrays":           bytes.Repeat([]byte{0x91}, 200000),
		"deep_maps":             bytes.Repeat([]byte{0x81, 0xa1, 'k'}, 100000),
		"deep_in_events":        env(append([]byte{0x91}, bytes.Repeat([]byte{0x91}, 100000)...)),
		"wrong_envelope_type":   str("not a batch"),
		"wrong_events_type":     env([]byte{0x2a}),
		"wrong_hash_type":       env(stored([]byte{0x91, 0xa3, 'a', 'b', 'c'}, []byte{0xc0}, []byte{0x90}, []byte{0x10})),
		"negative_block_size":   env(stored([]byte{0x91, 0x01}, []byte{0xc0}, []byte{0x90}, []byte{0xff})),
		"huge_block_size":       env(stored([]byte{0x91, 0x01}, []byte{0xc0}, []byte{0x90}, []byte{0xce, 0xff, 0xff, 0xff, 0xff})),
		"truncated":             env(stored([]byte{0x93, 0x01})),
		"empty":                 {},
		"noise":                 noise,
	}
}

// TestHostileEventStream: a raw PUB on a worker's event port sends hostile msgpack (length
// bombs, deep nesting, wrong types, noise, bad frame layouts and one frame above the receive
// limit). The gateway neither crashes nor grows: each message is counted as malformed and
// skipped, the stream survives, and a valid batch after them is applied.
func TestHostileEventStream(t *testing.T) {
	l := newLauncher(t)
	s := startSim(t, l, harness.SimOptions{Name: "sim", TimeScale: simScale})
	pub, ep := floodPublisher(t)
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{"url=" + s.URL + ",kv_events=" + ep}})
	base := scrape(t, gw.MetricsURL())
	heap0, rss0 := base.sum("go_memstats_heap_inuse_bytes", nil), base.sum("process_resident_memory_bytes", nil)

	// A valid batch first, so the cursor is set and later messages are in sequence.
	good := floodPayloads(2, 4, 9)
	seq := uint64(0)
	send := func(frames ...[]byte) {
		t.Helper()
		if err := pub.SendRaw(frames...); err != nil {
			t.Fatal(err)
		}
	}
	sendSeq := func(payload []byte) { send(nil, kvbridge.AppendSeq(nil, seq), payload); seq++ }
	cursor := func() float64 {
		return scrape(t, gw.MetricsURL()).sum("kvgate_kv_stream_cursor", map[string]string{"worker": s.URL})
	}
	_, ok := poll(10*time.Second, func() bool {
		// The SUB may connect after the first sends (slow joiner): resend seq 0 until seen.
		seq = 0
		sendSeq(good[0])
		return workers(t, gw.AdminURL)[s.URL].IndexBlocks == 4
	})
	mustf(t, ok, "first valid batch never applied")

	hostile := hostilePayloads()
	const rounds = 20
	for range rounds {
		for _, p := range hostile {
			sendSeq(p)
		}
		// Bad frame layouts.
		send(nil, kvbridge.AppendSeq(nil, seq))                           // 2 frames
		send(nil, []byte{1, 2, 3}, good[1])                               // short seq frame
		send(nil, kvbridge.AppendSeq(nil, seq), good[1], []byte("extra")) // 4 frames
		send([]byte("only one frame"))
	}
	// One frame above the 64 MiB receive limit: libzmq drops the connection instead of
	// allocating; the source reconnects.
	send(nil, kvbridge.AppendSeq(nil, seq), make([]byte, 65<<20))
	seq++

	// The stream survives: a valid batch with the next sequence number is applied.
	var blocks int
	_, ok = poll(30*time.Second, func() bool {
		if cursor() == float64(seq) {
			return true
		}
		sendSeq(good[1]) // re-sent until the (possibly reconnected) SUB sees one
		seq--
		blocks = workers(t, gw.AdminURL)[s.URL].IndexBlocks
		return false
	})
	if !ok {
		seq++
	}
	mustf(t, ok, "valid batch after the hostile ones never applied (cursor %v, want %d, index %d blocks)", cursor(), seq, blocks)
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	h, err := do(ctx, http.MethodGet, gw.URL+"/health", nil, nil)
	mustf(t, err == nil && h.Status == http.StatusOK, "gateway /health after hostile events: %v %d", err, h.Status)
	mustf(t, completion(t, gw.URL, map[string]any{"model": testModel, "prompt": "still serving", "max_tokens": 2}).Status == http.StatusOK, "gateway stopped serving")
	exited, _ := gw.Exited()
	mustf(t, !exited, "gateway exited")
	m := scrape(t, gw.MetricsURL())
	malformed := m.sum("kvgate_kv_event_batches_total", map[string]string{"worker": s.URL, "outcome": "malformed"}) +
		m.sum("kvgate_kv_malformed_events_total", map[string]string{"worker": s.URL})
	heap, rss := m.sum("go_memstats_heap_inuse_bytes", nil), m.sum("process_resident_memory_bytes", nil)
	mustf(t, malformed >= float64(rounds), "only %v malformed messages counted for %d hostile rounds", malformed, rounds)
	mustf(t, heap < heap0+64<<20, "heap grew from %s to %s MiB", mib(heap0), mib(heap))
	mustf(t, rss < rss0+256<<20, "RSS grew from %s to %s MiB", mib(rss0), mib(rss))
	report(t, "hostile_event_stream", "kinds", len(hostile)+5, "messages", rounds*(len(hostile)+4)+1, "malformed_counted", malformed,
		"heap_start_mib", mib(heap0), "heap_end_mib", mib(heap), "rss_start_mib", mib(rss0), "rss_end_mib", mib(rss),
		"health_status", h.Status, "exited", exited)
}
