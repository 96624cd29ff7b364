package kvbridge

import (
	"encoding/binary"

	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// EnvelopeFormat selects the batch envelope shape (wire/vllm-zmq.md §3).
type EnvelopeFormat uint8

const (
	// Envelope3 is [ts, events, rank]: current vLLM, SGLang and TokenSpeed. The rank is nil when
	// the batch has none. The zero value.
	Envelope3 EnvelopeFormat = iota
	// Envelope2 is [ts, events]: vLLM before its DP-rank change, older SGLang.
	Envelope2
	// EnvelopeMap is {ts, events, <rank key>}: one intermediate vLLM main-branch revision.
	EnvelopeMap
)

// EncodeOptions selects among the wire variants an engine may emit. The zero value encodes
// like vLLM ≤ v0.23 with int hashes: array events, 3-element envelope, rank key
// data_parallel_rank, no-parent as nil.
type EncodeOptions struct {
	// MapEvents encodes events as "type"-tagged maps (vLLM after PR #42892, SGLang after PR
	// #37482) instead of tag-first arrays.
	MapEvents bool
	// BytesHashes encodes block hashes and parents as msgpack bin digests
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) instead of unsigned ints.
	BytesHashes bool
	// Digest returns the 32-byte digest written for hash h when BytesHashes is set. It must end
	// with h's 8 big-endian bytes so the decoder folds it back to h (wire/vllm-zmq.md §6). Nil
	// derives one: 24 deterministic pseudo-random bytes from h (splitmix64), then h big-endian.
	Digest func(h uint64) [32]byte
	// Envelope is the batch envelope shape.
	Envelope EnvelopeFormat
	// RankKey is the envelope map's rank key for EnvelopeMap: "" means "data_parallel_rank"
	// (vLLM); SGLang and TokenSpeed use "attn_dp_rank".
	RankKey string
	// ZeroParent writes "no parent" as the integer 0 (llm-d's simulator) instead of nil.
	ZeroParent bool
	// ExtraKeys, when set, gives the multimodal extra keys of the stored block with hash h
	// (nil: none); a BlockStored with some written gets extra_keys (codec_encode_extra.go).
	ExtraKeys func(h uint64) []ExtraKey
	// ExtraKeyPairs writes each key as an [identifier, offset] pair (vLLM's current form)
	// instead of the bare identifier (the form vLLM first published).
	ExtraKeyPairs bool
}

// EncodeBatch appends the msgpack encoding of b (frame 2 of a message) to dst and returns it.
// b.Seq is not part of the payload (it travels in frame 1). BlockStored events carry
// block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium and lora_name (nil when
// unset; medium "" is nil), the fields every current engine writes; BlockRemoved carries
// block_hashes and medium. Encoding allocates only to grow dst.
func EncodeBatch(dst []byte, b *indexer.Batch, opts EncodeOptions) []byte {
	switch opts.Envelope {
	case Envelope2:
		dst = msgp.AppendArrayHeader(dst, 2)
	case EnvelopeMap:
		dst = msgp.AppendMapHeader(dst, 3)
		dst = msgp.AppendString(dst, "ts")
	default:
		dst = msgp.AppendArrayHeader(dst, 3)
	}
	dst = msgp.AppendFloat64(dst, b.Timestamp)
	if opts.Envelope == EnvelopeMap {
		dst = msgp.AppendString(dst, "events")
	}
	dst = msgp.AppendArrayHeader(dst, uint32(len(b.Events)))
	for i := range b.Events {
		dst = encodeEvent(dst, &b.Events[i], &opts)
	}
	switch opts.Envelope {
	case Envelope2:
		return dst
	case EnvelopeMap:
		key := opts.RankKey
		if key == "" {
			key = "data_parallel_rank"
		}
		dst = msgp.AppendString(dst, key)
	}
	if b.HasDPRank {
		return msgp.AppendInt64(dst, int64(b.DPRank))
	}
	return msgp.AppendNil(dst)
}

