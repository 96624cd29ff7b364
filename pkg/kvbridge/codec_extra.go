package kvbridge

import (
	"slices"

	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// codecExtraKeys reads a BlockStored event's extra_keys (wire/vllm-zmq.md §5.1: nil, or one
// entry per block, each nil or a list) into ev.Extra: per block, indexer.ExtraKeysHash of the
// keys that change what the block holds beyond its tokens. Those are the multimodal item
// identifiers, as [identifier, offset] pairs (current vLLM: kv_cache_utils.py
// _gen_mm_extra_hash_keys appends (identifier, item offset - block start)) or as bare strings
// (earlier releases appended the mm hash alone; the offset is dropped, so both forms give one
// key), other strings (a cache salt on the first block) and byte strings (a prompt-embeddings
// digest). The adapter name is left out (it is the key's namespace already, from lora_name);
// map-shaped entries (a proposal never merged) and other values are skipped. ev.Extra stays
// empty when no block has such a key, or when the list does not have one entry per block.
func codecExtraKeys(raw []byte, ev *indexer.Event) error {
	ev.Extra = ev.Extra[:0]
	if len(raw) == 0 || raw[0] == 0xc0 {
		return nil
	}
	n, b, err := codecArrayHeader(raw)
	if err != nil {
		return err
	}
	ev.Extra = slices.Grow(ev.Extra, n)
	some := false
	for range n {
		var h uint64
		if h, b, err = codecBlockExtra(b, ev.LoraName); err != nil {
			return err
		}
		some = some || h != 0
		ev.Extra = append(ev.Extra, h)
	}
	if !some || n != len(ev.Hashes) {
		// Not one entry per block: which block a key belongs to is unknown, so none is used
		// (the blocks keep their token keys, as before extra keys were read).
		ev.Extra = ev.Extra[:0]
	}
	return nil
}

// codecBlockExtra reads one block's extra keys and returns their hash (0: none).
func codecBlockExtra(b []byte, lora string) (uint64, []byte, error) {
	if len(b) > 0 && b[0] == 0xc0 {
		return 0, b[1:], nil
	}
	if len(b) > 0 && isMapLead(b[0]) {
		rest, err := codecSkip(b) // a tagged-map entry (never merged upstream): not read
		return 0, rest, err
	}
	n, b, err := codecArrayHeader(b)
	if err != nil {
		return 0, b, err
	}
	var x indexer.ExtraKeys
	for range n {
		if len(b) == 0 {
			return 0, b, errCodecShort
		}
		switch {
		case isArrayLead(b[0]):
			// [identifier, offset]: the identifier only.
			m, rest, err := codecArrayHeader(b)
			if err != nil {
				return 0, b, err
			}
			if m >= 1 && len(rest) > 0 && isStrLead(rest[0]) {
				var s []byte
				if s, rest, err = msgp.ReadStringZC(rest); err != nil {
					return 0, b, errCodecType
				}
				x.Add(s)
				m--
			}
			for ; m > 0; m-- {
				if rest, err = codecSkip(rest); err != nil {
					return 0, b, err
				}
			}
			b = rest
		case isStrLead(b[0]):
			var s []byte
			if s, b, err = msgp.ReadStringZC(b); err != nil {
				return 0, b, errCodecType
			}
			if string(s) != lora || lora == "" {
				x.Add(s)
			}
		case isBinLead(b[0]):
			var s []byte
			if s, b, err = msgp.ReadBytesZC(b); err != nil {
				return 0, b, errCodecType
			}
			x.Add(s)
		default:
			if b, err = codecSkip(b); err != nil {
				return 0, b, err
			}
		}
	}
	return x.Sum(), b, nil
}

func isStrLead(c byte) bool { return c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb }
func isBinLead(c byte) bool { return c == 0xc4 || c == 0xc5 || c == 0xc6 }
