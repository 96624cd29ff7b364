package kvbridge

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Defaults of the event stream rules (DESIGN.md §6).
const (
	// DefaultReplayTimeout bounds the silence of one replay: no reply within it (after the
	// request, or after the last reply) and the replay is treated as unavailable. A replay that
	// keeps answering is not cut off, however long it takes: after a partition heals, hundreds
	// of streams replay at once and their replies queue behind each other.
	DefaultReplayTimeout = 5 * time.Second
	// DefaultResyncInterval is the minimum time between two unknown-parent resyncs of a stream.
	DefaultResyncInterval = 30 * time.Second
	// DefaultMaxHeld bounds the live batches held while a replay is in flight.
	DefaultMaxHeld = 10000
	// DefaultMinBackoff and DefaultMaxBackoff bound the jittered exponential reconnect delay of
	// every source.
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	// malformedLogInterval: malformed input is logged at most once per interval per stream.
	malformedLogInterval = 10 * time.Second
)

// streamTransport is what the stream rules need of the transport below them. T is the
// transport's raw batch (a msgpack payload, a protobuf message); items the rules hold while a
// replay runs must stay valid, so a transport that lets the rules hold (!rewinds) hands over
// owned items.
type streamTransport[T any] struct {
	// decode turns an item into dst; rejected counts events skipped inside it, err a payload
	// that could not be decoded at all.
	decode func(item T, dst *indexer.Batch) (rejected int, err error)
	// deliver hands one in-order batch to the consumer; it returns the batch's DP rank (for the
	// cursor metric) and whether the consumer asks for a resync.
	deliver func(b *indexer.Batch) (rank int, resync bool)
	// reset drops everything known about the stream's caches.
	reset func(reason string)
	// request asks the transport for the batches from start on (0: everything it has), tagged
	// gen; nil when the stream cannot be repaired (gaps then clear the caches).
	request func(start, gen uint64)
	// rewinds: the transport answers a request by sending the stream again from start on the
	// same channel (gRPC resubscribes from the cursor), instead of beside the live stream (a ZMQ
	// ROUTER replay): nothing is held, and there is no deadline, since the transport reports its
	// own failures.
	rewinds bool
	// restarts: a live seq at or below the previous live seq means the publisher restarted (a
	// ZMQ PUB never resends); otherwise such a batch is a duplicate.
	restarts bool
	// same reports whether two items are the same batch (equal payloads); with it a
	// reconnection resumes from the cursor when the publisher proves it is the same instance
	// (connected). nil: every reconnection rebuilds from 0.
	same func(a, b T) bool
}

// heldBatch is a live batch held while a replay is in flight.
type heldBatch[T any] struct {
	seq     uint64
	item    T
	restart bool // seq was not above the previous live seq when it arrived
}

// streamStats are a stream's counters, written on its consumer goroutine and read by status
// from any goroutine.
type streamStats struct {
	cursor     atomic.Uint64
	hasCursor  atomic.Bool
	applied    atomic.Uint64
	replayed   atomic.Uint64
	duplicates atomic.Uint64
	dropped    atomic.Uint64
	malformed  atomic.Uint64
	gaps       atomic.Uint64
	skipped    atomic.Uint64
	resets     atomic.Uint64
	replays    atomic.Uint64
	snapshots  atomic.Uint64
}

// RankStatus is a snapshot of one (worker, DP rank) event stream.
type RankStatus struct {
	Rank int `json:"rank"`
	// Cursor is the last applied sequence number when HasCursor.
	Cursor    uint64 `json:"cursor"`
	HasCursor bool   `json:"has_cursor"`
	// Replaying is true while a replay request is in flight.
	Replaying bool `json:"replaying"`
	// Batch counters by outcome, and stream events.
	Applied    uint64 `json:"applied"`
	Replayed   uint64 `json:"replayed"`
	Duplicates uint64 `json:"duplicates"`
	Dropped    uint64 `json:"dropped"`
	Malformed  uint64 `json:"malformed"`
	Gaps       uint64 `json:"gaps"`
	// Skipped counts the sequence numbers the stream passed over without applying: batches
	// a gap lost (in transit or dropped from the queue) that no replay delivered.
	Skipped uint64 `json:"skipped"`
	Resets  uint64 `json:"resets"`
	Replays uint64 `json:"replays"`
	// Snapshots counts the snapshots a server opened a subscription with (kvbridge serve).
	Snapshots uint64 `json:"snapshots"`
}

