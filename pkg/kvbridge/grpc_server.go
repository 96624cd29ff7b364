package kvbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// DefaultBridgeHistory is the default number of batches a BridgeServer keeps for resuming
// clients.
const DefaultBridgeHistory = 10000

// BridgeConfig configures a BridgeServer.
type BridgeConfig struct {
	// Runtime names the engine service to serve. Only that service is registered, so an SMG gateway's runtime
	// detection (HealthCheck on each service path, wire/smg-grpc.md §8) finds exactly one.
	Runtime worker.Runtime `json:"runtime" yaml:"runtime"`
	// History is how many batches are kept for clients that resume from a cursor or start
	// cold (default DefaultBridgeHistory). It is also the most a slow client may fall behind
	// before its stream ends with DATA_LOSS.
	History int `json:"history" yaml:"history"`
	// SnapshotMaxBlocks bounds each DP rank's current block set, kept for snapshots (default
	// DefaultSnapshotMaxBlocks; set it to at least the engine's GPU block count). Past it the
	// oldest blocks are dropped from the set and counted (SnapshotStats). Negative disables
	// snapshots: no set is kept, and cursor 0 gets the history alone.
	SnapshotMaxBlocks int `json:"snapshot_max_blocks" yaml:"snapshot_max_blocks"`
}

// BridgeServer serves SubscribeKvEvents from batches it is fed as a Consumer: the Go
// counterpart of SMG's Python servicer bridge (DESIGN.md §6, `kvbridge serve`).
//
// It renumbers the batches of all DP ranks into one stream with its own contiguous sequence
// numbers starting at 1, sets dp_rank on each batch, and keeps the last History batches. A
// subscription with cursor 0 gets the whole history and then live batches; a cursor inside
// the history gets the batches after it; a cursor older than the history, or newer than the
// last batch (the bridge restarted), gets OUT_OF_RANGE.
//
// Once the history has rolled over (its oldest batch is not the first), it no longer holds the
// engines' state, so the bridge also keeps each rank's current block set (blockSet) from its
// first batch on, updated under the lock that appends to the history. Cursor 0 then gets a
// snapshot of those sets (buildSnapshot), taken under that lock together with the newest
// sequence number S and numbered to end at S, and the live batches from S+1: no gap and no
// duplicate. A client that sends MDAcceptSnapshot gets the same for a cursor outside the
// history instead of OUT_OF_RANGE. The response headers MDSnapshotFirst and MDSnapshotLast
// name the snapshot's batches (docs/reliability.md, "Late joiners"). Memory is bounded by the history: a
// subscriber reads from it at its own pace, and one that falls more than History batches
// behind gets DATA_LOSS, after which a kvgate or SMG client clears the worker and starts over.
// Reset(rank) publishes a KvCacheCleared batch for that rank.
//
// The other RPCs of the service answer UNIMPLEMENTED, except HealthCheck (healthy). Batch,
// Reset and the RPC handlers are safe for concurrent use. It must not be copied.
type BridgeServer struct {
	cfg BridgeConfig
	log *zap.Logger
	now func() time.Time

	// done is closed by Close; subscribers end with UNAVAILABLE.
	done      chan struct{}
	closeOnce sync.Once

	// mu guards the history and the counters below. Never held while sending to a client.
	mu sync.Mutex
	// ring holds the last len(ring) batches, oldest at ring[start]; n of them are filled.
	ring  []*common.KvEventBatch
	start int
	n     int
	// nextSeq is the sequence number of the next published batch (the first is 1).
	nextSeq uint64
	// nextEventID numbers events across batches (informational on the wire).
	nextEventID uint64
	// wake is closed and replaced on every publish to wake waiting subscribers.
	wake chan struct{}
	// stats counts the snapshots served (the set counters live in the sets).
	stats SnapshotStats
	// sets are the ranks' current block sets (nil when snapshots are disabled), updated by
	// publish in the same critical section that appends to the history.
	sets map[int]*blockSet
}

// SnapshotStats are a BridgeServer's block-set counters.
type SnapshotStats struct {
	// Blocks is the number of live blocks over every rank's set.
	Blocks int `json:"blocks"`
	// Evicted counts blocks dropped from a set by SnapshotMaxBlocks: a snapshot misses them.
	Evicted uint64 `json:"evicted"`
	// Orphaned counts stored chains left out because their parent was not in the set, as a
	// client's index leaves them out.
	Orphaned uint64 `json:"orphaned"`
	// Served counts snapshots sent to subscribers.
	Served uint64 `json:"served"`
}

