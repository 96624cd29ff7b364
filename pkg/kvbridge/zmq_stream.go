package kvbridge

import (
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Defaults of the event stream rules (DESIGN.md §6).
const (
	// DefaultReplayTimeout bounds one replay request: no terminator within it and the replay is
	// treated as unavailable.
	DefaultReplayTimeout = 5 * time.Second
	// DefaultResyncInterval is the minimum time between two unknown-parent resyncs of a rank.
	DefaultResyncInterval = 30 * time.Second
	// DefaultMaxHeld bounds the live batches held while a replay is in flight.
	DefaultMaxHeld = 10000
	// malformedLogInterval: malformed input is logged at most once per interval per stream.
	malformedLogInterval = 10 * time.Second
)

// zmqHeld is a live batch held while a replay is in flight. payload is owned (zmq4 allocates a
// fresh slice per received frame).
type zmqHeld struct {
	seq     uint64
	payload []byte
	restart bool // seq was not above the previous live seq when it arrived
}

// zmqStreamStats are a stream's counters, written by its consumer goroutine and read by Status
// from any goroutine.
type zmqStreamStats struct {
	cursor     atomic.Uint64
	hasCursor  atomic.Bool
	applied    atomic.Uint64
	replayed   atomic.Uint64
	duplicates atomic.Uint64
	dropped    atomic.Uint64
	malformed  atomic.Uint64
	gaps       atomic.Uint64
	resets     atomic.Uint64
	replays    atomic.Uint64
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
	Resets     uint64 `json:"resets"`
	Replays    uint64 `json:"replays"`
}

// zmqStream applies the event stream rules of DESIGN.md §6 to one (publisher, DP rank) stream.
// It owns no sockets: the reader goroutine feeds it live batches and replay replies in arrival
// order, and it asks for replays through request. All methods run on the source's single
// consumer goroutine, except status, which reads atomics.
type zmqStream struct {
	worker string
	rank   int
	c      Consumer
	m      *Metrics
	log    *zap.Logger
	now    func() time.Time
	// request asks the reader for a replay from start, tagged gen; nil when the stream has no
	// replay endpoint.
	request        func(start, gen uint64)
	replayTimeout  time.Duration
	resyncInterval time.Duration
	maxHeld        int
	scratch        *indexer.Batch // shared decode buffer of the consumer goroutine

	cursor    uint64
	hasCursor bool
	// lastLive is the last seq received on the live socket (restart detection).
	lastLive    uint64
	hasLastLive bool

	// The replay in flight, if active.
	replaying    bool
	replayFull   bool // from 0 (connect, resync) rather than from cursor+1 (gap)
	replayStart  uint64
	replayGen    uint64
	replayN      int  // data messages received
	replayFailed bool // the first seq did not match: ignore the rest until the terminator
	replayDL     time.Time

	held         []zmqHeld
	lastResync   time.Time
	everResynced bool
	lastLog      time.Time
	suppressed   int

	stats      zmqStreamStats
	replayFlag atomic.Bool
}

func (s *zmqStream) status() RankStatus {
	st := &s.stats
	return RankStatus{
		Rank: s.rank, Cursor: st.cursor.Load(), HasCursor: st.hasCursor.Load(), Replaying: s.replayFlag.Load(),
		Applied: st.applied.Load(), Replayed: st.replayed.Load(), Duplicates: st.duplicates.Load(),
		Dropped: st.dropped.Load(), Malformed: st.malformed.Load(), Gaps: st.gaps.Load(),
		Resets: st.resets.Load(), Replays: st.replays.Load(),
	}
}

func (s *zmqStream) setCursor(seq uint64) {
	s.cursor, s.hasCursor = seq, true
	s.stats.cursor.Store(seq)
	s.stats.hasCursor.Store(true)
	s.m.Cursor(s.worker, s.rank, seq)
}

func (s *zmqStream) clearCursor() {
	s.cursor, s.hasCursor = 0, false
	s.stats.hasCursor.Store(false)
}

func (s *zmqStream) reset(reason string) {
	s.stats.resets.Add(1)
	s.m.Reset(s.worker, reason)
	s.log.Info("kvbridge: worker reset", zap.String("worker", s.worker), zap.Int("rank", s.rank), zap.String("reason", reason))
	s.c.Reset(s.rank, reason)
}

// connected handles a (re)connection of the SUB: with a replay endpoint, the index is rebuilt
// from the publisher's whole buffer (replay from 0); live batches are held until it ends.
func (s *zmqStream) connected() {
	if s.request == nil {
		return
	}
	if s.hasCursor {
		// The publisher may have restarted or moved on while we were away: rebuild.
		s.reset(ResetReplayFromZero)
		s.clearCursor()
	}
	// The rebuild starts the stream over, possibly from a new publisher instance.
	s.hasLastLive = false
	s.held = s.held[:0]
	s.startReplay(true, 0)
}

// dropped counts a live batch lost before it reached the stream (full queue). The next batch
// shows the gap and repairs it.
func (s *zmqStream) dropped() {
	s.stats.dropped.Add(1)
	s.m.Batch(s.worker, OutcomeDropped)
}

// malformedMsg counts a message whose frames could not be parsed.
func (s *zmqStream) malformedMsg(err error) {
	s.stats.malformed.Add(1)
	s.m.Batch(s.worker, OutcomeMalformed)
	s.logMalformed(err)
}

func (s *zmqStream) logMalformed(err error) {
	now := s.now()
	if !s.lastLog.IsZero() && now.Sub(s.lastLog) < malformedLogInterval {
		s.suppressed++
		return
	}
	s.log.Warn("kvbridge: skipping malformed kv event message", zap.String("worker", s.worker),
		zap.Int("rank", s.rank), zap.Error(err), zap.Int("suppressed_since_last", s.suppressed))
	s.lastLog, s.suppressed = now, 0
}

// live handles a live batch. A PUB numbers its batches strictly increasingly and never
// resends, so a live seq at or below the previous live seq means the publisher restarted; a live
// seq above it but at or below the cursor is a batch already applied from a replay (the replay
// and the live copy travel on different connections, so either may come first).
func (s *zmqStream) live(seq uint64, payload []byte) {
	restart := s.hasLastLive && seq <= s.lastLive
	s.lastLive, s.hasLastLive = seq, true
	if s.replaying {
		if len(s.held) >= s.maxHeld {
			// Dropping the newest leaves a gap after the held ones, which the next replay repairs.
			s.dropped()
			return
		}
		s.held = append(s.held, zmqHeld{seq, payload, restart})
		return
	}
	s.processLive(seq, payload, restart)
}

// processLive applies the live rules of DESIGN.md §6 to a batch received (and possibly held) in
// live order.
func (s *zmqStream) processLive(seq uint64, payload []byte, restart bool) {
	switch {
	case restart && s.hasCursor:
		s.reset(ResetRestart)
		s.clearCursor()
		s.apply(seq, payload, OutcomeApplied)
	case !s.hasCursor || seq == s.cursor+1:
		s.apply(seq, payload, OutcomeApplied)
	case seq <= s.cursor:
		s.duplicate()
	default:
		s.stats.gaps.Add(1)
		s.m.Gap(s.worker)
		if s.request == nil {
			s.m.Replay(s.worker, ReplayUnavailable)
			s.reset(ResetGap)
			s.clearCursor()
			s.apply(seq, payload, OutcomeApplied)
			return
		}
		s.held = append(s.held, zmqHeld{seq, payload, false})
		s.startReplay(false, s.cursor+1)
	}
}

func (s *zmqStream) duplicate() {
	s.stats.duplicates.Add(1)
	s.m.Batch(s.worker, OutcomeDuplicate)
}

func (s *zmqStream) startReplay(full bool, start uint64) {
	s.replayGen++
	s.replaying, s.replayFull, s.replayStart = true, full, start
	s.replayN, s.replayFailed = 0, false
	s.replayDL = s.now().Add(s.replayTimeout)
	s.replayFlag.Store(true)
	s.stats.replays.Add(1)
	s.request(start, s.replayGen)
}

// replayMsg handles one replay reply tagged gen.
func (s *zmqStream) replayMsg(gen, seq uint64, payload []byte, end bool) {
	if !s.replaying || gen != s.replayGen {
		return // a late reply to an abandoned request
	}
	if end {
		s.finishReplay()
		return
	}
	if s.replayFailed {
		return
	}
	s.replayN++
	if !s.replayFull && s.replayN == 1 && seq != s.replayStart {
		// §8.3: the buffer no longer holds what we asked for; the gap cannot be repaired.
		s.replayFailed = true
		s.m.Replay(s.worker, ReplayMismatch)
		s.reset(ResetGap)
		s.clearCursor()
		return
	}
	switch {
	case !s.hasCursor || seq == s.cursor+1:
		s.apply(seq, payload, OutcomeReplayed)
	case seq <= s.cursor:
		s.duplicate()
	default:
		// A hole inside the publisher's buffer (a batch that was never buffered).
		s.stats.gaps.Add(1)
		s.m.Gap(s.worker)
		s.reset(ResetGap)
		s.clearCursor()
		s.apply(seq, payload, OutcomeReplayed)
	}
}

func (s *zmqStream) finishReplay() {
	s.replaying = false
	s.replayFlag.Store(false)
	if !s.replayFailed {
		if !s.replayFull && s.replayN == 0 {
			// Only the terminator: the missed batches are gone.
			s.m.Replay(s.worker, ReplayMismatch)
			s.reset(ResetGap)
			s.clearCursor()
		} else {
			s.m.Replay(s.worker, ReplayOK)
		}
	}
	s.drainHeld()
}

// drainHeld applies the batches held during the replay, in arrival order, until one of them
// starts another replay (the rest stay held).
func (s *zmqStream) drainHeld() {
	held := s.held
	s.held = s.held[:0:0]
	for i, h := range held {
		if s.replaying {
			s.held = append(s.held, held[i:]...)
			return
		}
		s.processLive(h.seq, h.payload, h.restart)
	}
}

// tick abandons a replay whose deadline passed: the replay is unavailable, so the worker is
// cleared and the held batches continue the stream.
func (s *zmqStream) tick(now time.Time) {
	if !s.replaying || now.Before(s.replayDL) {
		return
	}
	s.replaying = false
	s.replayFlag.Store(false)
	s.replayGen++ // late replies are ignored
	s.m.Replay(s.worker, ReplayTimeout)
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
func (s *zmqStream) apply(seq uint64, payload []byte, outcome string) {
	s.setCursor(seq)
	b := s.scratch
	rejected, err := DecodeBatchRejected(payload, b)
	if err != nil {
		s.stats.malformed.Add(1)
		s.m.Batch(s.worker, OutcomeMalformed)
		s.logMalformed(err)
		return
	}
	if rejected > 0 {
		s.m.MalformedEvents(s.worker, rejected)
		s.logMalformed(errRejectedEvents)
	}
	b.Seq = seq
	if outcome == OutcomeReplayed {
		s.stats.replayed.Add(1)
	} else {
		s.stats.applied.Add(1)
	}
	s.m.Batch(s.worker, outcome)
	if s.m != nil {
		var st, rm, cl int
		for i := range b.Events {
			switch b.Events[i].Kind {
			case indexer.EventStored:
				st++
			case indexer.EventRemoved:
				rm++
			case indexer.EventCleared:
				cl++
			}
		}
		s.m.Events(s.worker, "stored", st)
		s.m.Events(s.worker, "removed", rm)
		s.m.Events(s.worker, "cleared", cl)
	}
	if s.c.Batch(s.rank, b) {
		s.resync()
	}
}

// resync answers a consumer's unknown-parent report: at most once per resyncInterval, clear the
// rank and rebuild it from a replay from 0. Without a replay endpoint, or while a replay is
// already rebuilding, it does nothing.
func (s *zmqStream) resync() {
	if s.request == nil || s.replaying {
		return
	}
	now := s.now()
	if s.everResynced && now.Sub(s.lastResync) < s.resyncInterval {
		return
	}
	s.everResynced, s.lastResync = true, now
	s.m.Resync(s.worker)
	s.reset(ResetResync)
	s.clearCursor()
	s.startReplay(true, 0)
}

var errRejectedEvents = errors.New("kvbridge: events rejected inside a batch (wrong token_ids length or field types)")