// streamRules applies the event stream rules of DESIGN.md §6 to one numbered stream of batches:
// one ZMQ (publisher, DP rank) stream, or one gRPC subscription's merged stream. It owns no
// sockets: the source feeds it live batches and replay replies in arrival order, and it asks
// for repairs through the transport. It is the one place these rules are written; every
// source uses it. All methods run on the source's single consumer goroutine, except status,
// which reads atomics.
type streamRules[T any] struct {
	worker         string
	rank           int // labels logs and RankStatus
	t              streamTransport[T]
	m              *Metrics
	log            *zap.Logger
	now            func() time.Time
	replayTimeout  time.Duration
	resyncInterval time.Duration
	maxHeld        int
	scratch        *indexer.Batch // shared decode buffer of the consumer goroutine

	cursor    uint64
	hasCursor bool
	// lastLive is the last seq received live (restart detection).
	lastLive    uint64
	hasLastLive bool
	// lastItem is the batch at the cursor, kept when the transport can compare batches (same)
	// so that a reconnection can check the publisher still has it; resuming is set while that
	// check's replay runs.
	lastItem    T
	hasLastItem bool
	resuming    bool
	// replayResumed: the running replay continues a reconnection whose check passed, so an
	// empty rest (nothing was published meanwhile) is complete, not a lost gap.
	replayResumed bool
	// lastApplied is the last seq applied, kept when the cursor is cleared, so a jump past
	// it counts the batches skipped.
	lastApplied    uint64
	hasLastApplied bool

	// The repair in flight, if replaying.
	replaying    bool
	replayFull   bool // from 0 (connect, resync) rather than from cursor+1 (gap)
	requested    bool // asked for (a resumed subscription is checked the same way, unasked)
	replayStart  uint64
	replayGen    uint64
	replayN      int  // data messages received
	replayFailed bool // the first seq did not match: ignore the rest until the terminator
	replayDL     time.Time

	// snapLast is the last seq of the snapshot being applied, while inSnapshot: a stream
	// that ends before it leaves an incomplete state, which only a new snapshot repairs.
	snapLast   uint64
	inSnapshot bool

	held         []heldBatch[T]
	lastResync   time.Time
	everResynced bool
	lastLog      time.Time
	suppressed   int

	stats      streamStats
	replayFlag atomic.Bool
}

func (s *streamRules[T]) status() RankStatus {
	st := &s.stats
	return RankStatus{
		Rank: s.rank, Cursor: st.cursor.Load(), HasCursor: st.hasCursor.Load(), Replaying: s.replayFlag.Load(),
		Applied: st.applied.Load(), Replayed: st.replayed.Load(), Duplicates: st.duplicates.Load(),
		Dropped: st.dropped.Load(), Malformed: st.malformed.Load(), Gaps: st.gaps.Load(), Skipped: st.skipped.Load(),
		Resets: st.resets.Load(), Replays: st.replays.Load(), Snapshots: st.snapshots.Load(),
	}
}

// delivered returns the number of batches delivered so far (any outcome that reached the
// consumer).
func (s *streamRules[T]) delivered() uint64 { return s.stats.applied.Load() + s.stats.replayed.Load() }

// resumeFrom returns the sequence number to ask a resumable transport for: the cursor, 0 when
// none was applied yet.
func (s *streamRules[T]) resumeFrom() uint64 {
	if s.hasCursor {
		return s.cursor
	}
	return 0
}

func (s *streamRules[T]) setCursor(seq uint64) {
	s.cursor, s.hasCursor = seq, true
	s.stats.cursor.Store(seq)
	s.stats.hasCursor.Store(true)
}