// NewBridgeServer builds a bridge for cfg.Runtime. It starts nothing: register it on a
// grpc.Server with Register and feed it through Batch and Reset.
func NewBridgeServer(cfg BridgeConfig, log *zap.Logger) (*BridgeServer, error) {
	if !cfg.Runtime.Known() {
		return nil, fmt.Errorf("kvbridge: new bridge server: unknown runtime %q (want one of %v)", cfg.Runtime, worker.Runtimes())
	}
	if cfg.History < 0 {
		return nil, fmt.Errorf("kvbridge: new bridge server: negative history %d", cfg.History)
	}
	if cfg.History == 0 {
		cfg.History = DefaultBridgeHistory
	}
	if cfg.SnapshotMaxBlocks == 0 {
		cfg.SnapshotMaxBlocks = DefaultSnapshotMaxBlocks
	}
	if log == nil {
		log = zap.NewNop()
	}
	var sets map[int]*blockSet
	if cfg.SnapshotMaxBlocks > 0 {
		sets = map[int]*blockSet{}
	}
	return &BridgeServer{
		sets:        sets,
		cfg:         cfg,
		log:         log,
		now:         time.Now,
		done:        make(chan struct{}),
		ring:        make([]*common.KvEventBatch, cfg.History),
		nextSeq:     1,
		nextEventID: 1,
		wake:        make(chan struct{}),
	}, nil
}

// BridgeServerOptions returns the grpc.Server options a bridge should be served with: keepalive
// enforcement relaxed so that SMG's client, which pings every 30 s even while idle, is not
// disconnected for "too many pings" (wire/smg-grpc.md §9).
func BridgeServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             5 * time.Second,
			PermitWithoutStream: true,
		}),
	}
}

// Register registers the configured runtime's engine service on r.
func (s *BridgeServer) Register(r grpc.ServiceRegistrar) {
	switch s.cfg.Runtime {
	case worker.RuntimeVLLM:
		vllm.RegisterVllmEngineServer(r, &vllmBridge{s: s})
	case worker.RuntimeSGLang:
		sglang.RegisterSglangSchedulerServer(r, &sglangBridge{s: s})
	case worker.RuntimeTokenSpeed:
		tokenspeed.RegisterTokenSpeedSchedulerServer(r, &tokenspeedBridge{s: s})
	}
}

// Close ends every subscription (UNAVAILABLE) so that grpc.Server.GracefulStop can return.
// Batches published after Close are still recorded. It is idempotent.
func (s *BridgeServer) Close() { s.closeOnce.Do(func() { close(s.done) }) }

// Batch records b of DP rank rank as the next batch of the stream and wakes subscribers. It
// copies b and never asks for a resync (it keeps no index).
//
// Events whose medium names a tier other than GPU (vLLM's CPU offloading, for example) are
// left out: KvEventBatch has no medium field (cache_level has no defined values), and a client
// would otherwise index offloaded blocks as if the GPU cache held them. A batch left empty is
// still published, so the numbering stays one batch per engine batch.
func (s *BridgeServer) Batch(rank int, b *indexer.Batch) bool {
	if i := slices.IndexFunc(b.Events, offGPU); i >= 0 {
		kept := *b
		kept.Events = make([]indexer.Event, 0, len(b.Events)-1)
		for _, e := range b.Events {
			if !offGPU(e) {
				kept.Events = append(kept.Events, e)
			}
		}
		b = &kept
	}
	s.publish(batchToProto(rank, 0, 0, b))
	return false
}

// offGPU reports whether e is about a storage tier other than the GPU cache.
func offGPU(e indexer.Event) bool {
	return e.Medium != "" && !strings.EqualFold(e.Medium, "GPU")
}

// Reset publishes a batch holding one KvCacheCleared event for rank, so that clients drop what
// they know of that rank's cache (the publisher restarted or a gap could not be repaired).
func (s *BridgeServer) Reset(rank int, reason string) {
	s.log.Info("kv bridge: rank reset, publishing cleared", zap.Int("rank", rank), zap.String("reason", reason))
	r := int32(rank)
	s.publish(&common.KvEventBatch{
		Timestamp: float64(s.now().UnixNano()) / 1e9,
		DpRank:    &r,
		Events:    []*common.KvCacheEvent{{Data: &common.KvCacheEvent_Cleared{Cleared: &common.KvCacheCleared{}}}},
	})
}

