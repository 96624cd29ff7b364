package pipeline

import (
	"strconv"

	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Routing a request with media (docs/multimodal.md). The engine expands each media
// placeholder into a number of tokens and keys the blocks that cover an item by the item's
// mm hash. Where the model family's rule gives the count (chat.Renderer.Expand) and the request
// gives the item's uuid (which the engine uses as its mm hash), the gateway computes the
// engine's ids and each block's extra keys: the lookup scores those (indexer.MediaKeys), so the
// blocks match the engine's KV events exactly past the image. Exactness stops at the first item
// whose count or identifier is unknown. From there on (and, for the tree and the pending
// overlay's own records, from the first item on) the ids routed on are the gateway's, folded
// with the hashes of the items before them and given the high bit, which no vocabulary id has:
// they never match a block the engine reported, nor another image's blocks, but the approximate
// tree and the pending overlay record them, so a resend of the same conversation with the same
// image lands where its earlier turn was served (affinity). The tree, which has no extra keys,
// thus never takes two images with the same placeholder ids for one.

// mediaExpander expands a rendered prompt's media placeholders as the engine does;
// *chat.Renderer implements it (a renderer without it is routed by affinity after the first
// item).
type mediaExpander interface {
	Expand(res *chat.Result, identify func(*chat.MediaItem) string) chat.Expanded
}

// expanderOf finds r's media expansion, looking through renderers that wrap another
// (RendererWrapper), so that a wrapper adding something else does not hide it.
func expanderOf(r ChatRenderer) (mediaExpander, bool) {
	for r != nil {
		if x, ok := r.(mediaExpander); ok {
			return x, true
		}
		w, ok := r.(RendererWrapper)
		if !ok {
			return nil, false
		}
		r = w.Unwrap()
	}
	return nil, false
}

// routeMedia sets how c, a chat request with media rendered as res, is routed: its route ids
// (affinity past the first item), the engine's view for the lookup up to where exactness stops,
// and what /debug/route says. It returns the prompt's length as the engine counts it.
func (pl *Pipeline) routeMedia(c *Call, r ChatRenderer, res *chat.Result) int {
	c.media = &mediaRoute{items: len(res.Media), exact: res.Exact, located: res.MediaAt != nil, unrendered: res.Unrendered}
	if res.Unrendered != "" {
		return len(res.TokenIDs)
	}
	x, ok := expanderOf(r)
	if !ok || res.MediaAt == nil {
		c.route = mediaRouteTokens(res.TokenIDs, res.Exact, res.Media, nil)
		return len(res.TokenIDs)
	}
	identify := chat.UUIDIdentity
	kwargs := c.Req.Chat != nil && c.Req.Chat.HasProcessorKwargs()
	if kwargs {
		identify = nil // the engine hashes the uuid with the kwargs: the keys are unknown
	}
	e := x.Expand(res, identify)
	c.media.exact, c.media.stop, c.media.expanded = e.Exact, e.Stop, true
	if kwargs && e.Exact < len(e.IDs) {
		c.media.stop = "the request sets mm_processor_kwargs: the engine hashes each item with them (a uuid too) and they may change its token count, so the prompt is exact only before the first item"
	}
	c.route = mediaRouteTokens(e.IDs, e.Spans[0].Offset, res.Media, e.Spans)
	keys := &indexer.MediaKeys{Tokens: make([]uint32, len(e.IDs))}
	copy(keys.Tokens, e.IDs[:e.Exact])
	copy(keys.Tokens[e.Exact:], c.route[e.Exact:])
	for _, sp := range e.Spans {
		if sp.Offset+sp.Length <= e.Exact {
			keys.Spans = append(keys.Spans, indexer.ExtraSpan{Start: sp.Offset, End: sp.Offset + sp.Length, Key: sp.Identifier})
			c.media.keyed++
		}
	}
	c.mediaKeys = keys
	return len(e.IDs)
}

// mediaFlag marks a folded id: vocabularies are far below 2^31 ids.
const mediaFlag = 1 << 31

// mediaRouteTokens returns the ids a request with media is routed on: ids[:from] as they are,
// each later id folded with the hashes of the items whose placeholder (at spans[k].Offset) is at
// or before it; without spans, with the hashes of every item.
func mediaRouteTokens(ids []uint32, from int, items []chat.MediaItem, spans []chat.MediaSpan) []uint32 {
	out := make([]uint32, len(ids))
	copy(out, ids[:from])
	var h uint64
	next := 0 // the next item whose placeholder is looked for
	if spans == nil {
		// Where each item sits is unknown: everything after the exact prefix depends on all.
		for _, it := range items {
			h = foldHash(h, it.Hash)
		}
		next = len(items)
	}
	for i := from; i < len(ids); i++ {
		for next < len(items) && spans[next].Offset == i {
			h = foldHash(h, items[next].Hash)
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
	grpc := sel.Drop(func(m *fleet.Member) bool { return m.Worker().Kind() == worker.KindGRPC }, true)
	if len(sel.Candidates) == 0 && grpc > 0 {
		return engine.ErrMediaOverGRPC()
	}
	return nil
}

// mediaRoute is how a request with media was routed, for /debug/route.
type mediaRoute struct {
	items      int
	exact      int  // leading ids that are the engine's, item ranges included
	located    bool // each item's placeholder was found (follow-ups fold per item)
	expanded   bool // the placeholders were expanded where the family's count is known
	keyed      int  // items whose blocks are keyed with their uuid within the exact prefix
	stop       string
	unrendered string
}

// mediaView is /debug/route's "media" member.
type mediaView struct {
	Items       int    `json:"items"`
	ExactTokens int    `json:"exact_tokens"`
	ExactBlocks int    `json:"exact_blocks"`
	KeyedItems  int    `json:"keyed_items"`
	Note        string `json:"note"`
}

func (m *mediaRoute) view(bs int) *mediaView {
	if m == nil {
		return nil
	}
	v := &mediaView{Items: m.items, ExactTokens: m.exact, ExactBlocks: m.exact / bs, KeyedItems: m.keyed}
	const affinity = "after it blocks are routed by affinity (the gateway's ids folded with the hashes of the items before them, recorded in the approximate tree and pending overlay)"
	switch {
	case m.unrendered != "":
		v.Note = "not rendered (" + m.unrendered + "): routed by load only"
	case m.expanded && m.stop == "":
		v.Note = "every id is the engine's and every block key matches its KV events exactly: placeholders expanded by the model family's rule, the " +
			strconv.Itoa(m.keyed) + " item(s) keyed by their uuids as the engine keys their blocks"
	case m.expanded:
		v.Note = "ids before token " + strconv.Itoa(m.exact) + " are the engine's and match its KV events exactly (" + strconv.Itoa(m.keyed) +
			" item(s) before it expanded and keyed by their uuids); exactness stops there: " + m.stop + "; " + affinity
	case m.located:
		v.Note = "ids before the first media placeholder are the engine's and match its KV events exactly; after it the engine expands each placeholder and keys its blocks by the item's hash, which the gateway does not compute: " + affinity
	default:
		v.Note = "the model's media placeholder tokens were not found one per item: ids after the exact prefix are folded with the hashes of every item and routed by affinity"
	}
	return v
}