func (s *streamRules[T]) clearCursor() {
	var zero T
	s.cursor, s.hasCursor = 0, false
	s.lastItem, s.hasLastItem = zero, false
	s.stats.hasCursor.Store(false)
}

func (s *streamRules[T]) reset(reason string) {
	s.stats.resets.Add(1)
	s.m.countReset(s.worker, reason)
	s.log.Info("kvbridge: worker reset", zap.String("worker", s.worker), zap.Int("rank", s.rank), zap.String("reason", reason))
	s.t.reset(reason)
}

// connected handles a (re)connection of a transport that cannot resume (a ZMQ SUB). The
// publisher may have restarted while we were away, or only the network between us failed. A
// first connection, or one that cannot tell, rebuilds the caches from the publisher's whole
// buffer (replay from 0). With a cursor and the batch at it kept (transport.same), it asks for
// the batches from the cursor on instead: when the first one is the very batch we applied
// there, the publisher is the same instance and the rest repairs the disconnection's gap with
// nothing dropped (resumeReplay); otherwise it rebuilds from 0. Resuming matters at fleet
// scale: a rebuild gets only what the buffer still holds, so after a partition heals it would
// lose every block stored before the buffer's oldest batch (the long-lived system prompts
// most requests share), and every later chain continuing them. Live batches are held until
// the replay ends.
func (s *streamRules[T]) connected() {
	if s.t.request == nil {
		return
	}
	clear(s.held) // the batches held for a replay the reconnection abandoned
	s.held = s.held[:0]
	s.hasLastLive = false
	if s.hasCursor && s.hasLastItem && s.t.same != nil {
		s.resuming = true
		s.startReplay(false, s.cursor, true)
		return
	}
	s.rebuild(ResetReplayFromZero)
}

// rebuild clears the caches (when anything was applied) and replays the publisher's whole
// buffer.
func (s *streamRules[T]) rebuild(reason string) {
	s.resuming = false
	if s.hasCursor {
		s.reset(reason)
		s.clearCursor()
	}
	s.startReplay(true, 0, true)
}

// resumeReplay handles the first reply of a reconnection's replay from the cursor: the batch at
// the cursor, unchanged, proves the same publisher instance; anything else (another seq, other
// bytes: a restarted publisher, or a buffer that rolled over) rebuilds from 0. It reports
// whether the replay continues.
func (s *streamRules[T]) resumeReplay(seq uint64, item T) bool {
	s.resuming = false
	if seq == s.cursor && s.t.same(item, s.lastItem) {
		s.replayStart = s.cursor + 1 // the rest must continue the cursor
		s.replayN, s.replayResumed = 0, true
		s.duplicate()
		return true
	}
	s.rebuild(ResetReplayFromZero)
	return false
}

// resumed handles a resubscription from the cursor (a rewinding transport after a transient
// failure): its first batch must continue the cursor, as after a requested gap repair.
func (s *streamRules[T]) resumed() {
	if s.hasCursor && !s.replaying {
		s.startReplay(false, s.cursor+1, false)
	}
}

// restart handles a transport's answer that the stream cannot continue from the cursor (gRPC
// OUT_OF_RANGE, DATA_LOSS): the caches are cleared and the stream starts over from 0.
func (s *streamRules[T]) restart(reason string) {
	s.reset(reason)
	s.clearCursor()
	s.endReplay()
	s.inSnapshot = false
}

// snapshot handles a subscription that opens with a snapshot of the server's state, batches
// first..last (the server said so out of band): whatever was known is replaced (the cursor and
// its gap accounting included), so its first batch is neither a gap nor a duplicate, and the
// stream goes on from last+1.
func (s *streamRules[T]) snapshot(first, last uint64) {
	s.stats.snapshots.Add(1)
	s.m.countSnapshot(s.worker)
	s.log.Info("kvbridge: stream opens with a snapshot", zap.String("worker", s.worker),
		zap.Uint64("first", first), zap.Uint64("last", last))
	if s.hasCursor {
		// A cursor outside the server's history: the old view goes (the snapshot's own
		// KvCacheCleared events cover only the ranks the server knows).
		s.reset(ResetSnapshot)
		s.clearCursor()
	}
	if s.replaying && s.replayFull {
		s.replayOutcome(ReplayOK) // a resync's rebuild from 0, answered with the state
	}
	s.endReplay()
	s.hasLastApplied = false
	s.snapLast, s.inSnapshot = last, true
}

