package kvbridge

import (
	"errors"
	"fmt"

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
// which it resets first. It is decodeBatchRejected without the count; see there for the rules.
func DecodeBatch(payload []byte, dst *indexer.Batch) error {
	_, err := decodeBatchRejected(payload, dst)
	return err
}

// decodeBatchRejected decodes one msgpack event batch into dst and returns how many events it
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
func decodeBatchRejected(payload []byte, dst *indexer.Batch) (rejected int, err error) {
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
