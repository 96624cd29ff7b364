package kvbridge

import (
	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// ExtraKey is one multimodal extra key of a stored block, as vLLM's block hash takes it: the
// item's identifier (its mm hash) and the offset of the item's first placeholder token from
// the block's first token (negative when the item began in an earlier block).
type ExtraKey struct {
	ID     string
	Offset int
}

// hasExtraKeys reports whether some block of the stored event ev has extra keys to write.
func hasExtraKeys(ev *indexer.Event, o *EncodeOptions) bool {
	if o.ExtraKeys == nil {
		return false
	}
	for _, h := range ev.Hashes {
		if len(o.ExtraKeys(h)) > 0 {
			return true
		}
	}
	return false
}

// encodeExtraKeys writes BlockStored.extra_keys (wire/vllm-zmq.md §5.1): one entry per block,
// nil for a block without keys, else the list of its keys, each a bare identifier or an
// [identifier, offset] pair (EncodeOptions.ExtraKeyPairs).
func encodeExtraKeys(dst []byte, ev *indexer.Event, o *EncodeOptions) []byte {
	dst = msgp.AppendArrayHeader(dst, uint32(len(ev.Hashes)))
	for _, h := range ev.Hashes {
		keys := o.ExtraKeys(h)
		if len(keys) == 0 {
			dst = msgp.AppendNil(dst)
			continue
		}
		dst = msgp.AppendArrayHeader(dst, uint32(len(keys)))
		for _, k := range keys {
			if o.ExtraKeyPairs {
				dst = msgp.AppendArrayHeader(dst, 2)
				dst = msgp.AppendString(dst, k.ID)
				dst = msgp.AppendInt64(dst, int64(k.Offset))
				continue
			}
			dst = msgp.AppendString(dst, k.ID)
		}
	}
	return dst
}