// snapshotCut reports whether the last subscription ended inside its snapshot.
func (s *streamRules[T]) snapshotCut() bool { return s.inSnapshot }

// dropped counts a live batch lost before it reached the stream (full queue). The next batch
// shows the gap and repairs it.
func (s *streamRules[T]) dropped() {
	s.stats.dropped.Add(1)
	s.m.countBatch(s.worker, OutcomeDropped)
}

// malformedMsg counts a message whose frames could not be parsed.
func (s *streamRules[T]) malformedMsg(err error) {
	s.stats.malformed.Add(1)
	s.m.countBatch(s.worker, OutcomeMalformed)
	s.logMalformed(err)
}

func (s *streamRules[T]) logMalformed(err error) {
	now := s.now()
	if !s.lastLog.IsZero() && now.Sub(s.lastLog) < malformedLogInterval {
		s.suppressed++
		return
	}
	s.log.Warn("kvbridge: skipping malformed kv event message", zap.String("worker", s.worker),
		zap.Int("rank", s.rank), zap.Error(err), zap.Int("suppressed_since_last", s.suppressed))
	s.lastLog, s.suppressed = now, 0
}

// live handles a live batch. A ZMQ PUB numbers its batches strictly increasingly and never
// resends, so there a live seq at or below the previous live seq means the publisher restarted;
// a live seq above it but at or below the cursor is a batch already applied from a replay (the
// replay and the live copy travel on different connections, so either may come first). On a
// rewinding transport, the batches after a repair request are the repair itself.
func (s *streamRules[T]) live(seq uint64, item T) {
	restart := s.t.restarts && s.hasLastLive && seq <= s.lastLive
	s.lastLive, s.hasLastLive = seq, true
	switch {
	case s.replaying && s.t.rewinds:
		s.rewound(seq, item)
	case s.replaying:
		if len(s.held) >= s.maxHeld {
			// Dropping the newest leaves a gap after the held ones, which the next replay repairs.
			s.dropped()
			return
		}
		s.held = append(s.held, heldBatch[T]{seq, item, restart})
	default:
		s.processLive(seq, item, restart)
	}
}

// processLive applies the live rules of DESIGN.md §6 to a batch received (and possibly held) in
// live order.
func (s *streamRules[T]) processLive(seq uint64, item T, restart bool) {
	switch {
	case restart && s.hasCursor:
		s.reset(ResetRestart)
		s.clearCursor()
		s.apply(seq, item, OutcomeApplied)
	case !s.hasCursor || seq == s.cursor+1:
		s.apply(seq, item, OutcomeApplied)
	case seq <= s.cursor:
		s.duplicate()
	default:
		s.stats.gaps.Add(1)
		s.m.countGap(s.worker)
		if s.t.request == nil {
			s.m.countReplay(s.worker, ReplayUnavailable)
			s.reset(ResetGap)
			s.clearCursor()
			s.apply(seq, item, OutcomeApplied)
			return
		}
		if !s.t.rewinds {
			s.held = append(s.held, heldBatch[T]{seq, item, false})
		} // else the repaired stream resends it
		s.log.Info("kvbridge: kv event sequence gap; repairing", zap.String("worker", s.worker), zap.Int("rank", s.rank),
			zap.Uint64("cursor", s.cursor), zap.Uint64("seq", seq))
		s.startReplay(false, s.cursor+1, true)
	}
}

func (s *streamRules[T]) duplicate() {
	s.stats.duplicates.Add(1)
	s.m.countBatch(s.worker, OutcomeDuplicate)
}

