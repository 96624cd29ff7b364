package indexer

import (
	"encoding/binary"
	"strconv"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// HashSeed is the XXH3-64 seed of every block key (DESIGN.md §3), identical to SMG's and
// Dynamo's so that indexes are comparable.
const HashSeed = 1337

// littleEndian reports whether this machine stores a uint32 as little-endian bytes, in which
// case a []uint32 can be hashed in place (DESIGN.md §3 hashes tokens as LE u32).
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// ContentHash returns the content hash of one block: XXH3-64 seed 1337 over the tokens written
// as consecutive little-endian u32. It does not allocate.
func ContentHash(tokens []uint32) uint64 {
	if len(tokens) == 0 {
		return xxh3.HashSeed(nil, HashSeed)
	}
	if littleEndian {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens))
		return xxh3.HashSeed(b, HashSeed)
	}
	return contentHashPortable(tokens)
}

// contentHashPortable is the byte-order independent form of ContentHash; it streams the tokens
// through a stack buffer.
func contentHashPortable(tokens []uint32) uint64 {
	var buf [512]byte
	if 4*len(tokens) <= len(buf) {
		for i, t := range tokens {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		return xxh3.HashSeed(buf[:4*len(tokens)], HashSeed)
	}
	h := xxh3.NewSeed(HashSeed)
	for len(tokens) > 0 {
		n := min(len(tokens), len(buf)/4)
		for i, t := range tokens[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		_, _ = h.Write(buf[:4*n])
		tokens = tokens[n:]
	}
	return h.Sum64()
}

// ChainHash returns the prefix hash of a block after the first: XXH3-64 seed 1337 over the
// parent's prefix hash then the block's content hash, both as LE u64 (DESIGN.md §3).
func ChainHash(parentPrefix, content uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parentPrefix)
	binary.LittleEndian.PutUint64(b[8:], content)
	return xxh3.HashSeed(b[:], HashSeed)
}

// RootHash returns the prefix hash of block 0 from its content hash: the content hash itself
// without a namespace, else XXH3-64 seed 1337 over content(0) as LE u64 followed by the UTF-8
// bytes of namespace (DESIGN.md §3). It allocates only for namespaces over 248 bytes.
func RootHash(content uint64, namespace string) uint64 {
	if namespace == "" {
		return content
	}
	var buf [256]byte
	var b []byte
	if 8+len(namespace) <= len(buf) {
		b = buf[:8+len(namespace)]
	} else {
		b = make([]byte, 8+len(namespace))
	}
	binary.LittleEndian.PutUint64(b[:8], content)
	copy(b[8:], namespace)
	return xxh3.HashSeed(b, HashSeed)
}

// AppendBlockKeys appends to dst the prefix hashes (block keys) of every full block of tokens
// split into blockSize chunks, with namespace mixed into block 0 when it is non-empty, and
// returns the extended slice. A trailing partial block has no key; blockSize < 1 yields no
// keys. Given a dst with enough capacity it does not allocate, so callers keep one buffer per
// goroutine (or take one from a pool) and pass dst[:0].
func AppendBlockKeys(dst []uint64, tokens []uint32, blockSize int, namespace string) []uint64 {
	if blockSize < 1 {
		return dst
	}
	n := len(tokens) / blockSize
	var prefix uint64
	for i := 0; i < n; i++ {
		c := ContentHash(tokens[i*blockSize : (i+1)*blockSize])
		if i == 0 {
			prefix = RootHash(c, namespace)
		} else {
			prefix = ChainHash(prefix, c)
		}
		dst = append(dst, prefix)
	}
	return dst
}

// appendChainKeys appends the keys of the full blocks of tokens continuing a chain whose last
// block has prefix hash parent (hasParent) or starting at block 0 under namespace.
func appendChainKeys(dst []uint64, tokens []uint32, blockSize int, parent uint64, hasParent bool, namespace string) []uint64 {
	if !hasParent {
		return AppendBlockKeys(dst, tokens, blockSize, namespace)
	}
	n := len(tokens) / blockSize
	prefix := parent
	for i := 0; i < n; i++ {
		prefix = ChainHash(prefix, ContentHash(tokens[i*blockSize:(i+1)*blockSize]))
		dst = append(dst, prefix)
	}
	return dst
}

// Namespace returns the namespace string N of DESIGN.md §3 for a LoRA adapter and cache salt:
// the adapter name, else "lora:<id>" when only an id is known, then "|salt:<salt>" when salt is
// non-empty; "" (no namespace) for the base model without a salt. Requests and events must use
// the same inputs: a request naming adapter "x" matches events with lora_name "x".
func Namespace(loraName string, loraID int64, hasLoraID bool, salt string) string {
	var n string
	switch {
	case loraName != "":
		n = loraName
	case hasLoraID:
		n = "lora:" + strconv.FormatInt(loraID, 10)
	}
	if salt != "" {
		n += "|salt:" + salt
	}
	return n
}

// ExtraKeys accumulates the extra keys of one block (the engine's multimodal item
// identifiers, in order) into the hash ExtraContentHash mixes into the block's content hash:
// XXH3-64 seed 1337 over each key's bytes followed by one 0x00 byte. The zero value has no
// keys; Sum is 0 then.
type ExtraKeys struct {
	h *xxh3.Hasher
	n int
}

// Add appends one key.
func (x *ExtraKeys) Add(key []byte) {
	if x.h == nil {
		x.h = xxh3.NewSeed(HashSeed)
	}
	_, _ = x.h.Write(key)
	_, _ = x.h.Write([]byte{0})
	x.n++
}

// Sum returns the keys' hash, 0 when none were added (a hash of 0 is moved to 1, so that 0
// keeps meaning "no extra keys").
func (x *ExtraKeys) Sum() uint64 {
	if x.n == 0 {
		return 0
	}
	if h := x.h.Sum64(); h != 0 {
		return h
	}
	return 1
}

// ExtraKeysHash is the ExtraKeys hash of keys (0 for none).
func ExtraKeysHash(keys ...string) uint64 {
	var x ExtraKeys
	for _, k := range keys {
		x.Add([]byte(k))
	}
	return x.Sum()
}

// ExtraContentHash is the content hash of a block with extra keys: XXH3-64 seed 1337 over the
// tokens' content hash then the extra keys' hash, both as LE u64; a block without them (extra
// 0) keeps its content hash. A block holding an image's tokens thus never has the key of a
// text block, nor of another image's block, with the same token ids.
func ExtraContentHash(content, extra uint64) uint64 {
	if extra == 0 {
		return content
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], content)
	binary.LittleEndian.PutUint64(b[8:], extra)
	return xxh3.HashSeed(b[:], HashSeed)
}

