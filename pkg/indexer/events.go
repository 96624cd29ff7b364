package indexer

// WorkerID names one KV cache in an Index: a worker, or one data-parallel rank of a worker
// when the worker publishes per-rank events. IDs are small dense integers handed out by the
// owner of the Index (the router), so that per-entry worker sets can be bitsets.
type WorkerID uint32

// EventKind says which of the engine-neutral cache events an Event is.
type EventKind uint8

const (
	// EventStored: a chain of full blocks entered the cache (vLLM BlockStored).
	EventStored EventKind = iota + 1
	// EventRemoved: blocks left the cache (vLLM BlockRemoved).
	EventRemoved
	// EventCleared: the whole cache was dropped (vLLM AllBlocksCleared).
	EventCleared
)

// String returns the lower-case name used in logs and in `kvbridge tail` output.
func (k EventKind) String() string {
	switch k {
	case EventStored:
		return "stored"
	case EventRemoved:
		return "removed"
	case EventCleared:
		return "cleared"
	}
	return "unknown"
}

// Event is one engine-neutral KV-cache event, decoded from a ZMQ/msgpack frame or a gRPC
// KvEventBatch by pkg/kvbridge. Slices are owned by whoever decoded the event and are only
// valid during the Sink call that receives it: a Sink that keeps data must copy it. Hashes are
// the engine's block hashes folded to 64 bits (wire/vllm-zmq.md §6); they are opaque
// identities, never block keys (DESIGN.md §3).
type Event struct {
	Kind EventKind

	// Hashes: for EventStored, the engine hashes of the stored blocks in chain order; for
	// EventRemoved, the evicted blocks.
	Hashes []uint64

	// Stored only. Parent is the engine hash of the block before Hashes[0]; HasParent is false
	// when the chain starts at position 0 (the wire sent nil, nothing, or 0).
	Parent    uint64
	HasParent bool
	// Tokens holds every stored block's tokens concatenated, BlockSize per block.
	Tokens    []uint32
	BlockSize int
	// LoraID (when HasLoraID) and LoraName identify the adapter the blocks were computed under.
	LoraID    int64
	HasLoraID bool
	LoraName  string

	// Medium is the storage tier ("GPU", "CPU", ...) or "" when the wire did not say.
	Medium string

	// Extra is, for EventStored, one ExtraKeys hash per block (0: the block has none), or
	// empty when no block has extra keys (multimodal item identifiers and the like, which
	// the engine mixes into the block's hash; ExtraContentHash).
	Extra []uint64
}

// Batch is one publisher step: the events of one engine scheduler step in order.
type Batch struct {
	Seq       uint64
	Timestamp float64
	// DPRank is the publishing data-parallel rank when HasDPRank.
	DPRank    int32
	HasDPRank bool
	Events    []Event
}

// Reset empties b for reuse, keeping the capacity of its slices.
func (b *Batch) Reset() {
	b.Seq, b.Timestamp, b.DPRank, b.HasDPRank = 0, 0, 0, false
	b.Events = b.Events[:0]
}

// ApplyResult reports what a Sink did with a slice of events.
type ApplyResult struct {
	// Stored and Removed count blocks placed and removed.
	Stored, Removed int
	// UnknownParents counts stored chains whose parent the sink did not know for that worker:
	// events were lost upstream, so the chain was not placed and the source should resync.
	UnknownParents int
	// Skipped counts events ignored on purpose (e.g. a non-GPU medium, a malformed chain).
	Skipped int
}

// Sink receives the event stream of each worker cache. pkg/kvbridge delivers into it; *Index
// implements it. Calls for one WorkerID come from one goroutine, in stream order; calls for
// different workers may run concurrently.
type Sink interface {
	// Apply applies events of worker w in order.
	Apply(w WorkerID, events []Event) ApplyResult
	// ResetWorker drops everything known about worker w's cache: the publisher restarted, a gap
	// could not be repaired, or the stream was told to start over. The worker stays known.
	ResetWorker(w WorkerID)
}