// startReplay enters the repair state for the batches from start (full: a rebuild from 0);
// request says whether to ask the transport (a resumed subscription needs no asking).
func (s *streamRules[T]) startReplay(full bool, start uint64, request bool) {
	s.replayGen++
	s.replaying, s.replayFull, s.replayStart, s.requested = true, full, start, request
	s.replayN, s.replayFailed, s.replayResumed = 0, false, false
	s.replayDL = time.Time{}
	if !s.t.rewinds {
		s.replayDL = s.now().Add(s.replayTimeout)
	}
	s.replayFlag.Store(true)
	if request {
		s.stats.replays.Add(1)
		s.t.request(start, s.replayGen)
	}
}

func (s *streamRules[T]) endReplay() {
	s.replaying, s.resuming = false, false
	s.replayFlag.Store(false)
}

// replayOutcome counts a requested repair's result.
func (s *streamRules[T]) replayOutcome(result string) {
	if s.requested {
		s.m.countReplay(s.worker, result)
	}
}

// unrepaired handles a repair that did not start at the cursor: the missed batches are gone.
func (s *streamRules[T]) unrepaired() {
	s.replayOutcome(ReplayMismatch)
	s.reset(ResetGap)
	s.clearCursor()
}

// rewound handles a batch of a rewinding transport's repair: the first one that is not a
// duplicate decides whether the repair continues the cursor, and ends it.
func (s *streamRules[T]) rewound(seq uint64, item T) {
	if !s.replayFull && s.hasCursor && seq <= s.cursor {
		s.duplicate()
		return
	}
	s.endReplay()
	if !s.replayFull && seq != s.replayStart {
		s.unrepaired()
	} else {
		s.replayOutcome(ReplayOK)
	}
	s.apply(seq, item, OutcomeApplied)
}

// replayMsg handles one replay reply tagged gen (a transport that replays beside the live
// stream).
func (s *streamRules[T]) replayMsg(gen, seq uint64, item T, end bool) {
	if !s.replaying || gen != s.replayGen {
		return // a late reply to an abandoned request
	}
	if !s.replayDL.IsZero() {
		s.replayDL = s.now().Add(s.replayTimeout) // it answers: the deadline bounds silence
	}
	if end {
		if s.resuming { // not even the batch at the cursor: the publisher is another instance
			s.rebuild(ResetReplayFromZero)
			return
		}
		s.finishReplay()
		return
	}
	if s.replayFailed {
		return
	}
	if s.resuming {
		s.resumeReplay(seq, item)
		return
	}
	s.replayN++
	if !s.replayFull && s.replayN == 1 && seq != s.replayStart {
		// wire/vllm-zmq.md §8.3: the buffer no longer holds what we asked for.
		s.replayFailed = true
		s.unrepaired()
		return
	}
	switch {
	case !s.hasCursor || seq == s.cursor+1:
		s.apply(seq, item, OutcomeReplayed)
	case seq <= s.cursor:
		s.duplicate()
	default:
		// A hole inside the publisher's buffer (a batch that was never buffered).
		s.stats.gaps.Add(1)
		s.m.countGap(s.worker)
		s.reset(ResetGap)
		s.clearCursor()
		s.apply(seq, item, OutcomeReplayed)
	}
}

func (s *streamRules[T]) finishReplay() {
	s.endReplay()
	if !s.replayFailed {
		if !s.replayFull && s.replayN == 0 && !s.replayResumed {
			// Only the terminator: the missed batches are gone.
			s.unrepaired()
		} else {
			s.replayOutcome(ReplayOK)
		}
	}
	s.drainHeld()
}

// drainHeld applies the batches held during the replay, in arrival order, until one of them
// starts another replay (the rest stay held).
//
// The held array is dropped, not kept for reuse: even as an empty slice it would keep every
// batch it held alive (after a partition heals, some 50 a stream, 85 MiB at 512 engines).
func (s *streamRules[T]) drainHeld() {
	held := s.held
	s.held = nil
	for i, h := range held {
		if s.replaying {
			s.held = append(s.held, held[i:]...)
			return
		}
		s.processLive(h.seq, h.item, h.restart)
	}
}

// replayDeadline reports whether a replay with a deadline is in flight, i.e. whether tick has
// anything to check.
func (s *streamRules[T]) replayDeadline() bool { return s.replaying && !s.replayDL.IsZero() }

