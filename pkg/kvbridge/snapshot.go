package kvbridge

import (
	"github.com/kvgate/kvgate/api/common"
)

// Metadata keys of the snapshot encoding (docs/reliability.md, "Late joiners"). The contract of
// wire/smg-grpc.md has no snapshot message, so a snapshot travels as ordinary KvEventBatch
// messages and these headers only say which of them form it.
const (
	// MDAcceptSnapshot, sent by a client with any value, says that it applies a snapshot
	// answered to a cursor outside the history (instead of OUT_OF_RANGE). kvgate's client sends it.
	MDAcceptSnapshot = "kvbridge-accept-snapshot"
	// MDSnapshotFirst and MDSnapshotLast, response headers, give the sequence numbers of the
	// first and last batch of the snapshot that opens the stream; live batches follow from
	// last+1.
	MDSnapshotFirst = "kvbridge-snapshot-first"
	MDSnapshotLast  = "kvbridge-snapshot-last"
)

// Size bounds of one snapshot batch: far below the 4 MiB a tonic or grpc-go client decodes by
// default (wire/smg-grpc.md §9), even at 256-token blocks (5 bytes a token at most).
const (
	snapshotBatchBlocks = 4096
	snapshotBatchTokens = 1 << 18
)

// rankSet is one DP rank's frozen block set.
type rankSet struct {
	rank int
	set  frozenSet
}

// buildSnapshot encodes ranks' block sets, taken when last was the newest sequence number, as
// batches that leave an empty index holding exactly those sets: per rank (in the given order) a
// KvCacheCleared first, then the blocks as stored chains in creation order (a parent before its
// children), the ghosts among them removed at the end (a ghost whose hash a newer node took
// over is replaced by that node's store, as it was live). The batches are
// numbered last-K+1 .. last, so the live batch last+1 continues them with no gap. Batches are
// bounded by snapshotBatchBlocks and snapshotBatchTokens, unless more batches than last would be
// needed (a history of few, huge batches): then each rank's set is one batch, no larger than the
// batches it was built from in total. len(ranks) must be at most last (every rank published a
// batch).
func buildSnapshot(ranks []rankSet, last uint64, timestamp float64) []*common.KvEventBatch {
	out := encodeSnapshot(ranks, timestamp, snapshotBatchBlocks, snapshotBatchTokens)
	if uint64(len(out)) > last {
		out = encodeSnapshot(ranks, timestamp, 0, 0)
	}
	first := last - uint64(len(out)) + 1
	for i, b := range out {
		b.SequenceNumber = first + uint64(i)
	}
	return out
}

// snapshotWriter accumulates snapshot batches of one rank. maxBlocks and maxTokens of 0 mean
// unbounded.
type snapshotWriter struct {
	out                  []*common.KvEventBatch
	rank                 int32
	ts                   float64
	maxBlocks, maxTokens int
	cur                  *common.KvEventBatch
	blocks, tokens       int
	// chain is the stored event being extended and tip the node its last block is.
	chain *common.KvBlocksStored
	tip   int32
}

func encodeSnapshot(ranks []rankSet, ts float64, maxBlocks, maxTokens int) []*common.KvEventBatch {
	w := &snapshotWriter{ts: ts, maxBlocks: maxBlocks, maxTokens: maxTokens}
	for _, r := range ranks {
		w.writeRank(r)
	}
	return w.out
}

func (w *snapshotWriter) writeRank(r rankSet) {
	w.rank = int32(r.rank)
	w.cur, w.chain = nil, nil
	w.event(&common.KvCacheEvent{Data: &common.KvCacheEvent_Cleared{Cleared: &common.KvCacheCleared{}}})
	nodes := r.set.nodes
	// ghost says, per hash stored so far, whether its last stored node is a ghost.
	ghost := map[int64]bool{}
	for i := r.set.head; i != noNode; i = nodes[i].next {
		n := &nodes[i]
		// A node with the hash of an older one (a ghost) takes the hash over, as the live
		// store did: a client moves a re-stored hash (pkg/indexer), and the ghost may be
		// this node's own parent, so it must not be removed before.
		w.block(nodes, i)
		ghost[n.blk.GetBlockHash()] = !n.live
	}
	var ghosts []int64
	for i := r.set.head; i != noNode; i = nodes[i].next {
		if h := nodes[i].blk.GetBlockHash(); !nodes[i].live && ghost[h] {
			ghosts = append(ghosts, h)
			delete(ghost, h)
		}
	}
	if len(ghosts) > 0 {
		w.removed(ghosts)
	}
}

// block writes node i, extending the open chain when i continues it.
func (w *snapshotWriter) block(nodes []blockNode, i int32) {
	n := &nodes[i]
	bs := int(n.blk.GetBlockSize())
	if bs <= 0 {
		bs = len(n.blk.GetTokenIds())
	}
	if w.full(1, bs) {
		w.flush()
	}
	if c := w.chain; c != nil && n.parent == w.tip && sameKind(c.Blocks[0], n.blk) {
		c.Blocks = append(c.Blocks, n.blk)
	} else {
		st := &common.KvBlocksStored{Blocks: []*common.KvBlock{n.blk}}
		if n.parent != noNode {
			p := nodes[n.parent].blk.GetBlockHash()
			st.ParentBlockHash = &p
		}
		w.event(&common.KvCacheEvent{Data: &common.KvCacheEvent_Stored{Stored: st}})
		w.chain = st
	}
	w.tip = i
	w.blocks++
	w.tokens += bs
}

// sameKind reports whether b may extend a stored chain starting with first: one event has one
// block size and one LoRA id (a client takes both from its first block).
func sameKind(first, b *common.KvBlock) bool {
	fs, bs := first.GetBlockSize(), b.GetBlockSize()
	if fs <= 0 {
		fs = int32(len(first.GetTokenIds()))
	}
	if bs <= 0 {
		bs = int32(len(b.GetTokenIds()))
	}
	return fs == bs && (first.LoraId == nil) == (b.LoraId == nil) && first.GetLoraId() == b.GetLoraId()
}

func (w *snapshotWriter) removed(hashes []int64) {
	if w.full(len(hashes), 0) {
		w.flush()
	}
	w.event(&common.KvCacheEvent{Data: &common.KvCacheEvent_Removed{Removed: &common.KvBlocksRemoved{BlockHashes: hashes}}})
	w.chain = nil
	w.blocks += len(hashes)
}

// full reports whether adding blocks and tokens would take the open batch past a bound.
func (w *snapshotWriter) full(blocks, tokens int) bool {
	if w.cur == nil || w.blocks == 0 {
		return false
	}
	return (w.maxBlocks > 0 && w.blocks+blocks > w.maxBlocks) || (w.maxTokens > 0 && w.tokens+tokens > w.maxTokens)
}

func (w *snapshotWriter) flush() { w.cur, w.chain = nil, nil }

func (w *snapshotWriter) event(ev *common.KvCacheEvent) {
	if w.cur == nil {
		r := w.rank
		w.cur = &common.KvEventBatch{Timestamp: w.ts, DpRank: &r}
		w.out = append(w.out, w.cur)
		w.blocks, w.tokens = 0, 0
	}
	w.cur.Events = append(w.cur.Events, ev)
}
