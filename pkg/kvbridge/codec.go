package kvbridge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Wire constants of wire/vllm-zmq.md.
const (
	// ReplayEndSeq is the sequence number of the replay terminator: all-ones, i.e. -1 as a signed
	// 8-byte big-endian value (wire/vllm-zmq.md §8.2).
	ReplayEndSeq = ^uint64(0)

	tagStored  = "BlockStored"
	tagRemoved = "BlockRemoved"
	tagCleared = "AllBlocksCleared"

	// codecMaxDepth bounds the nesting depth of values the decoder skips (extra_keys and unknown
	// fields). Real payloads nest at most ~6 deep; the bound keeps hostile input cheap.
	codecMaxDepth = 64
	// codecMaxBlockSize bounds block_size so block_size × len(hashes) cannot overflow.
	codecMaxBlockSize = 1 << 24
)

// Errors returned by the codec. Every decode error wraps ErrMalformed, so callers can count
// and skip with one errors.Is check.
var (
	// ErrMalformed: the frame or payload does not follow wire/vllm-zmq.md.
	ErrMalformed = errors.New("malformed kv event message")
	// errCodecDepth: a value nests deeper than codecMaxDepth.
	errCodecDepth = errors.New("nesting too deep")
	// errCodecShort: the payload ends inside a value, or a length exceeds the remaining bytes.
	errCodecShort = errors.New("truncated")
	// errCodecType: a value has a msgpack type the field does not allow.
	errCodecType = errors.New("unexpected msgpack type")
	// errCodecRange: a number is out of the field's range.
	errCodecRange = errors.New("value out of range")
)

func codecErr(op string, err error) error {
	return fmt.Errorf("kvbridge: %s: %w: %w", op, ErrMalformed, err)
}

// DecodeBatch decodes one msgpack event batch (frame 2 of a live or replayed message) into dst,
// which it resets first. It is DecodeBatchRejected without the count; see there for the rules.
func DecodeBatch(payload []byte, dst *indexer.Batch) error {
	_, err := DecodeBatchRejected(payload, dst)
	return err
}

