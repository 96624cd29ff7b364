package kvbridge

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Batch outcomes, the values of the "outcome" label of kvgate_kv_event_batches_total.
const (
	// OutcomeApplied: the batch was delivered to the Consumer in order.
	OutcomeApplied = "applied"
	// OutcomeDuplicate: the batch's seq was at or below the cursor (a replayed batch already
	// applied) and was skipped.
	OutcomeDuplicate = "duplicate"
	// OutcomeReplayed: the batch came from a replay reply and was delivered.
	OutcomeReplayed = "replayed"
	// OutcomeDropped: the batch was dropped before delivery (a full queue, or held batches
	// discarded on reconnect).
	OutcomeDropped = "dropped"
	// OutcomeMalformed: the message or payload could not be decoded and was skipped.
	OutcomeMalformed = "malformed"
)

// Replay results, the values of the "result" label of kvgate_kv_replay_requests_total.
const (
	// ReplayOK: the replay started at the requested seq and was applied.
	ReplayOK = "ok"
	// ReplayMismatch: the first replayed seq was not the requested one (the publisher's buffer
	// no longer held it); the worker was reset.
	ReplayMismatch = "mismatch"
	// ReplayTimeout: the replay fell silent (no reply within the replay timeout) before its
	// terminator.
	ReplayTimeout = "timeout"
	// ReplayError: the request could not be sent or the reply was malformed.
	ReplayError = "error"
	// ReplayUnavailable: a gap was found but no replay endpoint is configured.
	ReplayUnavailable = "unavailable"
)

// Reset reasons, the values of the "reason" label of kvgate_kv_worker_resets_total. Sources may
// use other short lower-case reasons; these are the ones the ZMQ source emits.
const (
	ResetRestart        = "publisher_restart"
	ResetGap            = "unrepaired_gap"
	ResetReplayFromZero = "replay_from_zero"
	ResetResync         = "resync"
	ResetOutOfRange     = "out_of_range"
	ResetDataLoss       = "data_loss"
	// ResetSnapshot: a server answered a cursor outside its history with a snapshot.
	ResetSnapshot = "snapshot"
	// ResetSnapshotCut: a stream ended inside its snapshot; the next one starts over from 0.
	ResetSnapshotCut = "snapshot_cut"
)

// Metrics holds the Prometheus collectors of pkg/kvbridge's event sources. Build it with
// NewMetrics from the registerer cmd/* passes in; there are no package-level collectors.
//
// Every method is safe for concurrent use and safe on a nil *Metrics (it then does nothing), so
// tests and callers without metrics can pass nil. The "worker" label is the source's worker
// label (e.g. the worker URL or name); "rank" is the DP rank as a decimal string.
type Metrics struct {
	batches   *prometheus.CounterVec // worker, outcome
	events    *prometheus.CounterVec // worker, kind
	malformed *prometheus.CounterVec // worker (malformed events inside decodable batches)
	gaps      *prometheus.CounterVec // worker
	skipped   *prometheus.CounterVec // worker
	replays   *prometheus.CounterVec // worker, result
	resets    *prometheus.CounterVec // worker, reason
	resyncs   *prometheus.CounterVec // worker
	snapshots *prometheus.CounterVec // worker
	streamUp  *prometheus.GaugeVec   // worker
	cursor    *prometheus.GaugeVec   // worker, rank
}

// NewMetrics creates the collectors and registers them on reg. A nil reg builds unregistered
// collectors (useful in tests). When a collector with the same description is already registered
// on reg (for example a second NewMetrics on the same registry), the existing collector is
// reused instead of failing, so building several sources from one registry never panics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_event_batches_total",
			Help: "KV event batches received from engines, by outcome (applied, duplicate, replayed, dropped, malformed).",
		}, []string{"worker", "outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_events_total",
			Help: "KV cache events delivered to the index, by kind (stored, removed, cleared).",
		}, []string{"worker", "kind"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_malformed_events_total",
			Help: "Single events rejected inside otherwise decodable batches (e.g. token_ids length not block_size times the number of hashes).",
		}, []string{"worker"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_event_gaps_total",
			Help: "Sequence gaps detected in a KV event stream (any DP rank).",
		}, []string{"worker"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_event_batches_skipped_total",
			Help: "Sequence numbers a KV event stream passed over without applying: batches lost to a gap (in transit, or dropped from the queue) that no replay delivered.",
		}, []string{"worker"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_replay_requests_total",
			Help: "Replay requests sent to an engine's replay endpoint (or wanted when none exists), by result.",
		}, []string{"worker", "result"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_worker_resets_total",
			Help: "Times a worker's cache view was cleared by its event source, by reason.",
		}, []string{"worker", "reason"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_resync_requests_total",
			Help: "Resyncs started because the index saw a stored chain with an unknown parent (rate-limited).",
		}, []string{"worker"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_snapshots_total",
			Help: "Subscriptions a server (kvbridge serve) opened with a snapshot of the engine's current blocks instead of its history.",
		}, []string{"worker"}),
		streamUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvgate_kv_stream_up",
			Help: "1 when the worker's KV event stream is connected, 0 otherwise.",
		}, []string{"worker"}),
		cursor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvgate_kv_stream_cursor",
			Help: "Last applied sequence number of a worker's KV event stream, per DP rank.",
		}, []string{"worker", "rank"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.batches, err = registerVec(reg, m.batches)
	if err != nil {
		return nil, err
	}
	if m.events, err = registerVec(reg, m.events); err != nil {
		return nil, err
	}
	if m.malformed, err = registerVec(reg, m.malformed); err != nil {
		return nil, err
	}
	if m.gaps, err = registerVec(reg, m.gaps); err != nil {
		return nil, err
	}
	if m.skipped, err = registerVec(reg, m.skipped); err != nil {
		return nil, err
	}
	if m.replays, err = registerVec(reg, m.replays); err != nil {
		return nil, err
	}
	if m.resets, err = registerVec(reg, m.resets); err != nil {
		return nil, err
	}
	if m.resyncs, err = registerVec(reg, m.resyncs); err != nil {
		return nil, err
	}
	if m.snapshots, err = registerVec(reg, m.snapshots); err != nil {
		return nil, err
	}
	if m.streamUp, err = registerVec(reg, m.streamUp); err != nil {
		return nil, err
	}
	if m.cursor, err = registerVec(reg, m.cursor); err != nil {
		return nil, err
	}
	return m, nil
}

