package chat

import (
	"fmt"
	"slices"
	"strconv"
)

// Expansion of media placeholders: the ids the engine runs for a rendered prompt with media,
// each placeholder replaced as the engine's processor replaces it, and where each item sits in
// them (the ranges vLLM keys blocks by: kv_cache_utils._gen_mm_extra_hash_keys adds an item's
// identifier to every block whose tokens overlap the item's placeholder range). The gateway and
// the simulator both expand with this code, so that their ids and block keys agree by
// construction; what the gateway cannot know (a count it cannot compute, the engine's hash of
// an item without a uuid) ends its exact prefix (Expanded.Exact, Expanded.Stop).

// MediaSpan is one media item's placeholder range in Expanded.IDs.
type MediaSpan struct {
	// Offset and Length locate the range: Length tokens from Offset (1 when the item's
	// placeholder was not expanded).
	Offset, Length int
	// Identifier is the item's mm hash as the engine keys its blocks with it ("" when the
	// caller's identify did not know it).
	Identifier string
	// Expanded says the placeholder was replaced by the engine's count of tokens.
	Expanded bool
}

// Expanded is a rendered prompt with its media placeholders expanded.
type Expanded struct {
	// IDs are the prompt's ids with each expandable placeholder replaced by the engine's run of
	// placeholder tokens; unexpandable ones stay as rendered.
	IDs []uint32
	// Spans are the items' ranges in IDs, one per item in prompt order (nil when the items'
	// placeholders were not located in the prompt).
	Spans []MediaSpan
	// Exact is how many leading IDs are the engine's with every item range in them known, so
	// that each block wholly before Exact has the key the engine reports for it (an item's
	// identifier included); Stop says why exactness ends there ("" when the whole prompt is
	// exact).
	Exact int
	Stop  string
}

// Expand expands res's media placeholders where the model family's rule and the item's count
// are known: Qwen2/2.5/3-VL images, the image pad token repeated MediaItem.Tokens times, as the
// engine's processor replaces it; Gemma 3 images, the processor's full image sequence with
// vLLM's newline merges (gemma3.go). identify gives an item's identifier, the mm hash the
// engine keys its blocks with ("" when unknown; nil: none known). The first item whose count
// or identifier is unknown ends the exact prefix at its range.
func (r *Renderer) Expand(res *Result, identify func(*MediaItem) string) Expanded {
	e := Expanded{IDs: res.TokenIDs, Exact: res.Exact}
	if len(res.Media) == 0 || res.Unrendered != "" {
		e.Stop = res.Unrendered
		return e
	}
	if res.MediaAt == nil {
		e.Stop = "the model's media placeholder tokens were not found one per item in the prompt"
		return e
	}
	extra := 0
	for k := range res.Media {
		if n, _ := r.expansion(res, k); n > 1 {
			extra += n - 1
		}
	}
	ids := make([]uint32, 0, len(res.TokenIDs)+extra)
	e.Spans = make([]MediaSpan, len(res.Media))
	stopItem := -1
	prev := 0
	for k := range res.Media {
		it := &res.Media[k]
		at := res.MediaAt[k]
		ids = append(ids, res.TokenIDs[prev:at]...)
		sp := MediaSpan{Offset: len(ids), Length: 1}
		if identify != nil {
			sp.Identifier = identify(it)
		}
		switch n, seq := r.expansion(res, k); {
		case seq != nil:
			sp.Length, sp.Expanded = n, true
			ids = append(ids, seq...)
		case n > 0:
			sp.Length, sp.Expanded = n, true
			for range n {
				ids = append(ids, res.TokenIDs[at])
			}
		default:
			ids = append(ids, res.TokenIDs[at])
		}
		prev = at + 1
		if stopItem < 0 {
			if stop := r.expandStop(it, k, &sp); stop != "" {
				stopItem, e.Stop = k, stop
			}
		}
		e.Spans[k] = sp
	}
	ids = append(ids, res.TokenIDs[prev:]...)
	if r.gemma != nil {
		ids, stopItem = r.gemmaPlace(ids, e.Spans, stopItem, &e.Stop)
	}
	e.IDs = ids
	e.Exact = len(ids)
	if stopItem >= 0 {
		e.Exact = e.Spans[stopItem].Offset
		if r.gemma != nil && !e.Spans[stopItem].Expanded && e.Exact > 0 && (ids[e.Exact-1] == r.gemma.nl[0] || ids[e.Exact-1] == r.gemma.nl[1]) {
			// The engine's unknown replacement may begin with a newline that merges into
			// this one.
			e.Exact--
		}
	}
	return e
}