// lastSeq returns the sequence number of the newest batch, 0 before the first.
func (s *BridgeServer) lastSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextSeq - 1
}

// publish numbers b and appends it to the history. b must not be modified afterwards: it is
// shared read-only by every subscriber.
func (s *BridgeServer) publish(b *common.KvEventBatch) {
	s.mu.Lock()
	b.SequenceNumber = s.nextSeq
	s.nextSeq++
	for _, ev := range b.Events {
		ev.EventId = s.nextEventID
		s.nextEventID++
	}
	s.applySetLocked(b)
	if s.n < len(s.ring) {
		s.ring[(s.start+s.n)%len(s.ring)] = b
		s.n++
	} else {
		s.ring[s.start] = b
		s.start = (s.start + 1) % len(s.ring)
	}
	wake := s.wake
	s.wake = make(chan struct{})
	s.mu.Unlock()
	close(wake)
}

// applySetLocked applies b to its rank's block set. s.mu must be held: a snapshot must see
// exactly the batches up to its sequence number.
func (s *BridgeServer) applySetLocked(b *common.KvEventBatch) {
	if s.sets == nil {
		return
	}
	rank := int(b.GetDpRank())
	set := s.sets[rank]
	if set == nil {
		set = newBlockSet(s.cfg.SnapshotMaxBlocks)
		s.sets[rank] = set
	}
	for _, ev := range b.Events {
		switch x := ev.GetData().(type) {
		case *common.KvCacheEvent_Stored:
			set.store(x.Stored.ParentBlockHash, x.Stored.GetBlocks())
		case *common.KvCacheEvent_Removed:
			for _, h := range x.Removed.GetBlockHashes() {
				set.remove(h)
			}
		case *common.KvCacheEvent_Cleared:
			set.clear()
		}
	}
}

// SnapshotStats returns the block-set counters; zero when snapshots are disabled.
func (s *BridgeServer) SnapshotStats() SnapshotStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	for _, set := range s.sets {
		st.Blocks += set.liveLen()
		st.Evicted += set.evicted
		st.Orphaned += set.orphaned
	}
	return st
}

// snapshotLocked freezes every rank's set, in rank order. s.mu must be held.
func (s *BridgeServer) snapshotLocked() []rankSet {
	out := make([]rankSet, 0, len(s.sets))
	for r, set := range s.sets {
		out = append(out, rankSet{rank: r, set: set.freeze()})
	}
	slices.SortFunc(out, func(a, b rankSet) int { return a.rank - b.rank })
	s.stats.Served++
	return out
}

// firstSeqLocked returns the sequence number of the oldest batch in the history (nextSeq when
// the history is empty). s.mu must be held.
func (s *BridgeServer) firstSeqLocked() uint64 { return s.nextSeq - uint64(s.n) }

// at returns the batch with sequence number seq, or why it cannot: errBehind when seq is older
// than the history, and a nil batch with the wake channel when seq is not published yet.
func (s *BridgeServer) at(seq uint64) (*common.KvEventBatch, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.firstSeqLocked()
	switch {
	case seq < first:
		return nil, nil, errBridgeBehind
	case seq >= s.nextSeq:
		return nil, s.wake, nil
	}
	return s.ring[(s.start+int(seq-first))%len(s.ring)], nil, nil
}

var errBridgeBehind = errors.New("kvbridge: subscriber fell behind the history")

// acceptsSnapshot reports whether the client sent MDAcceptSnapshot.
func acceptsSnapshot(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(MDAcceptSnapshot)) > 0
}

// SubscribeKvEvents serves one SubscribeKvEvents call with the semantics of BridgeServer. It is
// what the registered services call, exported so that a server implementing the rest of an
// engine service (the simulator) can delegate its KV-event stream to a bridge.
func (s *BridgeServer) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	return s.subscribe(req, stream)
}

