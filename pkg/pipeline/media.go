package pipeline

import (
	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Routing a request with media (docs/multimodal.md). The engine expands each media
// placeholder into a number of tokens the gateway does not compute, and keys the blocks that
// cover an item by the item's hash, so only the ids before the first placeholder are the
// engine's (chat.Result.Exact): they are routed on as they are and match the event index
// exactly. The ids after it are the gateway's own, folded with the hashes of the items before
// them and given the high bit, which no vocabulary id has: they never match a block the engine
// reported (text or media), nor another image's blocks, but the approximate tree and the
// pending overlay record them, so a resend of the same conversation with the same image lands
// where its earlier turn was served (affinity).

// mediaFlag marks a folded id: vocabularies are far below 2^31 ids.
const mediaFlag = 1 << 31

// mediaRouteTokens returns the ids res is routed on.
func mediaRouteTokens(res *chat.Result) []uint32 {
	ids := res.TokenIDs
	out := make([]uint32, len(ids))
	copy(out, ids[:res.Exact])
	var h uint64
	next := 0 // the next item whose placeholder is looked for
	if res.MediaAt == nil {
		// Where each item sits is unknown: everything after the exact prefix depends on all.
		for _, it := range res.Media {
			h = foldHash(h, it.Hash)
		}
		next = len(res.Media)
	}
	for i := res.Exact; i < len(ids); i++ {
		for next < len(res.Media) && res.MediaAt[next] == i {
			h = foldHash(h, res.Media[next].Hash)
			next++
		}
		out[i] = mediaFlag | (ids[i] ^ uint32(h) ^ uint32(h>>32))
	}
	return out
}

// foldHash chains an item's hash onto the hash of the items before it.
func foldHash(h, item uint64) uint64 {
	var b [16]byte
	for i := range 8 {
		b[i], b[8+i] = byte(h>>(8*i)), byte(item>>(8*i))
	}
	return xxh3.Hash(b[:])
}

// mediaCandidates leaves out of sel the grpc:// workers, which cannot take media
// (engine.ErrMediaOverGRPC); when no candidate is left for that reason the request is refused
// with that error.
func mediaCandidates(sel *fleet.Selection) *openai.Error {
	kept, grpc := sel.Candidates[:0], 0
	for _, m := range sel.Candidates {
		if m.Worker().Kind() == worker.KindGRPC {
			grpc++
			sel.Rejected = append(sel.Rejected, m)
			continue
		}
		kept = append(kept, m)
	}
	sel.Candidates = kept
	if len(kept) == 0 && grpc > 0 {
		return engine.ErrMediaOverGRPC()
	}
	return nil
}

// mediaRoute is how a request with media was routed, for /debug/route.
type mediaRoute struct {
	items      int
	exact      int  // leading ids that are the engine's
	located    bool // each item's placeholder was found (follow-ups fold per item)
	unrendered string
}

// mediaView is /debug/route's "media" member.
type mediaView struct {
	Items       int    `json:"items"`
	ExactTokens int    `json:"exact_tokens"`
	ExactBlocks int    `json:"exact_blocks"`
	Note        string `json:"note"`
}

func (m *mediaRoute) view(bs int) *mediaView {
	if m == nil {
		return nil
	}
	v := &mediaView{Items: m.items, ExactTokens: m.exact, ExactBlocks: m.exact / bs}
	switch {
	case m.unrendered != "":
		v.Note = "not rendered (" + m.unrendered + "): routed by load only"
	case m.located:
		v.Note = "ids before the first media placeholder are the engine's and match its KV events exactly; after it the engine expands each placeholder and keys its blocks by the item's hash, which the gateway does not compute: those blocks are routed by affinity (the gateway's ids folded with the hashes of the items before them, recorded in the approximate tree and pending overlay)"
	default:
		v.Note = "the model's media placeholder tokens were not found one per item: ids after the exact prefix are folded with the hashes of every item and routed by affinity"
	}
	return v
}
