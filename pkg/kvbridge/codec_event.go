package kvbridge

import (
	"slices"

	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Decoding of the events of a batch (wire/vllm-zmq.md §4–§6): array or map form, each field
// checked against its type and range.

// codecDecodeEvents decodes the events array, appending to dst.Events and reusing the slices
// of event slots beyond len (up to cap).
func codecDecodeEvents(b []byte, dst *indexer.Batch) ([]byte, int, error) {
	n, b, err := codecArrayHeader(b)
	if err != nil {
		return b, 0, err
	}
	rejected := 0
	for range n {
		i := len(dst.Events)
		if i < cap(dst.Events) {
			dst.Events = dst.Events[:i+1]
		} else {
			dst.Events = append(dst.Events, indexer.Event{})
		}
		ev := &dst.Events[i]
		prevLora := ev.LoraName
		*ev = indexer.Event{Hashes: ev.Hashes[:0], Tokens: ev.Tokens[:0], Extra: ev.Extra[:0]}
		start := b
		rest, st, err := codecDecodeEvent(b, ev, prevLora)
		if err != nil {
			// A badly typed field: drop the event if its bytes can still be skipped.
			if rest, err = codecSkip(start); err != nil {
				dst.Events = dst.Events[:i]
				return start, rejected, err
			}
			st = codecEventInvalid
		}
		b = rest
		switch st {
		case codecEventOK:
		case codecEventInvalid:
			rejected++
			dst.Events = dst.Events[:i]
		default:
			dst.Events = dst.Events[:i]
		}
	}
	return b, rejected, nil
}

type codecEventStatus uint8

const (
	codecEventOK codecEventStatus = iota
	codecEventInvalid
	codecEventUnknown
)

// Presence bits of an event's required fields.
const (
	codecHasHashes = 1 << iota
	codecHasTokens
	codecHasBlockSize
)

// codecFields is what decoding an event's fields notes beside the event: the required fields
// seen, and the raw extra_keys value (read once lora_name is known, whatever the key order).
type codecFields struct {
	seen  uint8
	extra []byte
}

func codecDecodeEvent(b []byte, ev *indexer.Event, prevLora string) ([]byte, codecEventStatus, error) {
	if len(b) == 0 {
		return b, codecEventInvalid, errCodecShort
	}
	if isArrayLead(b[0]) {
		return codecDecodeArrayEvent(b, ev, prevLora)
	}
	if isMapLead(b[0]) {
		return codecDecodeMapEvent(b, ev, prevLora)
	}
	return b, codecEventInvalid, errCodecType
}

func codecKind(tag []byte) indexer.EventKind {
	switch string(tag) {
	case tagStored:
		return indexer.EventStored
	case tagRemoved:
		return indexer.EventRemoved
	case tagCleared:
		return indexer.EventCleared
	}
	return 0
}

// codecDecodeArrayEvent decodes a tag-first positional event (wire/vllm-zmq.md §4, §5).
func codecDecodeArrayEvent(b []byte, ev *indexer.Event, prevLora string) ([]byte, codecEventStatus, error) {
	n, b, err := codecArrayHeader(b)
	if err != nil {
		return b, codecEventInvalid, err
	}
	if n == 0 {
		return b, codecEventInvalid, nil
	}
	tag, b, err := msgp.ReadStringZC(b)
	if err != nil {
		return b, codecEventInvalid, errCodecType
	}
	kind := codecKind(tag)
	var st codecFields
	for idx := 1; idx < n; idx++ {
		f := ""
		switch kind {
		case indexer.EventStored:
			switch idx {
			case 1:
				f = "block_hashes"
			case 2:
				f = "parent_block_hash"
			case 3:
				f = "token_ids"
			case 4:
				f = "block_size"
			case 5:
				f = "lora_id"
			case 6:
				f = "medium"
			case 7:
				f = "lora_name"
			case 8:
				f = "extra_keys"
			}
		case indexer.EventRemoved:
			switch idx {
			case 1:
				f = "block_hashes"
			case 2:
				f = "medium"
			}
		}
		if b, err = codecEventField(b, f, ev, &st, prevLora); err != nil {
			return b, codecEventInvalid, err
		}
	}
	return b, codecFinishEvent(ev, kind, &st), nil
}

// codecDecodeMapEvent decodes a "type"-tagged map event, in any key order.
func codecDecodeMapEvent(b []byte, ev *indexer.Event, prevLora string) ([]byte, codecEventStatus, error) {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return b, codecEventInvalid, errCodecShort
	}
	if uint64(n)*2 > uint64(len(b)) {
		return b, codecEventInvalid, errCodecShort
	}
	var st codecFields
	var tag []byte
	for range n {
		var key []byte
		if key, b, err = msgp.ReadMapKeyZC(b); err != nil {
			return b, codecEventInvalid, errCodecType
		}
		if string(key) == "type" {
			if tag, b, err = msgp.ReadStringZC(b); err != nil {
				return b, codecEventInvalid, errCodecType
			}
			continue
		}
		switch string(key) {
		case "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys":
			// Field names are shared by BlockStored and BlockRemoved, so the fields can be read
			// before the tag is known.
			b, err = codecEventField(b, string(key), ev, &st, prevLora)
		default:
			b, err = codecSkip(b)
		}
		if err != nil {
			return b, codecEventInvalid, err
		}
	}
	if tag == nil {
		return b, codecEventInvalid, nil
	}
	return b, codecFinishEvent(ev, codecKind(tag), &st), nil
}

