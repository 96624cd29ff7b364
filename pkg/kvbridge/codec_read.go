package kvbridge

import (
	"encoding/binary"
	"math"

	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// The msgpack readers under the codec: scalars of the wire's types, hashes folded to 64 bits
// (wire/vllm-zmq.md §6), array headers bounded by the bytes left, and a non-recursive skipper.

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
	return foldHashBytes(raw), o, nil
}

// foldHashBytes folds a bytes-mode block hash (a raw digest) to 64 bits: the last 8 bytes read
// big-endian, zero-extended when the digest is shorter (wire/vllm-zmq.md §6). It names the same
// block as the engine's int mode.
func foldHashBytes(d []byte) uint64 {
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

// codecSkip skips one msgpack value of any type without recursion: a fixed stack of pending
// element counts, one per open container, bounded by codecMaxDepth. Every length is checked
// against the bytes left, so a hostile header cannot make it loop or allocate. The format table
// stays in one place, codecItem; this loop only walks containers.
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
		size, elems, err := codecItem(b)
		if err != nil {
			return b, err
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

// codecItem reads the header of the msgpack value at the start of b: size is the bytes of its
// own encoding (header plus payload; for a container, the header only) and elems the values a
// container holds (a map's keys and values both count). It reads only the header, so size may
// exceed len(b); the caller checks.
func codecItem(b []byte) (size, elems uint64, err error) {
	if len(b) == 0 {
		return 0, 0, errCodecShort
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0:
		return 1, 0, nil
	case c <= 0x8f:
		return 1, 2 * uint64(c&0x0f), nil
	case c <= 0x9f:
		return 1, uint64(c & 0x0f), nil
	case c <= 0xbf:
		return 1 + uint64(c&0x1f), 0, nil
	}
	var hdr, lenBytes int
	switch c {
	case 0xc0, 0xc2, 0xc3:
		size = 1
	case 0xc1:
		return 0, 0, errCodecType
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
			return 0, 0, errCodecShort
		}
		size, elems = 3, uint64(binary.BigEndian.Uint16(b[1:3]))
	case 0xdd, 0xdf:
		if len(b) < 5 {
			return 0, 0, errCodecShort
		}
		size, elems = 5, uint64(binary.BigEndian.Uint32(b[1:5]))
	}
	if c == 0xde || c == 0xdf {
		elems *= 2
	}
	if lenBytes > 0 {
		if len(b) < hdr {
			return 0, 0, errCodecShort
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
	return size, elems, nil
}

// peekRank returns the DP rank in a batch payload's envelope (data_parallel_rank or
// attn_dp_rank) without decoding the events; ok is false when the envelope has no rank or a nil
// one. The bind-mode collector uses it to keep one cursor per (topic, rank). Errors wrap
// ErrMalformed.
func peekRank(payload []byte) (rank int32, ok bool, err error) {
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
