package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"slices"
	"testing"

	zmq "github.com/pebbe/zmq4"
	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/zmqtest"
	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/openai"
)

// vlPNG is a data: URL of a w×h grey PNG whose pixels depend on seed.
func vlPNG(t *testing.T, w, h int, seed byte) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = seed + byte(i%7)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// newVLChatEnv starts a simulator serving chat for a Qwen2.5-VL-style model directory.
func newVLChatEnv(t *testing.T) (*testEnv, *chat.Renderer) {
	t.Helper()
	tok := loadQwen3(t)
	r, err := chat.New(testutil.VLModelDir(t), chat.Options{Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	return newTestEnv(t, Config{VocabSize: tok.VocabSize()}, 0, 1, ServerConfig{Codec: NewTokenizerCodec(tok), Chat: r}), r
}

const vlImagePad = 151655

// TestMediaChatCache: the simulator runs an image chat as the engine does: the image's
// placeholder expanded to smart_resize's count (200x200 at patch 14, merge 2: 196x196, 49
// tokens), its blocks keyed by the item's uuid (else its bytes): a resend is cached past the
// image, the same pixels under another uuid, or other pixels of the same size without one, only
// before the block the image starts in. Its BlockStored events carry the item's identifier as
// the extra key of exactly the blocks its range overlaps.
func TestMediaChatCache(t *testing.T) {
	env, r := newVLChatEnv(t)
	a, b := vlPNG(t, 200, 200, 1), vlPNG(t, 200, 200, 2)
	body := func(url, uuid string) string {
		p := `{"type":"image_url","image_url":{"url":"` + url + `"}`
		if uuid != "" {
			p += `,"uuid":"` + uuid + `"`
		}
		return `{"model":"sim-model","max_tokens":2,"messages":[{"role":"system","content":"You describe pictures for a museum guide, in plain words, foreground first, then the background, and you never guess at names."},` +
			`{"role":"user","content":[{"type":"text","text":"What is in this picture?"},` + p + `},{"type":"text","text":"Say which colour covers most of it, then describe the shapes from the largest to the smallest."}]}]}`
	}
	req, oerr := openai.ParseChat([]byte(body(a, "u-a")), openai.Limits{})
	if oerr != nil {
		t.Fatal(oerr.Message)
	}
	res, oerr := r.Render(req)
	if oerr != nil {
		t.Fatal(oerr.Message)
	}
	at := res.MediaAt[0]
	rendered := len(res.TokenIDs)
	want := rendered + 48
	full := (want - 1) / 16 * 16 // vLLM never serves the last prompt token from cache
	before := at / 16 * 16
	for i, tt := range []struct {
		name, url, uuid string
		cached          int
	}{
		{"first", a, "u-a", 0},
		{"resend", a, "u-a", full},
		{"same pixels, other uuid", a, "u-b", before},
		{"other pixels, no uuid", b, "", before},
		{"other pixels again", b, "", full},
	} {
		code, out := env.postPath(t, "/v1/chat/completions", body(tt.url, tt.uuid))
		var c struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(out, &c); code != 200 || err != nil {
			t.Fatalf("%s: %d %s", tt.name, code, out)
		}
		if c.Usage.PromptTokens != want || c.Usage.PromptTokensDetails.CachedTokens != tt.cached {
			t.Errorf("%d %s: %d prompt tokens, %d cached; want %d (the image expanded to 49), %d cached", i, tt.name,
				c.Usage.PromptTokens, c.Usage.PromptTokensDetails.CachedTokens, want, tt.cached)
		}
	}
	// The first request's events: blocks overlapping tokens at..at+49 carry u-a, the rest none.
	var extra []uint64
	var toks []uint32
	for _, e := range env.sink.events() {
		if e.Kind != "stored" || len(toks) >= full {
			continue
		}
		toks = append(toks, e.Tokens...)
		if e.Extra == nil {
			e.Extra = make([]uint64, len(e.Hashes))
		}
		extra = append(extra, e.Extra...)
	}
	if len(toks) != full || toks[at] != vlImagePad || toks[at+48] != vlImagePad || toks[at+49] == vlImagePad {
		t.Fatalf("stored %d tokens, pads at %d..%d: %v", len(toks), at, at+48, toks)
	}
	for blk, x := range extra {
		w := uint64(0)
		if blk*16 < at+49 && (blk+1)*16 > at {
			w = indexer.ExtraKeysHash("u-a")
		}
		if x != w {
			t.Errorf("block %d (tokens %d..%d, image %d..%d): extra %x, want %x", blk, blk*16, blk*16+15, at, at+48, x, w)
		}
	}
}

// TestZMQExtraKeys: a request with a media item publishes its blocks' extra keys over ZMQ in
// both of vLLM's forms: [mm_hash, offset] pairs (offset from the block's first token, negative
// when the item began before it) and bare mm hashes; both decode to the block keys the
// gateway computes for that item.
func TestZMQExtraKeys(t *testing.T) {
	for _, pairs := range []bool{true, false} {
		env := newZMQEnv(t, kvbridge.EncodeOptions{ExtraKeyPairs: pairs}, ZMQSinkConfig{})
		sub := zmqtest.Socket(t, zmq.SUB)
		if err := sub.SetSubscribe(""); err != nil {
			t.Fatal(err)
		}
		if err := sub.Connect(env.pubEP); err != nil {
			t.Fatal(err)
		}
		env.syncSub(t, sub)
		prompt := seqTokens(1, 64)
		for i := 20; i < 40; i++ {
			prompt[i] = vlImagePad
		}
		media := []indexer.ExtraSpan{{Start: 20, End: 40, Key: "img-1"}}
		req := newReq("m", prompt, 1)
		req.Media = media
		s, err := env.ranks[0].Submit(req, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitStream(t, s)
		var evs []indexer.Event
		var payload []byte
		for len(evs) == 0 {
			msg := zmqtest.RecvWithin(t, sub, defaultTestTimeout)
			if msg == nil {
				t.Fatal("no stored event")
			}
			m, err := kvbridge.ParseLive(msg)
			if err != nil {
				t.Fatal(err)
			}
			var b indexer.Batch
			if err := kvbridge.DecodeBatch(m.Payload, &b); err != nil {
				t.Fatal(err)
			}
			for _, e := range copyEvents(b.Events) {
				if e.Kind == indexer.EventStored {
					evs, payload = append(evs, e), m.Payload
				}
			}
		}
		e := evs[0]
		x := indexer.ExtraKeysHash("img-1")
		if !slices.Equal(e.Extra, []uint64{0, x, x, 0}) {
			t.Errorf("pairs %v: extra %x, want the image's key on blocks 1 and 2", pairs, e.Extra)
		}
		if got, want := indexer.AppendBlockKeysExtra(nil, e.Tokens, 16, "", e.Extra), indexer.AppendBlockKeysExtra(nil, prompt, 16, "", indexer.AppendSpanExtra(nil, media, 16, 4)); !slices.Equal(got, want) {
			t.Errorf("pairs %v: event keys %x, request keys %x", pairs, got, want)
		}
		// The wire form: block 1 holds the item from its 5th token, block 2 from 11 before it.
		var b1, b2 []byte
		if pairs {
			b1 = msgp.AppendInt64(msgp.AppendString(msgp.AppendArrayHeader(msgp.AppendArrayHeader(nil, 1), 2), "img-1"), 4)
			b2 = msgp.AppendInt64(msgp.AppendString(msgp.AppendArrayHeader(msgp.AppendArrayHeader(nil, 1), 2), "img-1"), -12)
		} else {
			b1 = msgp.AppendString(msgp.AppendArrayHeader(nil, 1), "img-1")
			b2 = b1
		}
		if wire := append(append(msgp.AppendNil(msgp.AppendArrayHeader(nil, 4)), b1...), b2...); !bytes.Contains(payload, msgp.AppendNil(wire)) {
			t.Errorf("pairs %v: payload %x lacks extra_keys %x", pairs, payload, msgp.AppendNil(wire))
		}
	}
}
