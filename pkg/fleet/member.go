package fleet

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Member is the fleet's per-worker state around a *worker.Worker: the pool (model) it is routed
// in, where it came from, its index IDs (one per DP rank), its engine client, its event source
// and the goroutines that run them. Its methods are safe for concurrent use.
//
// A Member must not be copied.
type Member struct {
	// What a routing decision reads of every candidate comes first (see worker.Worker).
	f    *Fleet
	w    *worker.Worker
	pool *Pool
	ids  []indexer.WorkerID // set once before the member is published; ids[0] is the tree/pending ID
	// specBlockSize is the spec's block_size, kept here because Worker.Spec copies the whole
	// spec and routing reads it for every candidate.
	specBlockSize int
	// src is the worker's own event source (nil: none, or --kv-index off). Built by start.
	src atomic.Pointer[kvbridge.Source]
	// srcFed is whether src feeds the index: it is set and neither unavailable nor stopped.
	// The source keeps it (kvbridge.SourceOptions.OnState) so that EventFed, read for every
	// candidate of every routing decision, reads this member and not the source, whose state
	// sits in another cache line per worker (a miss per worker per decision at 1,024 workers,
	// docs/scaling.md).
	srcFed atomic.Bool
	// collected is set when the --kv-listen collector delivered a batch for this worker;
	// removed once teardown took it out of the fleet (the collector then skips it).
	collected atomic.Bool
	removed   atomic.Bool

	origin string // OriginFlag, OriginFile, OriginAdmin or a discovery's "dns NAME"
	// drainStart is when the member began draining (a stamp, clock.go; 0: serving).
	drainStart atomic.Int64
	// healthyOnce is set by the first health check that passed (readiness waits, for a while,
	// for a worker that never passed one). recheck asks the health loop for an early check.
	healthyOnce atomic.Bool
	recheck     chan struct{}
	// downSince is when the worker turned unhealthy (a stamp, clock.go), 0 while healthy, -1 once
	// its cache has been forgotten (health.go, forgetIfLongDown). failingSince is when the
	// checks of a worker still in rotation began to fail (0: they pass; inconclusive).
	downSince    atomic.Int64
	failingSince atomic.Int64
	// checkFailures counts the failed health checks (HealthCheckFailures).
	checkFailures atomic.Int64
	closeOnce     sync.Once

	eng engine.Engine

	// sink applies the worker's events to the index, rank r as ids[r]; set with ids.
	sink *kvbridge.SinkConsumer
	// lifeMu guards cancel and running. Lock order: Fleet.mu before lifeMu.
	lifeMu  sync.Mutex
	cancel  context.CancelFunc
	running sync.WaitGroup
}

func (f *Fleet) newMember(spec worker.Spec, p *Pool, origin string) (*Member, error) {
	w, err := worker.New(spec)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(w, p.engineCfg)
	if err != nil {
		return nil, err
	}
	return &Member{f: f, w: w, pool: p, origin: origin, eng: eng, specBlockSize: spec.BlockSize, recheck: make(chan struct{}, 1)}, nil
}

// setIDs gives the member its index IDs, before it is published.
func (m *Member) setIDs(ids []indexer.WorkerID) {
	m.ids = ids
	m.sink = &kvbridge.SinkConsumer{Sink: m.pool.lookup.Index, IDs: ids}
}

// Worker returns the worker: its spec, health and live load.
func (m *Member) Worker() *worker.Worker { return m.w }

// Engine returns the worker's engine client.
func (m *Member) Engine() engine.Engine { return m.eng }

// Pool returns the pool the worker is routed in.
func (m *Member) Pool() *Pool { return m.pool }

// Origin returns where the worker came from: OriginFlag, OriginFile, OriginAdmin or a
// discovery's "dns NAME".
func (m *Member) Origin() string { return m.origin }

// start launches the member's goroutines: the health loop and, with events configured, the
// event source. They run until ctx is done or stop is called.
func (m *Member) start(ctx context.Context, cancel context.CancelFunc, wg *sync.WaitGroup) {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.cancel = cancel
	run := func(f func(context.Context)) {
		wg.Add(1)
		m.running.Add(1)
		go func() {
			defer wg.Done()
			defer m.running.Done()
			f(ctx)
		}()
	}
	run(m.healthLoop)
	if m.f.cfg.KVIndex == KVIndexOff {
		return
	}
	src, err := m.newEventSource()
	if err != nil {
		m.f.log.Warn("worker event stream not started", zap.String("worker", m.w.URL()), zap.Error(err))
		return
	}
	if src == nil {
		return
	}
	m.srcFed.Store(true) // a source that has not run is connecting
	m.src.Store(&src)
	run(m.runSource(src))
}