func encodeEvent(dst []byte, ev *indexer.Event, o *EncodeOptions) []byte {
	switch ev.Kind {
	case indexer.EventStored:
		n := uint32(8)
		extra := hasExtraKeys(ev, o)
		if extra {
			n++
		}
		if o.MapEvents {
			dst = msgp.AppendMapHeader(dst, n)
			dst = msgp.AppendString(dst, "type")
		} else {
			dst = msgp.AppendArrayHeader(dst, n)
		}
		dst = msgp.AppendString(dst, tagStored)
		dst = encodeKey(dst, o, "block_hashes")
		dst = encodeHashes(dst, ev.Hashes, o)
		dst = encodeKey(dst, o, "parent_block_hash")
		switch {
		case ev.HasParent && ev.Parent != 0:
			dst = encodeHash(dst, ev.Parent, o)
		case o.ZeroParent:
			dst = msgp.AppendUint64(dst, 0)
		default:
			dst = msgp.AppendNil(dst)
		}
		dst = encodeKey(dst, o, "token_ids")
		dst = msgp.AppendArrayHeader(dst, uint32(len(ev.Tokens)))
		for _, t := range ev.Tokens {
			dst = msgp.AppendUint64(dst, uint64(t))
		}
		dst = encodeKey(dst, o, "block_size")
		dst = msgp.AppendInt64(dst, int64(ev.BlockSize))
		dst = encodeKey(dst, o, "lora_id")
		if ev.HasLoraID {
			dst = msgp.AppendInt64(dst, ev.LoraID)
		} else {
			dst = msgp.AppendNil(dst)
		}
		dst = encodeKey(dst, o, "medium")
		dst = encodeOptString(dst, ev.Medium)
		dst = encodeKey(dst, o, "lora_name")
		dst = encodeOptString(dst, ev.LoraName)
		if extra {
			dst = encodeKey(dst, o, "extra_keys")
			dst = encodeExtraKeys(dst, ev, o)
		}
		return dst
	case indexer.EventRemoved:
		if o.MapEvents {
			dst = msgp.AppendMapHeader(dst, 3)
			dst = msgp.AppendString(dst, "type")
		} else {
			dst = msgp.AppendArrayHeader(dst, 3)
		}
		dst = msgp.AppendString(dst, tagRemoved)
		dst = encodeKey(dst, o, "block_hashes")
		dst = encodeHashes(dst, ev.Hashes, o)
		dst = encodeKey(dst, o, "medium")
		return encodeOptString(dst, ev.Medium)
	default: // indexer.EventCleared; an unknown kind is written as a clear too, the safe reading
		if o.MapEvents {
			dst = msgp.AppendMapHeader(dst, 1)
			dst = msgp.AppendString(dst, "type")
		} else {
			dst = msgp.AppendArrayHeader(dst, 1)
		}
		return msgp.AppendString(dst, tagCleared)
	}
}

func encodeKey(dst []byte, o *EncodeOptions, key string) []byte {
	if o.MapEvents {
		return msgp.AppendString(dst, key)
	}
	return dst
}

func encodeOptString(dst []byte, s string) []byte {
	if s == "" {
		return msgp.AppendNil(dst)
	}
	return msgp.AppendString(dst, s)
}

func encodeHashes(dst []byte, hs []uint64, o *EncodeOptions) []byte {
	dst = msgp.AppendArrayHeader(dst, uint32(len(hs)))
	for _, h := range hs {
		dst = encodeHash(dst, h, o)
	}
	return dst
}

func encodeHash(dst []byte, h uint64, o *EncodeOptions) []byte {
	if !o.BytesHashes {
		return msgp.AppendUint64(dst, h)
	}
	var d [32]byte
	if o.Digest != nil {
		d = o.Digest(h)
	} else {
		d = DeriveDigest(h)
	}
	return msgp.AppendBytes(dst, d[:])
}

// DeriveDigest returns the 32-byte stand-in digest EncodeBatch writes for hash h in bytes mode
// when EncodeOptions.Digest is nil: 24 bytes from a splitmix64 sequence seeded with h, then h
// big-endian, so that foldHashBytes(d[:]) == h.
func DeriveDigest(h uint64) [32]byte {
	var d [32]byte
	x := h
	for i := 0; i < 24; i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		binary.BigEndian.PutUint64(d[i:], z)
	}
	binary.BigEndian.PutUint64(d[24:], h)
	return d
}
