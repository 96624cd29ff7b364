package kvbridge

import (
	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/pkg/indexer"
)

// ProtoDecoder converts gRPC KvEventBatch messages (wire/smg-grpc.md §2.2) into
// indexer.Batch values, reusing its hash and token storage from call to call so that steady-state
// decoding does not allocate per block. The zero value is ready to use. It must not be used by
// two goroutines at once.
type ProtoDecoder struct {
	hashes []uint64
	tokens []uint32
}

// Decode converts src into dst, reusing dst's Events slice. It returns the number of events it
// skipped as malformed (a stored event with no blocks, blocks of differing sizes or with token
// counts that are not block_size, an event with no data or of an unknown kind).
//
// Conversion rules: the blocks of one KvBlocksStored become one EventStored whose Tokens are
// the blocks' token_ids concatenated; an unset parent_block_hash, or 0, means the chain starts at
// position 0 (HasParent false), as on the ZMQ side; int64 hashes are reinterpreted as uint64
// (the same 64 bits); block_size 0 is inferred from the first block's token count; the LoRA id
// is taken from the first block. dst.DPRank/HasDPRank copy dp_rank. The hash and token slices of
// dst's events point into d's storage and are overwritten by the next Decode. It walks the
// batch once, event by event, into reused storage; its length is the conversion table above.
func (d *ProtoDecoder) Decode(dst *indexer.Batch, src *common.KvEventBatch) (malformed int) {
	dst.Reset()
	dst.Seq = src.GetSequenceNumber()
	dst.Timestamp = src.GetTimestamp()
	if src.DpRank != nil {
		dst.DPRank, dst.HasDPRank = *src.DpRank, true
	}

	// Size the arenas first so that sub-slices handed to events are never moved by a later
	// append (an append that reallocates would leave earlier events pointing at stale memory).
	nHashes, nTokens := 0, 0
	for _, ev := range src.GetEvents() {
		switch x := ev.GetData().(type) {
		case *common.KvCacheEvent_Stored:
			for _, b := range x.Stored.GetBlocks() {
				nHashes++
				nTokens += len(b.GetTokenIds())
			}
		case *common.KvCacheEvent_Removed:
			nHashes += len(x.Removed.GetBlockHashes())
		}
	}
	hashes := growU64(d.hashes, nHashes)
	tokens := growU32(d.tokens, nTokens)

	for _, ev := range src.GetEvents() {
		switch x := ev.GetData().(type) {
		case *common.KvCacheEvent_Stored:
			blocks := x.Stored.GetBlocks()
			if len(blocks) == 0 {
				malformed++
				continue
			}
			bs := int(blocks[0].GetBlockSize())
			if bs <= 0 {
				bs = len(blocks[0].GetTokenIds())
			}
			ok := bs > 0
			for _, b := range blocks {
				if (b.GetBlockSize() != 0 && int(b.GetBlockSize()) != bs) || len(b.GetTokenIds()) != bs {
					ok = false
					break
				}
			}
			if !ok {
				malformed++
				continue
			}
			h0, t0 := len(hashes), len(tokens)
			for _, b := range blocks {
				hashes = append(hashes, uint64(b.GetBlockHash()))
				tokens = append(tokens, b.GetTokenIds()...)
			}
			e := indexer.Event{
				Kind:      indexer.EventStored,
				Hashes:    hashes[h0:len(hashes):len(hashes)],
				Tokens:    tokens[t0:len(tokens):len(tokens)],
				BlockSize: bs,
			}
			if p := x.Stored.ParentBlockHash; p != nil && *p != 0 {
				e.Parent, e.HasParent = uint64(*p), true
			}
			if l := blocks[0].LoraId; l != nil {
				e.LoraID, e.HasLoraID = *l, true
			}
			dst.Events = append(dst.Events, e)
		case *common.KvCacheEvent_Removed:
			h0 := len(hashes)
			for _, h := range x.Removed.GetBlockHashes() {
				hashes = append(hashes, uint64(h))
			}
			dst.Events = append(dst.Events, indexer.Event{
				Kind:   indexer.EventRemoved,
				Hashes: hashes[h0:len(hashes):len(hashes)],
			})
		case *common.KvCacheEvent_Cleared:
			dst.Events = append(dst.Events, indexer.Event{Kind: indexer.EventCleared})
		default:
			// No data, or an event kind added by a later upstream version.
			malformed++
		}
	}
	d.hashes, d.tokens = hashes, tokens
	return malformed
}

// batchToProto converts b, published by DP rank rank, into a new KvEventBatch with the given
// sequence number. eventID is the id of the first event; ids increase by one per event (they
// are informational, wire/smg-grpc.md §2.2). The result shares no memory with b. A stored event
// whose Tokens are not BlockSize per hash is sent with empty token_ids (the gateway hashes
// token ids itself, so such blocks are unusable but keep their hashes for removals).
func batchToProto(rank int, seq, eventID uint64, b *indexer.Batch) *common.KvEventBatch {
	r := int32(rank)
	out := &common.KvEventBatch{
		SequenceNumber: seq,
		Timestamp:      b.Timestamp,
		DpRank:         &r,
		Events:         make([]*common.KvCacheEvent, 0, len(b.Events)),
	}
	for i := range b.Events {
		e := &b.Events[i]
		ev := &common.KvCacheEvent{EventId: eventID}
		eventID++
		switch e.Kind {
		case indexer.EventStored:
			st := &common.KvBlocksStored{Blocks: make([]*common.KvBlock, len(e.Hashes))}
			if e.HasParent {
				p := int64(e.Parent)
				st.ParentBlockHash = &p
			}
			split := e.BlockSize > 0 && len(e.Tokens) == e.BlockSize*len(e.Hashes)
			for j, h := range e.Hashes {
				blk := &common.KvBlock{BlockHash: int64(h), BlockSize: int32(e.BlockSize)}
				if split {
					blk.TokenIds = append([]uint32(nil), e.Tokens[j*e.BlockSize:(j+1)*e.BlockSize]...)
				}
				if e.HasLoraID {
					l := e.LoraID
					blk.LoraId = &l
				}
				st.Blocks[j] = blk
			}
			ev.Data = &common.KvCacheEvent_Stored{Stored: st}
		case indexer.EventRemoved:
			rm := &common.KvBlocksRemoved{BlockHashes: make([]int64, len(e.Hashes))}
			for j, h := range e.Hashes {
				rm.BlockHashes[j] = int64(h)
			}
			ev.Data = &common.KvCacheEvent_Removed{Removed: rm}
		case indexer.EventCleared:
			ev.Data = &common.KvCacheEvent_Cleared{Cleared: &common.KvCacheCleared{}}
		default:
			continue
		}
		out.Events = append(out.Events, ev)
	}
	return out
}

func growU64(s []uint64, n int) []uint64 {
	if cap(s) < n {
		return make([]uint64, 0, n)
	}
	return s[:0]
}

func growU32(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, 0, n)
	}
	return s[:0]
}