// DecodeBatchRejected decodes one msgpack event batch into dst and returns how many events it
// rejected as malformed.
//
// Accepted shapes (wire/vllm-zmq.md §3–§6): the envelope as an array [ts, events] or
// [ts, events, rank] (extra trailing elements ignored) or as a map with keys ts, events and
// data_parallel_rank or attn_dp_rank (other keys ignored); events as tag-first arrays or as
// maps tagged by "type"; every field after block_size optional (absent or nil); unknown map keys
// and extra trailing array elements ignored; block hashes, parent and lora_id as any msgpack
// int or as bin (or str), folded to 64 bits (§6); a parent of nil, absent or 0 means none.
// dst.Seq is left 0: the sequence number is in frame 1, not in the payload.
//
// Malformed events: an event whose fields have the wrong types, that lacks a required field
// (block_hashes, token_ids, block_size for BlockStored; block_hashes for BlockRemoved), whose
// block_size is not positive, or whose token_ids length is not block_size × len(block_hashes)
// is dropped and counted in rejected; the rest of the batch is kept (the index then sees a
// chain with an unknown parent, counts it and resyncs, which is cheaper than dropping a whole
// scheduler step). Events with an unknown tag are dropped silently (SMG does the same; newer
// engines may add event types). A payload that is not a well-formed msgpack value of the
// envelope's shape, or that has bytes after it, returns an error wrapping ErrMalformed; dst
// then holds a partial batch that must not be applied.
//
// Memory: dst's slices (Events and each event's Hashes and Tokens) are reused, so decoding
// batches of similar shape allocates nothing in steady state. Lengths read from the wire are
// checked against the bytes left before anything is allocated. The decoder never panics on any
// input; nesting deeper than 64 levels is rejected. Strings: "GPU", "CPU" and the other known
// media are interned; a lora_name equal to the one the reused event slot held is not
// reallocated.
//
// Not safe for concurrent use with the same dst.
func DecodeBatchRejected(payload []byte, dst *indexer.Batch) (rejected int, err error) {
	dst.Reset()
	b := payload
	if len(b) == 0 {
		return 0, codecErr("decode batch", errCodecShort)
	}
	switch {
	case isArrayLead(b[0]):
		var n uint32
		n, b, err = msgp.ReadArrayHeaderBytes(b)
		if err != nil {
			return 0, codecErr("decode batch", errCodecShort)
		}
		if n < 2 {
			return 0, codecErr("decode batch", fmt.Errorf("envelope has %d elements, want 2 or 3", n))
		}
		if dst.Timestamp, b, err = codecReadTS(b); err != nil {
			return 0, codecErr("decode batch: ts", err)
		}
		if b, rejected, err = codecDecodeEvents(b, dst); err != nil {
			return rejected, codecErr("decode batch: events", err)
		}
		if n >= 3 {
			if b, err = codecReadRank(b, dst); err != nil {
				return rejected, codecErr("decode batch: rank", err)
			}
		}
		for i := uint32(3); i < n; i++ {
			if b, err = codecSkip(b); err != nil {
				return rejected, codecErr("decode batch", err)
			}
		}
	case isMapLead(b[0]):
		var n uint32
		n, b, err = msgp.ReadMapHeaderBytes(b)
		if err != nil {
			return 0, codecErr("decode batch", errCodecShort)
		}
		if uint64(n)*2 > uint64(len(b)) {
			return 0, codecErr("decode batch", errCodecShort)
		}
		sawEvents := false
		for i := uint32(0); i < n; i++ {
			var key []byte
			if key, b, err = msgp.ReadMapKeyZC(b); err != nil {
				return rejected, codecErr("decode batch: key", errCodecType)
			}
			switch string(key) {
			case "ts":
				dst.Timestamp, b, err = codecReadTS(b)
			case "events":
				dst.Events = dst.Events[:0]
				var r int
				b, r, err = codecDecodeEvents(b, dst)
				rejected = r
				sawEvents = true
			case "data_parallel_rank", "attn_dp_rank":
				b, err = codecReadRank(b, dst)
			default:
				b, err = codecSkip(b)
			}
			if err != nil {
				return rejected, codecErr("decode batch: "+string(key), err)
			}
		}
		if !sawEvents {
			return rejected, codecErr("decode batch", errors.New("envelope map has no events"))
		}
	default:
		return 0, codecErr("decode batch", fmt.Errorf("envelope is msgpack %v, want array or map", msgp.NextType(b)))
	}
	if len(b) != 0 {
		return rejected, codecErr("decode batch", fmt.Errorf("%d bytes after the envelope", len(b)))
	}
	return rejected, nil
}

func isArrayLead(c byte) bool { return c&0xf0 == 0x90 || c == 0xdc || c == 0xdd }
func isMapLead(c byte) bool   { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }

// codecReadTS reads the batch time: a float (or, leniently, an int or nil).
func codecReadTS(b []byte) (float64, []byte, error) {
	if len(b) == 0 {
		return 0, b, errCodecShort
	}
	switch b[0] {
	case 0xcb:
		f, o, err := msgp.ReadFloat64Bytes(b)
		if err != nil {
			return 0, b, errCodecShort
		}
		return f, o, nil
	case 0xca:
		f, o, err := msgp.ReadFloat32Bytes(b)
		if err != nil {
			return 0, b, errCodecShort
		}
		return float64(f), o, nil
	case 0xc0:
		return 0, b[1:], nil
	}
	u, neg, o, err := codecReadInt(b)
	if err != nil {
		return 0, b, err
	}
	if neg {
		return float64(int64(u)), o, nil
	}
	return float64(u), o, nil
}