// AppendBlockKeysExtra is AppendBlockKeys with per-block extra-key hashes (extra[i] for block
// i; missing entries are 0): the keys of blocks stored by an engine that reported those extra
// keys.
func AppendBlockKeysExtra(dst []uint64, tokens []uint32, blockSize int, namespace string, extra []uint64) []uint64 {
	return appendChainKeysExtra(dst, tokens, blockSize, 0, false, namespace, extra)
}

// appendChainKeysExtra is appendChainKeys with per-block extra-key hashes.
func appendChainKeysExtra(dst []uint64, tokens []uint32, blockSize int, parent uint64, hasParent bool, namespace string, extra []uint64) []uint64 {
	if len(extra) == 0 {
		return appendChainKeys(dst, tokens, blockSize, parent, hasParent, namespace)
	}
	if blockSize < 1 {
		return dst
	}
	n := len(tokens) / blockSize
	prefix := parent
	for i := 0; i < n; i++ {
		c := ContentHash(tokens[i*blockSize : (i+1)*blockSize])
		if i < len(extra) {
			c = ExtraContentHash(c, extra[i])
		}
		if i == 0 && !hasParent {
			prefix = RootHash(c, namespace)
		} else {
			prefix = ChainHash(prefix, c)
		}
		dst = append(dst, prefix)
	}
	return dst
}
