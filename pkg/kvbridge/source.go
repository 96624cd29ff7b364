package kvbridge

import (
	"sync/atomic"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Consumer receives the event stream of one worker from a source (ZMQ subscriber or gRPC
// client) after the source has applied the stream rules of DESIGN.md §6: batches arrive per
// rank in sequence order, with duplicates skipped and gaps either repaired by replay or turned
// into a Reset. Calls for one source come from one goroutine. The batch and its slices are
// only valid during the call.
type Consumer interface {
	// Batch delivers one in-order batch of DP rank rank. It returns true when the consumer
	// found the stream inconsistent (a stored chain with an unknown parent) and asks the source
	// to resync that rank; the source rate-limits such requests (at most one per 30 s).
	Batch(rank int, b *indexer.Batch) (resync bool)
	// Reset says that everything known about rank's cache must be dropped: the publisher
	// restarted, a gap could not be repaired, or the server answered OUT_OF_RANGE/DATA_LOSS.
	Reset(rank int, reason string)
}

// SinkConsumer adapts an indexer.Sink to a Consumer: rank r of the stream is applied as
// worker IDs[r] (a single-rank worker has one ID). It is how the gateway feeds its index.
// It must not be copied once in use.
type SinkConsumer struct {
	Sink indexer.Sink
	IDs  []indexer.WorkerID
	// forgotten has bit r set (bit 63 for ranks ≥ 63) while rank r's worker was cleared in the
	// sink behind the stream's back (Forget) and the stream has not been reset since.
	forgotten atomic.Uint64
}

// Batch applies b to the sink and asks for a resync when a parent was unknown, or while the
// rank's worker is forgotten: its stream goes on from its cursor, but the blocks before it are
// gone from the sink, so only a rebuild from 0 brings them back.
func (c *SinkConsumer) Batch(rank int, b *indexer.Batch) bool {
	id, ok := c.id(rank)
	if !ok {
		return false
	}
	res := c.Sink.Apply(id, b.Events)
	return res.UnknownParents > 0 || c.forgotten.Load()&rankBit(rank) != 0
}

// Reset clears the rank's worker in the sink.
func (c *SinkConsumer) Reset(rank int, _ string) {
	c.forgotten.And(^rankBit(rank))
	if id, ok := c.id(rank); ok {
		c.Sink.ResetWorker(id)
	}
}

// Forget clears every rank's worker in the sink, outside the stream (a worker down for a
// while, whose engine may have come back empty), and makes the following batches ask for the
// resync that rebuilds the view from the publisher's buffer, until the stream resets.
func (c *SinkConsumer) Forget() {
	c.forgotten.Store(^uint64(0))
	for _, id := range c.IDs {
		c.Sink.ResetWorker(id)
	}
}

func rankBit(rank int) uint64 { return 1 << min(uint(rank), 63) }

func (c *SinkConsumer) id(rank int) (indexer.WorkerID, bool) {
	if rank < 0 || rank >= len(c.IDs) {
		return 0, false
	}
	return c.IDs[rank], true
}

// StreamState is the connection state of an event source, as shown in metrics and /workers.
type StreamState int32

const (
	// StreamConnecting: not yet connected, or reconnecting after a failure.
	StreamConnecting StreamState = iota
	// StreamUp: connected and receiving (or waiting for) batches.
	StreamUp
	// StreamDown: the last attempt failed; the source is backing off before retrying.
	StreamDown
	// StreamUnavailable: the worker has no event stream (gRPC UNIMPLEMENTED); the router uses
	// the approximate tree for it. Final: the source does not retry.
	StreamUnavailable
	// StreamStopped: Run has returned.
	StreamStopped
)

// String returns the lower-case state name.
func (s StreamState) String() string {
	switch s {
	case StreamConnecting:
		return "connecting"
	case StreamUp:
		return "up"
	case StreamDown:
		return "down"
	case StreamUnavailable:
		return "unavailable"
	case StreamStopped:
		return "stopped"
	}
	return "unknown"
}

// stateCell holds a StreamState readable from any goroutine, and tells notify (when set) of
// every store. It must not be copied.
type stateCell struct {
	v      atomic.Int32
	notify func(StreamState)
}

func (c *stateCell) load() StreamState { return StreamState(c.v.Load()) }

// store tells notify before it stores, so that whoever sees the new state through load also
// sees what notify did with it.
func (c *stateCell) store(s StreamState) {
	if c.notify != nil {
		c.notify(s)
	}
	c.v.Store(int32(s))
}

var _ Consumer = (*SinkConsumer)(nil)
