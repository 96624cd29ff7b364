package sim

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// BlockHash is the engine-side identity of one full KV block: a SHA-256 digest chained over the
// parent block's digest and the block's token ids, the way vLLM's prefix cache names blocks
// (`--prefix-caching-hash-algo sha256`). Router-side keys are different (DESIGN.md §3); these
// values only travel as opaque identities in KV events.
type BlockHash [32]byte

// Fold returns the 64-bit form vLLM publishes in int-hash mode: the digest read big-endian and
// masked to the low 64 bits, i.e. its last 8 bytes (wire/vllm-zmq.md §6).
func (h BlockHash) Fold() uint64 { return binary.BigEndian.Uint64(h[24:]) }

// rootHash returns the parent digest of block 0 for a given hash seed. vLLM seeds block 0 with
// random bytes unless PYTHONHASHSEED is pinned; the simulator derives it from a seed string so
// that runs are reproducible and two simulators with the same seed name blocks identically.
func rootHash(seed string) BlockHash { return sha256.Sum256([]byte("kvgate-sim-root:" + seed)) }

// hasher computes chained block digests with a reusable scratch buffer. It is not safe for
// concurrent use; each goroutine that hashes owns one.
type hasher struct {
	buf []byte
}

// chain returns sha256(parent || tokens as 4-byte little-endian u32s), followed, for a block
// with media items (keys, the items overlapping it), by 0xff and each item's identifier, a
// 0x00 byte and its offset from the block's first token (start) as a 4-byte LE i32: vLLM's
// block hash takes the (identifier, offset) pairs as extra keys, so a block holding an image
// never has the digest of a text block, nor of another image's, with the same token ids.
func (h *hasher) chain(parent BlockHash, tokens []uint32, keys []indexer.ExtraSpan, start int) BlockHash {
	b := append(h.buf[:0], parent[:]...)
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	if len(keys) > 0 {
		b = append(b, 0xff)
		for _, k := range keys {
			b = append(b, k.Key...)
			b = append(b, 0)
			b = binary.LittleEndian.AppendUint32(b, uint32(int32(k.Start-start)))
		}
	}
	h.buf = b
	return sha256.Sum256(b)
}

// appendChain appends the digests of the full blocks of tokens that are not yet in dst,
// continuing the chain from root (dst[i] names tokens[i*bs:(i+1)*bs], with the media items
// of spans that overlap it). A trailing partial block gets no digest.
func (h *hasher) appendChain(dst []BlockHash, root BlockHash, tokens []uint32, bs int, spans []indexer.ExtraSpan) []BlockHash {
	for i := len(dst); (i+1)*bs <= len(tokens); i++ {
		parent := root
		if i > 0 {
			parent = dst[i-1]
		}
		dst = append(dst, h.chain(parent, tokens[i*bs:(i+1)*bs], indexer.SpansIn(spans, i*bs, (i+1)*bs), i*bs))
	}
	return dst
}