// tick abandons a replay whose deadline passed: the replay is unavailable, so the caches are
// cleared and the held batches continue the stream.
func (s *streamRules[T]) tick(now time.Time) {
	if !s.replaying || s.replayDL.IsZero() || now.Before(s.replayDL) {
		return
	}
	s.endReplay()
	s.replayGen++ // late replies are ignored
	s.m.countReplay(s.worker, ReplayTimeout)
	s.log.Warn("kvbridge: replay timed out", zap.String("worker", s.worker), zap.Int("rank", s.rank),
		zap.Uint64("from", s.replayStart))
	if !s.replayFull || s.hasCursor {
		s.reset(ResetGap)
	}
	s.clearCursor()
	s.drainHeld()
}

// apply decodes and delivers one batch and advances the cursor. An undecodable payload is
// counted and skipped, but the cursor still moves past it: the batch was received, so asking
// for it again would return the same bytes.
func (s *streamRules[T]) apply(seq uint64, item T, outcome string) {
	// A jump past the last applied seq (a gap given up on) skips the batches in between; a
	// seq at or below it is a publisher that started over.
	if s.hasLastApplied && seq > s.lastApplied+1 {
		n := seq - s.lastApplied - 1
		s.stats.skipped.Add(n)
		s.m.countSkipped(s.worker, n)
	}
	s.lastApplied, s.hasLastApplied = seq, true
	s.setCursor(seq)
	if s.t.same != nil {
		s.lastItem, s.hasLastItem = item, true
	}
	if s.inSnapshot && seq >= s.snapLast {
		s.inSnapshot = false
	}
	b := s.scratch
	rejected, err := s.t.decode(item, b)
	if err != nil {
		s.stats.malformed.Add(1)
		s.m.countBatch(s.worker, OutcomeMalformed)
		s.logMalformed(err)
		return
	}
	if rejected > 0 {
		s.m.countMalformed(s.worker, rejected)
		s.logMalformed(errRejectedEvents)
	}
	b.Seq = seq
	if outcome == OutcomeReplayed {
		s.stats.replayed.Add(1)
	} else {
		s.stats.applied.Add(1)
	}
	s.m.countBatch(s.worker, outcome)
	s.m.countBatchEvents(s.worker, b)
	rank, resync := s.t.deliver(b)
	s.m.setCursor(s.worker, rank, seq)
	if resync {
		s.resync()
	}
}

// resync answers a consumer's unknown-parent report: at most once per resyncInterval, clear the
// caches and rebuild them from 0. Without a repair path, or while a repair runs, it does nothing.
func (s *streamRules[T]) resync() {
	if s.t.request == nil || s.replaying {
		return
	}
	now := s.now()
	if s.everResynced && now.Sub(s.lastResync) < s.resyncInterval {
		return
	}
	s.everResynced, s.lastResync = true, now
	s.m.countResync(s.worker)
	s.reset(ResetResync)
	s.clearCursor()
	s.startReplay(true, 0, true)
}

var errRejectedEvents = errors.New("kvbridge: events rejected inside a batch (wrong token_ids length or field types)")

// backoff is the jittered exponential reconnect delay every source uses (DESIGN.md §6): from
// min doubling to max, each delay drawn uniformly from [d/2, d] so that many gateways do not
// reconnect in lock step, back to min after progress.
type backoff struct {
	min, max, cur time.Duration
	rnd           func() uint64
}

func newBackoff(min, max time.Duration, rnd func() uint64) backoff {
	if min <= 0 {
		min = DefaultMinBackoff
	}
	if max < min {
		max = min
	}
	if rnd == nil {
		rnd = rand.Uint64
	}
	return backoff{min: min, max: max, cur: min, rnd: rnd}
}

// next returns the delay before the next attempt and doubles the following one.
func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	half := uint64(d / 2)
	if half == 0 {
		return d
	}
	return time.Duration(half + b.rnd()%(half+1))
}

// progressed resets the delay after a connection that made progress.
func (b *backoff) progressed() { b.cur = b.min }

// sleep waits for d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