// subscribe serves one SubscribeKvEvents call.
func (s *BridgeServer) subscribe(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	cursor := req.GetStartSequenceNumber()
	accepts := acceptsSnapshot(stream.Context())
	var snap []rankSet
	s.mu.Lock()
	first, last := s.firstSeqLocked(), s.nextSeq-1
	outside := cursor > last || (cursor != 0 && cursor+1 < first)
	// The snapshot and its sequence number last are taken in one critical section with the
	// history appends, so the live stream continues it at exactly last+1.
	if s.sets != nil && first > 1 && (cursor == 0 || (outside && accepts)) {
		snap = s.snapshotLocked()
	}
	s.mu.Unlock()
	if snap == nil && outside {
		return status.Errorf(codes.OutOfRange,
			"kvbridge: cursor %d outside the history (%d..%d): clear and resubscribe from 0", cursor, first, last)
	}
	next := cursor + 1
	if cursor == 0 {
		next = first
	}
	md := metadata.MD{}
	var batches []*common.KvEventBatch
	if snap != nil {
		batches = buildSnapshot(snap, last, float64(s.now().UnixNano())/1e9)
		next = last + 1
		md.Set(MDSnapshotFirst, strconv.FormatUint(batches[0].GetSequenceNumber(), 10))
		md.Set(MDSnapshotLast, strconv.FormatUint(last, 10))
	}
	// Headers go out at once, as the reference servicers do: the client sees the stream up
	// before the first batch.
	if err := stream.SendHeader(md); err != nil {
		return err
	}
	for _, b := range batches {
		if err := stream.Send(b); err != nil {
			return err
		}
	}
	if snap != nil {
		// The set counters go with each snapshot: evicted blocks are what it missed.
		st := s.SnapshotStats()
		s.log.Info("kv bridge: snapshot sent", zap.Uint64("cursor", cursor), zap.Int("batches", len(batches)),
			zap.Uint64("last", last), zap.Int("blocks", st.Blocks), zap.Uint64("evicted_total", st.Evicted),
			zap.Uint64("orphaned_total", st.Orphaned))
	}
	ctx := stream.Context()
	s.log.Debug("kv bridge: subscriber", zap.Uint64("cursor", cursor), zap.Uint64("from", next))
	for {
		b, wake, err := s.at(next)
		if err != nil {
			s.log.Info("kv bridge: subscriber fell behind the history", zap.Uint64("next", next))
			return status.Errorf(codes.DataLoss, "kvbridge: batch %d is no longer in the history: clear and resubscribe from 0", next)
		}
		if b == nil {
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			case <-s.done:
				return status.Error(codes.Unavailable, "kvbridge: shutting down")
			}
		}
		if err := stream.Send(b); err != nil {
			return err
		}
		next++
		// Checked after each send too, so that Close ends a subscriber that is never idle.
		select {
		case <-s.done:
			return status.Error(codes.Unavailable, "kvbridge: shutting down")
		default:
		}
	}
}

// bridgeHealthMessage is the HealthCheck message: the bridge itself is up.
const bridgeHealthMessage = "kvbridge: serving KV events"

// vllmBridge serves the bridge under /vllm.grpc.engine.VllmEngine.
type vllmBridge struct {
	vllm.UnimplementedVllmEngineServer
	s *BridgeServer
}

func (v *vllmBridge) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	return v.s.subscribe(req, stream)
}

func (v *vllmBridge) HealthCheck(context.Context, *vllm.HealthCheckRequest) (*vllm.HealthCheckResponse, error) {
	return &vllm.HealthCheckResponse{Healthy: true, Message: bridgeHealthMessage}, nil
}

// sglangBridge serves the bridge under /sglang.grpc.scheduler.SglangScheduler.
type sglangBridge struct {
	sglang.UnimplementedSglangSchedulerServer
	s *BridgeServer
}

func (v *sglangBridge) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	return v.s.subscribe(req, stream)
}

func (v *sglangBridge) HealthCheck(context.Context, *sglang.HealthCheckRequest) (*sglang.HealthCheckResponse, error) {
	return &sglang.HealthCheckResponse{Healthy: true, Message: bridgeHealthMessage}, nil
}

// tokenspeedBridge serves the bridge under /tokenspeed.grpc.scheduler.TokenSpeedScheduler.
type tokenspeedBridge struct {
	tokenspeed.UnimplementedTokenSpeedSchedulerServer
	s *BridgeServer
}

func (v *tokenspeedBridge) SubscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	return v.s.subscribe(req, stream)
}

func (v *tokenspeedBridge) HealthCheck(context.Context, *tokenspeed.HealthCheckRequest) (*tokenspeed.HealthCheckResponse, error) {
	return &tokenspeed.HealthCheckResponse{Healthy: true, Message: bridgeHealthMessage}, nil
}

var (
	_ Consumer                             = (*BridgeServer)(nil)
	_ vllm.VllmEngineServer                = (*vllmBridge)(nil)
	_ sglang.SglangSchedulerServer         = (*sglangBridge)(nil)
	_ tokenspeed.TokenSpeedSchedulerServer = (*tokenspeedBridge)(nil)
)