// gemmaPlace merges the newlines of Gemma 3's expanded ids and places the spans (unmerged
// offsets on entry) in the merged ids as vLLM does; an expanded item vLLM's search would not
// find ends the exact prefix (stopItem, the first item that does, is returned updated).
func (r *Renderer) gemmaPlace(ids []uint32, spans []MediaSpan, stopItem int, stop *string) ([]uint32, int) {
	merged, from := r.gemma.merge(ids)
	lead := 0
	for lead < len(spans) && spans[lead].Expanded {
		lead++
	}
	found := r.gemma.find(merged, lead)
	j := 0 // the merged token holding unmerged offset spans[k].Offset
	for k := range spans {
		sp := &spans[k]
		for j+1 < len(from) && from[j+1] <= sp.Offset {
			j++
		}
		if k < len(found) {
			sp.Offset = found[k]
			continue
		}
		sp.Offset = j
		if sp.Expanded && k < lead && (stopItem < 0 || k < stopItem) {
			stopItem = k
			*stop = "item " + strconv.Itoa(k) + " (image): vLLM's placeholder search does not find its image sequence after the newline merges, so the engine refuses the request"
		}
	}
	return merged, stopItem
}

// expansion is how item k's placeholder is replaced: n tokens, the ids seq (Gemma 3) or, when
// seq is nil, n copies of the placeholder (the Qwen families' image pad); n is 0 when the
// gateway does not know (the family's rule, the item's size or its modality is unknown). The
// placeholder at MediaAt[k] is a media token of config.json: for a Qwen image
// image_token_id (<|image_pad|>), for Gemma 3 boi_token_index (<start_of_image>).
func (r *Renderer) expansion(res *Result, k int) (int, []uint32) {
	it := &res.Media[k]
	if it.Modality != "image" || it.Tokens <= 0 || it.Type == "image_embeds" {
		return 0, nil
	}
	switch {
	case qwenFamily(r.modelType):
		return it.Tokens, nil
	case r.gemma != nil && res.TokenIDs[res.MediaAt[k]] == r.gemma.boi:
		return len(r.gemma.seq), r.gemma.seq
	}
	return 0, nil
}

// expandStop says why item k (at range sp) ends the exact prefix, "" when it does not.
func (r *Renderer) expandStop(it *MediaItem, k int, sp *MediaSpan) string {
	item := "item " + strconv.Itoa(k) + " (" + it.Modality + ")"
	switch {
	case !sp.Expanded && !qwenFamily(r.modelType) && r.gemma == nil:
		return fmt.Sprintf("%s: the engine's placeholder expansion for model type %q is not computed by the gateway", item, r.modelType)
	case !sp.Expanded && r.gemma != nil && r.vision == nil:
		return item + ": Gemma 3 with pan and scan on, whose crops (and so the engine's replacement) the gateway does not compute"
	case !sp.Expanded && it.Modality != "image":
		return item + ": the engine's token count for " + it.Modality + " is not computed by the gateway"
	case !sp.Expanded && it.Type == "image_embeds":
		return item + ": image embeddings, whose placeholder count the gateway does not compute"
	case !sp.Expanded && it.Data == nil:
		return item + ": its size is unknown (not a data: URL), so the engine's token count is too"
	case !sp.Expanded:
		return item + ": its size could not be read from the data: URL's PNG/JPEG/GIF header, so the engine's token count is unknown"
	case sp.Identifier == "":
		return item + ": no uuid, and the engine's mm hash of the item's processed data is not computable by the gateway"
	}
	return ""
}

func qwenFamily(modelType string) bool {
	return slices.Contains([]string{"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"}, modelType)
}

// UUIDIdentity is the identify of Expand that knows only what the request says: an item's
// uuid, which the engine uses as its mm hash.
func UUIDIdentity(it *MediaItem) string {
	if it.HasUUID {
		return it.UUID
	}
	return ""
}