// codecReadRank reads the envelope's rank: nil (unset) or an int in int32 range.
func codecReadRank(b []byte, dst *indexer.Batch) ([]byte, error) {
	if len(b) > 0 && b[0] == 0xc0 {
		dst.DPRank, dst.HasDPRank = 0, false
		return b[1:], nil
	}
	u, neg, o, err := codecReadInt(b)
	if err != nil {
		return b, err
	}
	v := int64(u)
	if (!neg && u > math.MaxInt32) || (neg && v < math.MinInt32) {
		return b, errCodecRange
	}
	dst.DPRank, dst.HasDPRank = int32(v), true
	return o, nil
}

// codecReadInt reads any msgpack int. For a non-negative value it returns the value and
// neg=false; for a negative one its two's-complement bits (uint64(int64 value)) and neg=true.
func codecReadInt(b []byte) (u uint64, neg bool, o []byte, err error) {
	if len(b) == 0 {
		return 0, false, b, errCodecShort
	}
	c := b[0]
	if c <= 0x7f {
		return uint64(c), false, b[1:], nil
	}
	if c >= 0xe0 {
		return uint64(int64(int8(c))), true, b[1:], nil
	}
	var n int
	switch c {
	case 0xcc, 0xd0:
		n = 1
	case 0xcd, 0xd1:
		n = 2
	case 0xce, 0xd2:
		n = 4
	case 0xcf, 0xd3:
		n = 8
	default:
		return 0, false, b, errCodecType
	}
	if len(b) < 1+n {
		return 0, false, b, errCodecShort
	}
	p := b[1 : 1+n]
	switch c {
	case 0xcc:
		u = uint64(p[0])
	case 0xcd:
		u = uint64(binary.BigEndian.Uint16(p))
	case 0xce:
		u = uint64(binary.BigEndian.Uint32(p))
	case 0xcf:
		u = binary.BigEndian.Uint64(p)
	case 0xd0:
		u = uint64(int64(int8(p[0])))
	case 0xd1:
		u = uint64(int64(int16(binary.BigEndian.Uint16(p))))
	case 0xd2:
		u = uint64(int64(int32(binary.BigEndian.Uint32(p))))
	case 0xd3:
		u = binary.BigEndian.Uint64(p)
	}
	if c >= 0xd0 && int64(u) < 0 {
		neg = true
	}
	return u, neg, b[1+n:], nil
}

// codecReadHash reads a block hash (or parent or lora_id) and folds it to 64 bits as
// wire/vllm-zmq.md §6 says: an int of any family mod 2^64; bin (or str) → the last 8 bytes
// read big-endian, zero-extended when shorter.
func codecReadHash(b []byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, b, errCodecShort
	}
	c := b[0]
	var raw []byte
	var err error
	var o []byte
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		u, _, o, err := codecReadInt(b)
		return u, o, err
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		raw, o, err = msgp.ReadBytesZC(b)
	case (c >= 0xa0 && c <= 0xbf) || c == 0xd9 || c == 0xda || c == 0xdb:
		raw, o, err = msgp.ReadStringZC(b)
	default:
		return 0, b, errCodecType
	}
	if err != nil {
		return 0, b, errCodecShort
	}
	return FoldHashBytes(raw), o, nil
}

// FoldHashBytes folds a bytes-mode block hash (a raw digest) to 64 bits: the last 8 bytes read
// big-endian, zero-extended when the digest is shorter (wire/vllm-zmq.md §6). It names the same
// block as the engine's int mode.
func FoldHashBytes(d []byte) uint64 {
	if len(d) > 8 {
		d = d[len(d)-8:]
	}
	var v uint64
	for _, c := range d {
		v = v<<8 | uint64(c)
	}
	return v
}

// codecReadToken reads one token id: a non-negative int that fits in 32 bits.
func codecReadToken(b []byte) (uint32, []byte, error) {
	if len(b) > 0 && b[0] <= 0x7f { // fast path: positive fixint
		return uint32(b[0]), b[1:], nil
	}
	if len(b) >= 5 && b[0] == 0xce { // fast path: uint32, the common encoding of large ids
		return binary.BigEndian.Uint32(b[1:5]), b[5:], nil
	}
	u, neg, o, err := codecReadInt(b)
	if err != nil {
		return 0, b, err
	}
	if neg || u > math.MaxUint32 {
		return 0, b, errCodecRange
	}
	return uint32(u), o, nil
}