// codecEventField decodes the value of field f into ev. An empty f skips the value. The
// string cases are compile-time constants, so the switch allocates nothing. It is one switch
// over the wire's field names, longer than most functions here because it is the table of
// fields and their types: split, the table would be scattered.
func codecEventField(b []byte, f string, ev *indexer.Event, st *codecFields, prevLora string) ([]byte, error) {
	var err error
	seen := &st.seen
	switch f {
	case "block_hashes":
		var n int
		if n, b, err = codecArrayHeader(b); err != nil {
			return b, err
		}
		ev.Hashes = slices.Grow(ev.Hashes[:0], n)
		for range n {
			var h uint64
			if h, b, err = codecReadHash(b); err != nil {
				return b, err
			}
			ev.Hashes = append(ev.Hashes, h)
		}
		*seen |= codecHasHashes
	case "parent_block_hash":
		if len(b) > 0 && b[0] == 0xc0 {
			ev.Parent, ev.HasParent = 0, false
			return b[1:], nil
		}
		var h uint64
		if h, b, err = codecReadHash(b); err != nil {
			return b, err
		}
		ev.Parent, ev.HasParent = h, h != 0
	case "token_ids":
		var n int
		if n, b, err = codecArrayHeader(b); err != nil {
			return b, err
		}
		ev.Tokens = slices.Grow(ev.Tokens[:0], n)
		for range n {
			var t uint32
			if t, b, err = codecReadToken(b); err != nil {
				return b, err
			}
			ev.Tokens = append(ev.Tokens, t)
		}
		*seen |= codecHasTokens
	case "block_size":
		u, neg, o, err := codecReadInt(b)
		if err != nil {
			return b, err
		}
		if neg || u == 0 || u > codecMaxBlockSize {
			return b, errCodecRange
		}
		ev.BlockSize = int(u)
		*seen |= codecHasBlockSize
		return o, nil
	case "lora_id":
		if len(b) > 0 && b[0] == 0xc0 {
			ev.LoraID, ev.HasLoraID = 0, false
			return b[1:], nil
		}
		var h uint64
		if h, b, err = codecReadHash(b); err != nil {
			return b, err
		}
		ev.LoraID, ev.HasLoraID = int64(h), true
	case "medium":
		if len(b) > 0 && b[0] == 0xc0 {
			ev.Medium = ""
			return b[1:], nil
		}
		var s []byte
		if s, b, err = msgp.ReadStringZC(b); err != nil {
			return b, errCodecType
		}
		ev.Medium = internMedium(s)
	case "lora_name":
		if len(b) > 0 && b[0] == 0xc0 {
			ev.LoraName = ""
			return b[1:], nil
		}
		var s []byte
		if s, b, err = msgp.ReadStringZC(b); err != nil {
			return b, errCodecType
		}
		if string(s) == prevLora {
			ev.LoraName = prevLora
		} else {
			ev.LoraName = string(s)
		}
	case "extra_keys":
		rest, err := codecSkip(b)
		if err != nil {
			return b, err
		}
		st.extra = b[:len(b)-len(rest)]
		return rest, nil
	default:
		return codecSkip(b)
	}
	return b, nil
}

// codecFinishEvent sets the kind and validates the event's required fields.
func codecFinishEvent(ev *indexer.Event, kind indexer.EventKind, st *codecFields) codecEventStatus {
	ev.Kind = kind
	seen := st.seen
	switch kind {
	case indexer.EventStored:
		const need = codecHasHashes | codecHasTokens | codecHasBlockSize
		if seen&need != need {
			return codecEventInvalid
		}
		if uint64(len(ev.Tokens)) != uint64(ev.BlockSize)*uint64(len(ev.Hashes)) {
			return codecEventInvalid
		}
		if err := codecExtraKeys(st.extra, ev); err != nil {
			return codecEventInvalid
		}
	case indexer.EventRemoved:
		if seen&codecHasHashes == 0 {
			return codecEventInvalid
		}
		ev.Tokens, ev.Extra = ev.Tokens[:0], ev.Extra[:0]
		ev.Parent, ev.HasParent, ev.BlockSize = 0, false, 0
		ev.LoraID, ev.HasLoraID, ev.LoraName = 0, false, ""
	case indexer.EventCleared:
		ev.Hashes, ev.Tokens, ev.Extra = ev.Hashes[:0], ev.Tokens[:0], ev.Extra[:0]
		ev.Parent, ev.HasParent, ev.BlockSize = 0, false, 0
		ev.LoraID, ev.HasLoraID, ev.LoraName, ev.Medium = 0, false, "", ""
	default:
		return codecEventUnknown
	}
	return codecEventOK
}

// internMedium returns a constant string for the media engines are known to send (vLLM: GPU,
// CPU, STORAGE; SGLang: GPU, CPU_PINNED, DISK, EXTERNAL), so decoding them allocates nothing.
func internMedium(s []byte) string {
	switch string(s) {
	case "GPU":
		return "GPU"
	case "CPU":
		return "CPU"
	case "STORAGE":
		return "STORAGE"
	case "CPU_PINNED":
		return "CPU_PINNED"
	case "DISK":
		return "DISK"
	case "EXTERNAL":
		return "EXTERNAL"
	case "":
		return ""
	}
	return string(s)
}
