// Package kvbridge turns engines' KV-cache event streams into in-order, engine-neutral batches
// for the index (pkg/indexer), following the event stream rules of DESIGN.md §6.
//
// Pieces, and when to choose which:
//
//   - codec.go: the ZMQ/msgpack codec of vLLM, SGLang and TokenSpeed KV events
//     (wire/vllm-zmq.md). DecodeBatch decodes a payload into a reusable indexer.Batch without
//     reflection and without per-block allocations; EncodeBatch writes the same formats (array or
//     map events, int or bytes hashes, 2- or 3-element envelope) for the simulator, the
//     publisher and tests. ParseLive, parseSeq and ParseReplayReply (both replay layouts) handle
//     the frames around the payload; peekRank reads only the envelope rank.
//   - ZMQSource (zmq_source.go): one worker whose engine binds its PUB (vLLM's default). One SUB
//     per DP rank (rank r on port+r), cursor per rank, replay from 0 on connect, gap repair
//     through the engine's ROUTER, restart detection, reconnect with jittered backoff.
//   - ZMQCollector (zmq_collector.go): bind mode (`--kv-listen`), for publishers that connect to
//     the gateway (llm-d's simulator): one bound SUB, batches attributed to workers by topic.
//   - Publisher (publisher.go): a vLLM-faithful PUB + ROUTER replay publisher with fault hooks,
//     used by the simulator, `kvbridge serve` tests and component tests.
//   - The gRPC SubscribeKvEvents client and server (grpc_*.go) for `grpc://` workers and
//     `kvbridge serve`.
//   - Snapshots for late subscribers (blockset.go, snapshot.go): BridgeServer keeps each rank's
//     current block set (stored and not removed, compacted, bounded) from its first batch on.
//     Once its history has rolled over, a subscription from 0 (or, for a client sending
//     MDAcceptSnapshot, from a cursor outside the history) opens with that state as ordinary
//     KvEventBatch messages: per rank a KvCacheCleared, then the blocks as stored chains
//     (parents first; removed ancestors of live blocks stored and then removed, so every key
//     replays exactly), numbered to end at the sequence number S the state was taken at, under
//     the lock that appends to the history; live batches follow from S+1. The wire contract
//     (wire/smg-grpc.md) has no snapshot message, so the response headers MDSnapshotFirst and
//     MDSnapshotLast say which batches form it: GRPCSource then counts no gap, duplicate or
//     skip for it, and starts over from 0 when a stream is cut inside it. An SMG client needs
//     no header: the batches continue one another like any stream's first batches.
//
// Every source delivers into a Consumer (source.go); SinkConsumer adapts an indexer.Sink.
// Metrics (metrics.go) are injected; a nil *Metrics disables them.
package kvbridge