// registerVec registers c, returning the already registered collector of the same kind when
// reg has one (AlreadyRegisteredError), so repeated construction does not fail.
func registerVec[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		var zero T
		return zero, fmt.Errorf("kvbridge: register metrics: %w", err)
	}
	return c, nil
}

// countBatch counts one batch of worker with the given outcome (one of the Outcome* constants).
func (m *Metrics) countBatch(worker, outcome string) {
	if m == nil {
		return
	}
	m.batches.WithLabelValues(worker, outcome).Inc()
}

// countSkipped counts n sequence numbers a stream of worker passed over.
func (m *Metrics) countSkipped(worker string, n uint64) {
	if m == nil || n == 0 {
		return
	}
	m.skipped.WithLabelValues(worker).Add(float64(n))
}

// countEvents counts n delivered events of the given kind ("stored", "removed", "cleared"; see
// indexer.EventKind.String).
func (m *Metrics) countEvents(worker, kind string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.events.WithLabelValues(worker, kind).Add(float64(n))
}

// countBatchEvents counts a delivered batch's events by kind.
func (m *Metrics) countBatchEvents(worker string, b *indexer.Batch) {
	if m == nil {
		return
	}
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
	m.countEvents(worker, indexer.EventStored.String(), st)
	m.countEvents(worker, indexer.EventRemoved.String(), rm)
	m.countEvents(worker, indexer.EventCleared.String(), cl)
}

// countMalformed counts n events rejected inside a decodable batch.
func (m *Metrics) countMalformed(worker string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.malformed.WithLabelValues(worker).Add(float64(n))
}

// countGap counts one sequence gap of worker (a lost batch on any of its DP ranks, including a
// batch dropped by a full queue).
func (m *Metrics) countGap(worker string) {
	if m == nil {
		return
	}
	m.gaps.WithLabelValues(worker).Inc()
}

// countReplay counts one replay request of worker with its result (one of the Replay* constants).
func (m *Metrics) countReplay(worker, result string) {
	if m == nil {
		return
	}
	m.replays.WithLabelValues(worker, result).Inc()
}

// countReset counts one reset of worker's cache view with a short lower-case reason (see the Reset*
// constants).
func (m *Metrics) countReset(worker, reason string) {
	if m == nil {
		return
	}
	m.resets.WithLabelValues(worker, reason).Inc()
}

// countResync counts one resync started because of an unknown parent.
func (m *Metrics) countResync(worker string) {
	if m == nil {
		return
	}
	m.resyncs.WithLabelValues(worker).Inc()
}

// countSnapshot counts one subscription of worker that opened with a snapshot.
func (m *Metrics) countSnapshot(worker string) {
	if m == nil {
		return
	}
	m.snapshots.WithLabelValues(worker).Inc()
}

// setStreamUp sets worker's stream-up gauge to 1 (up) or 0.
func (m *Metrics) setStreamUp(worker string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.streamUp.WithLabelValues(worker).Set(v)
}

// setCursor records the last applied sequence number of rank of worker. Values above 2^53 lose
// precision in the gauge; they are informational.
func (m *Metrics) setCursor(worker string, rank int, seq uint64) {
	if m == nil {
		return
	}
	m.cursor.WithLabelValues(worker, strconv.Itoa(rank)).Set(float64(seq))
}

// Forget removes every series of worker, for when a worker is removed from the fleet.
func (m *Metrics) Forget(worker string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"worker": worker}
	m.batches.DeletePartialMatch(l)
	m.events.DeletePartialMatch(l)
	m.malformed.DeletePartialMatch(l)
	m.gaps.DeletePartialMatch(l)
	m.replays.DeletePartialMatch(l)
	m.resets.DeletePartialMatch(l)
	m.resyncs.DeletePartialMatch(l)
	m.snapshots.DeletePartialMatch(l)
	m.streamUp.DeletePartialMatch(l)
	m.cursor.DeletePartialMatch(l)
}
