package router

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// TestChatMediaExactPastImage: when the request gives an image's uuid and the gateway can
// count its placeholder tokens (a 200x200 PNG data: URL on Qwen2.5-VL: 49), the gateway's
// block keys are the engine's past the image: a worker whose events report the conversation
// with the image's placeholders expanded and its uuid as the image blocks' extra key (vLLM's
// [mm_hash, offset] form) matches every block of the request; the same pixels under another
// uuid, without one, or with mm_processor_kwargs (vLLM then hashes the uuid with them), match
// only the blocks before the image; /debug/route says where
// exactness stops and why.
func TestChatMediaExactPastImage(t *testing.T) {
	const bs = 16
	r := vlChat(t)
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	pub, pubEP, repEP := startExtraPublisher(t)
	g := newTestGateway(t, testConfig{Chat: r}, a.url(), "url="+b.url()+",kv_events="+pubEP+",replay="+repEP)
	g.waitFor(t, "event stream up", func() bool { ok, _ := g.rt.Fleet().Ready(); return ok })

	img := bigPNG(t, 200, 200)
	body := func(uuid string, kwargs ...any) string {
		part := map[string]any{"type": "image_url", "image_url": map[string]any{"url": img}}
		if uuid != "" {
			part["uuid"] = uuid
		}
		m := map[string]any{"model": "test-model", "max_tokens": 4, "messages": []any{
			map[string]any{"role": "system", "content": strings.Repeat("You describe pictures for people who cannot see them. ", 6)},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "What is this?"}, part,
				map[string]any{"type": "text", "text": strings.Repeat("Name the colours, the shapes and where they are. ", 4)}}},
		}}
		if len(kwargs) > 0 {
			m["mm_processor_kwargs"] = kwargs[0]
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	// The engine's ids: the rendered prompt with <|image_pad|> repeated 49 times, the
	// image's range keyed by its uuid on every block it overlaps.
	req, perr := openai.ParseChat([]byte(body("u-a")), openai.Limits{})
	if perr != nil {
		t.Fatal(perr.Message)
	}
	res, rerr := r.Render(req)
	if rerr != nil {
		t.Fatal(rerr.Message)
	}
	at := res.MediaAt[0]
	var ids []uint32
	ids = append(ids, res.TokenIDs[:at]...)
	for range 49 {
		ids = append(ids, res.TokenIDs[at])
	}
	ids = append(ids, res.TokenIDs[at+1:]...)
	n := len(ids) / bs
	hashes, extra := make([]uint64, n), make([]uint64, n)
	keys := map[uint64][]kvbridge.ExtraKey{}
	for i := range n {
		hashes[i] = 5000 + uint64(i)
		if i*bs < at+49 && (i+1)*bs > at {
			extra[i] = indexer.ExtraKeysHash("u-a")
			keys[hashes[i]] = []kvbridge.ExtraKey{{ID: "u-a", Offset: at - i*bs}}
		}
	}
	pub.keys = keys
	if _, err := pub.p.Publish(&indexer.Batch{Events: []indexer.Event{{Kind: indexer.EventStored, Hashes: hashes, Tokens: ids[:n*bs], BlockSize: bs, Medium: "GPU"}}}); err != nil {
		t.Fatal(err)
	}
	mb := g.member(b.url())
	g.waitFor(t, "the engine's blocks in the index", func() bool { return mb.IndexBlocks() == n })

	blocks := func(r *http.Response) int { v, _ := strconv.Atoi(r.Header.Get(pipeline.HeaderMatchedBlocks)); return v }
	for _, tt := range []struct {
		uuid   string
		kwargs any // mm_processor_kwargs, when not nil
		want   int
		exact  int // exact_tokens /debug/route reports
		note   string
	}{
		{"u-a", nil, n, len(ids), "every id is the engine's"},
		{"u-b", nil, at / bs, len(ids), "every id is the engine's"},
		{"", nil, at / bs, at, "no uuid"},
		// vLLM hashes a uuid with non-empty processor kwargs: not the engine's key any more.
		{"u-a", map[string]any{"max_pixels": 1 << 20}, at / bs, at, "mm_processor_kwargs"},
		{"u-a", map[string]any{}, n, len(ids), "every id is the engine's"},
	} {
		b := body(tt.uuid)
		if tt.kwargs != nil {
			b = body(tt.uuid, tt.kwargs)
		}
		resp, out := g.postChat(t, b)
		if resp.StatusCode != http.StatusOK || blocks(resp) != tt.want {
			t.Errorf("uuid %q: %d, %d blocks matched on %s; want %d: %s", tt.uuid, resp.StatusCode, blocks(resp), resp.Header.Get(pipeline.HeaderWorker), tt.want, out)
		}
		if tt.want == n && resp.Header.Get(pipeline.HeaderWorker) != mb.Worker().URL() {
			t.Errorf("uuid %q: served by %s, not the worker holding the blocks", tt.uuid, resp.Header.Get(pipeline.HeaderWorker))
		}
		_, dbg := g.do(t, http.MethodPost, "/debug/route", b, "")
		var e pipeline.RouteExplanation
		if err := json.Unmarshal([]byte(dbg), &e); err != nil || e.Media == nil {
			t.Fatalf("/debug/route: %s", dbg)
		}
		if e.PromptTokens != len(ids) || e.Media.ExactTokens != tt.exact || !strings.Contains(e.Media.Note, tt.note) {
			t.Errorf("uuid %q: /debug/route %d tokens, media %+v; want %d tokens, exact %d, a note saying %q", tt.uuid, e.PromptTokens, e.Media, len(ids), tt.exact, tt.note)
		}
	}
}

// extraPublisher is an engine-style publisher whose stored blocks carry the extra keys in keys
// (set before publishing; read by the publisher's encoder).
type extraPublisher struct {
	p    *kvbridge.Publisher
	keys map[uint64][]kvbridge.ExtraKey
}

func startExtraPublisher(t *testing.T) (*extraPublisher, string, string) {
	t.Helper()
	x := &extraPublisher{}
	p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*",
		Encode: kvbridge.EncodeOptions{ExtraKeyPairs: true, ExtraKeys: func(h uint64) []kvbridge.ExtraKey { return x.keys[h] }}})
	if err != nil {
		t.Fatal(err)
	}
	x.p = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; p.Close() })
	pubEP, repEP := p.Endpoints()
	return x, pubEP, repEP
}

// bigPNG is a data: URL of a w×h grey PNG.
func bigPNG(t *testing.T, w, h int) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i % 251)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}