// stop cancels the member's goroutines and waits for them.
func (m *Member) stop() {
	m.lifeMu.Lock()
	cancel := m.cancel
	m.lifeMu.Unlock()
	if cancel != nil {
		cancel()
	}
	m.running.Wait()
}

// close releases the member's clients, once however often it is called. Call after stop.
func (m *Member) close() { m.closeOnce.Do(m.eng.Close) }

// DrainingSince returns when the member began draining (the zero time: it is serving).
func (m *Member) DrainingSince() time.Time {
	if t := m.drainStart.Load(); t != 0 {
		return m.f.instant(t)
	}
	return time.Time{}
}

// source returns the member's event source, or nil.
func (m *Member) source() kvbridge.Source {
	if p := m.src.Load(); p != nil {
		return *p
	}
	return nil
}

// EventFed reports whether the worker is scored from the event index: --kv-index auto, and
// either its own stream is configured and not known to be unavailable, or the --kv-listen
// collector has delivered events for it.
func (m *Member) EventFed() bool {
	if m.f.cfg.KVIndex == KVIndexOff {
		return false
	}
	return m.collected.Load() || m.srcFed.Load()
}

// sourceState is the member's kvbridge.SourceOptions.OnState: it keeps srcFed.
func (m *Member) sourceState(st kvbridge.StreamState) {
	m.srcFed.Store(st != kvbridge.StreamUnavailable && st != kvbridge.StreamStopped)
}

// StreamState returns the state of the worker's own event source, if it has one.
func (m *Member) StreamState() (kvbridge.StreamState, bool) {
	if s := m.source(); s != nil {
		return s.State(), true
	}
	return 0, false
}

// EventStream describes the worker's event stream for the admin API: its own source's state,
// "collector" when the --kv-listen collector feeds it, else "".
func (m *Member) EventStream() string {
	if st, ok := m.StreamState(); ok {
		return st.String()
	}
	if m.collected.Load() {
		return "collector"
	}
	return ""
}

// streamSettled reports whether the worker's event stream no longer holds readiness back: no
// stream, or one that is up or known to be unavailable.
func (m *Member) streamSettled() bool {
	st, ok := m.StreamState()
	return !ok || st == kvbridge.StreamUp || st == kvbridge.StreamUnavailable
}

// MarkDown marks the worker unhealthy for reason (a request to it failed in transport) until
// its next health check, which comes soon (healthRecheckMin); as after a failed health check,
// its cache is forgotten if it stays down for a health interval. It reports whether the worker
// was healthy before.
func (m *Member) MarkDown(reason string) bool {
	if !m.w.SetHealth(false, reason) {
		return false
	}
	m.wentDown()
	select {
	case m.recheck <- struct{}{}:
	default: // a re-check is asked for already
	}
	m.f.log.Warn("worker marked down after a failed request", zap.String("worker", m.w.URL()), zap.String("reason", reason))
	return true
}

// forgetCache clears what the gateway believes the worker caches (indexer.Lookup.Forget).
// Called when the worker has been down for a health interval (forgetIfLongDown): a crashed
// engine comes back with an empty cache, and routing on its old blocks would send requests to
// a worker that no longer has them. Its event stream rebuilds the view when it is back: a
// restarted engine fails the reconnection's check and is replayed from 0, and an engine that
// was only unreachable is resumed from the cursor, and its sink (kvbridge.SinkConsumer.Forget)
// asks for the resync that replays it from 0.
func (m *Member) forgetCache() {
	m.pool.lookup.Forget(m.LookupWorker())
	if m.sink != nil {
		m.sink.Forget()
	}
}

// HealthCheckFailures returns how many health checks of the worker have failed, those
// outweighed by the requests it was serving included.
func (m *Member) HealthCheckFailures() int64 { return m.checkFailures.Load() }

// LookupWorker describes the worker to its pool's lookup: its DP ranks' IDs, its spec's block
// size and whether it is scored from events.
func (m *Member) LookupWorker() indexer.LookupWorker {
	return indexer.LookupWorker{IDs: m.ids, BlockSize: m.specBlockSize, EventFed: m.EventFed()}
}

// BlockSize returns the block size the worker is scored at (learned from its events, else its
// spec's, else the pool's).
func (m *Member) BlockSize() int { return m.pool.lookup.BlockSizeOf(m.LookupWorker()) }

// IndexBlocks returns the blocks the index holds for the worker, over its DP ranks.
func (m *Member) IndexBlocks() int {
	n := 0
	for _, id := range m.ids {
		n += m.pool.lookup.Index.WorkerBlocks(id)
	}
	return n
}

// topicHost returns host:port of the worker's URL, the middle part of the kv@<host:port>@<model>
// topics publishers use with --kv-listen.
func (m *Member) topicHost() string {
	u, err := url.Parse(m.w.URL())
	if err != nil {
		return ""
	}
	return u.Host
}