// codecArrayHeader reads an array header and checks that n elements of at least one byte each
// can fit in what is left, so no slice is grown beyond what the input could hold.
func codecArrayHeader(b []byte) (int, []byte, error) {
	if len(b) == 0 {
		return 0, b, errCodecShort
	}
	if !isArrayLead(b[0]) {
		return 0, b, errCodecType
	}
	n, o, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return 0, b, errCodecShort
	}
	if uint64(n) > uint64(len(o)) {
		return 0, b, errCodecShort
	}
	return int(n), o, nil
}

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
		*ev = indexer.Event{Hashes: ev.Hashes[:0], Tokens: ev.Tokens[:0]}
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
	var seen uint8
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
			}
		case indexer.EventRemoved:
			switch idx {
			case 1:
				f = "block_hashes"
			case 2:
				f = "medium"
			}
		}
		if b, err = codecEventField(b, f, ev, &seen, prevLora); err != nil {
			return b, codecEventInvalid, err
		}
	}
	return b, codecFinishEvent(ev, kind, seen), nil
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
	var seen uint8
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
		case "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name":
			// Field names are shared by BlockStored and BlockRemoved, so the fields can be read
			// before the tag is known.
			b, err = codecEventField(b, string(key), ev, &seen, prevLora)
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
	return b, codecFinishEvent(ev, codecKind(tag), seen), nil
}

// codecEventField decodes the value of field f into ev. An empty f skips the value. The
// string cases are compile-time constants, so the switch allocates nothing.
func codecEventField(b []byte, f string, ev *indexer.Event, seen *uint8, prevLora string) ([]byte, error) {
	var err error
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
	default:
		return codecSkip(b)
	}
	return b, nil
}

// codecFinishEvent sets the kind and validates the event's required fields.
func codecFinishEvent(ev *indexer.Event, kind indexer.EventKind, seen uint8) codecEventStatus {
	ev.Kind = kind
	switch kind {
	case indexer.EventStored:
		const need = codecHasHashes | codecHasTokens | codecHasBlockSize
		if seen&need != need {
			return codecEventInvalid
		}
		if uint64(len(ev.Tokens)) != uint64(ev.BlockSize)*uint64(len(ev.Hashes)) {
			return codecEventInvalid
		}
	case indexer.EventRemoved:
		if seen&codecHasHashes == 0 {
			return codecEventInvalid
		}
		ev.Tokens = ev.Tokens[:0]
		ev.Parent, ev.HasParent, ev.BlockSize = 0, false, 0
		ev.LoraID, ev.HasLoraID, ev.LoraName = 0, false, ""
	case indexer.EventCleared:
		ev.Hashes, ev.Tokens = ev.Hashes[:0], ev.Tokens[:0]
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

// codecSkip skips one msgpack value of any type without recursion: a fixed stack of pending
// element counts, one per open container, bounded by codecMaxDepth. Every length is checked
// against the bytes left, so a hostile header cannot make it loop or allocate.
func codecSkip(b []byte) ([]byte, error) {
	var pending [codecMaxDepth]uint64
	depth := 0
	pending[0] = 1
	for {
		for pending[depth] == 0 {
			if depth == 0 {
				return b, nil
			}
			depth--
		}
		pending[depth]--
		if len(b) == 0 {
			return b, errCodecShort
		}
		c := b[0]
		var size uint64 // bytes of this item's own encoding (header + payload)
		var elems uint64
		switch {
		case c <= 0x7f || c >= 0xe0:
			size = 1
		case c <= 0x8f:
			size, elems = 1, 2*uint64(c&0x0f)
		case c <= 0x9f:
			size, elems = 1, uint64(c&0x0f)
		case c <= 0xbf:
			size = 1 + uint64(c&0x1f)
		default:
			var hdr int
			var lenBytes int
			switch c {
			case 0xc0, 0xc2, 0xc3:
				size = 1
			case 0xc1:
				return b, errCodecType
			case 0xc4, 0xd9:
				hdr, lenBytes = 2, 1
			case 0xc5, 0xda:
				hdr, lenBytes = 3, 2
			case 0xc6, 0xdb:
				hdr, lenBytes = 5, 4
			case 0xc7:
				hdr, lenBytes = 3, 1 // ext8: len, type
			case 0xc8:
				hdr, lenBytes = 4, 2
			case 0xc9:
				hdr, lenBytes = 6, 4
			case 0xca:
				size = 5
			case 0xcb:
				size = 9
			case 0xcc, 0xd0:
				size = 2
			case 0xcd, 0xd1:
				size = 3
			case 0xce, 0xd2:
				size = 5
			case 0xcf, 0xd3:
				size = 9
			case 0xd4:
				size = 3
			case 0xd5:
				size = 4
			case 0xd6:
				size = 6
			case 0xd7:
				size = 10
			case 0xd8:
				size = 18
			case 0xdc, 0xde:
				if len(b) < 3 {
					return b, errCodecShort
				}
				size, elems = 3, uint64(binary.BigEndian.Uint16(b[1:3]))
			case 0xdd, 0xdf:
				if len(b) < 5 {
					return b, errCodecShort
				}
				size, elems = 5, uint64(binary.BigEndian.Uint32(b[1:5]))
			}
			if c == 0xde || c == 0xdf {
				elems *= 2
			}
			if lenBytes > 0 {
				if len(b) < hdr {
					return b, errCodecShort
				}
				var l uint64
				switch lenBytes {
				case 1:
					l = uint64(b[1])
				case 2:
					l = uint64(binary.BigEndian.Uint16(b[1:3]))
				case 4:
					l = uint64(binary.BigEndian.Uint32(b[1:5]))
				}
				size = uint64(hdr) + l
			}
		}
		if size > uint64(len(b)) {
			return b, errCodecShort
		}
		b = b[size:]
		if elems > 0 {
			if elems > uint64(len(b)) {
				return b, errCodecShort
			}
			if depth+1 >= codecMaxDepth {
				return b, errCodecDepth
			}
			depth++
			pending[depth] = elems
		}
	}
}

// PeekRank returns the DP rank in a batch payload's envelope (data_parallel_rank or
// attn_dp_rank) without decoding the events; ok is false when the envelope has no rank or a nil
// one. The bind-mode collector uses it to keep one cursor per (topic, rank). Errors wrap
// ErrMalformed.
func PeekRank(payload []byte) (rank int32, ok bool, err error) {
	var tmp indexer.Batch
	b := payload
	if len(b) == 0 {
		return 0, false, codecErr("peek rank", errCodecShort)
	}
	switch {
	case isArrayLead(b[0]):
		n, o, err := msgp.ReadArrayHeaderBytes(b)
		if err != nil {
			return 0, false, codecErr("peek rank", errCodecShort)
		}
		if n < 3 {
			return 0, false, nil
		}
		b = o
		for range 2 {
			if b, err = codecSkip(b); err != nil {
				return 0, false, codecErr("peek rank", err)
			}
		}
		if _, err = codecReadRank(b, &tmp); err != nil {
			return 0, false, codecErr("peek rank", err)
		}
	case isMapLead(b[0]):
		n, o, err := msgp.ReadMapHeaderBytes(b)
		if err != nil {
			return 0, false, codecErr("peek rank", errCodecShort)
		}
		b = o
		for range n {
			var key []byte
			if key, b, err = msgp.ReadMapKeyZC(b); err != nil {
				return 0, false, codecErr("peek rank", errCodecType)
			}
			switch string(key) {
			case "data_parallel_rank", "attn_dp_rank":
				b, err = codecReadRank(b, &tmp)
			default:
				b, err = codecSkip(b)
			}
			if err != nil {
				return 0, false, codecErr("peek rank", err)
			}
		}
	default:
		return 0, false, codecErr("peek rank", errCodecType)
	}
	return tmp.DPRank, tmp.HasDPRank, nil
}
