package router

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// member is the router's per-worker state around a *worker.Worker: the pool (model) it is
// routed in, where it came from, its index IDs (one per DP rank), its engine client, its event
// source and the goroutines that run them.
//
// A member must not be copied.
type member struct {
	rt     *Router
	w      *worker.Worker
	pool   *pool
	origin string             // OriginFlag, OriginFile, OriginAdmin or a discovery's "dns NAME"
	ids    []indexer.WorkerID // set once before the member is published; ids[0] is the tree/pending ID
	// specBlockSize is the spec's block_size, kept here because Worker.Spec copies the whole
	// spec and routing reads it for every candidate.
	specBlockSize int
	// drainStart is when the member began draining (unix nanos; 0: serving).
	drainStart atomic.Int64
	closeOnce  sync.Once

	eng engine.Engine

	// sink applies the worker's events to the index, rank r as ids[r]; set with ids.
	sink *kvbridge.SinkConsumer
	// src is the worker's own event source (nil: none, or --kv-index off). Built by start.
	src atomic.Pointer[kvbridge.Source]
	// collected is set when the --kv-listen collector delivered a batch for this worker;
	// removed once RemoveWorker took it out of the fleet (the collector then skips it).
	collected atomic.Bool
	removed   atomic.Bool

	// lifeMu guards cancel and running. Lock order: Router.mu before lifeMu.
	lifeMu  sync.Mutex
	cancel  context.CancelFunc
	running sync.WaitGroup
}

func newMember(rt *Router, w *worker.Worker, p *pool, origin string) (*member, error) {
	eng, err := engine.New(w, p.engineCfg)
	if err != nil {
		return nil, err
	}
	return &member{rt: rt, w: w, pool: p, origin: origin, eng: eng, specBlockSize: w.Spec().BlockSize}, nil
}

// start launches the member's goroutines: the health loop and, with events configured, the
// event source. They run until ctx is done or stop is called.
func (m *member) start(ctx context.Context, cancel context.CancelFunc, wg *sync.WaitGroup) {
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
	if m.rt.cfg.KVIndex == KVIndexOff {
		return
	}
	src, err := m.rt.newEventSource(m)
	if err != nil {
		m.rt.log.Warn("worker event stream not started", zap.String("worker", m.w.URL()), zap.Error(err))
		return
	}
	if src == nil {
		return
	}
	m.src.Store(&src)
	run(func(ctx context.Context) {
		err := src.Run(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case isUnimplemented(err):
			m.rt.log.Info("worker has no KV event stream; scoring it from the approximate tree", zap.String("worker", m.w.URL()))
		default:
			m.rt.log.Warn("worker event stream ended", zap.String("worker", m.w.URL()), zap.Error(err))
		}
	})
}

// stop cancels the member's goroutines and waits for them.
func (m *member) stop() {
	m.lifeMu.Lock()
	cancel := m.cancel
	m.lifeMu.Unlock()
	if cancel != nil {
		cancel()
	}
	m.running.Wait()
}

// close releases the member's clients, once however often it is called. Call after stop.
func (m *member) close() { m.closeOnce.Do(m.eng.Close) }

// draining reports whether the member has left the serving fleet and is finishing its
// in-flight requests.
func (m *member) draining() bool { return m.drainStart.Load() != 0 }

// source returns the member's event source, or nil.
func (m *member) source() kvbridge.Source {
	if p := m.src.Load(); p != nil {
		return *p
	}
	return nil
}

// eventFed reports whether the worker is scored from the event index: --kv-index auto, and
// either its own stream is configured and not known to be unavailable, or the --kv-listen
// collector has delivered events for it.
func (m *member) eventFed() bool {
	if m.rt.cfg.KVIndex == KVIndexOff {
		return false
	}
	if m.collected.Load() {
		return true
	}
	if s := m.source(); s != nil {
		st := s.State()
		return st != kvbridge.StreamUnavailable && st != kvbridge.StreamStopped
	}
	return false
}

// streamState returns the state of the worker's own event source, if it has one.
func (m *member) streamState() (kvbridge.StreamState, bool) {
	if s := m.source(); s != nil {
		return s.State(), true
	}
	return 0, false
}

// streamSettled reports whether the worker's event stream no longer holds readiness back: no
// stream, or one that is up or known to be unavailable.
func (m *member) streamSettled() bool {
	st, ok := m.streamState()
	return !ok || st == kvbridge.StreamUp || st == kvbridge.StreamUnavailable
}

// forgetCache clears what the router believes the worker caches: its blocks in the event index
// (every DP rank), the approximate tree and the pending overlay. Called when the worker goes
// down: a crashed engine comes back with an empty cache, and routing on its old blocks would
// send requests to a worker that no longer has them. A worker that was only briefly unreachable
// rebuilds its view from its event stream: on reconnect the stream replays from 0, and a batch
// whose parent was cleared makes the stream resync (kvbridge.Consumer's contract).
func (m *member) forgetCache() {
	lk := &m.pool.lookup
	for _, id := range m.ids {
		lk.Index.ResetWorker(id)
		if lk.Tree != nil {
			lk.Tree.RemoveWorker(id)
		}
		if lk.Pending != nil {
			lk.Pending.RemoveWorker(id)
		}
	}
}

// lookupWorker describes the worker to the lookup: its DP ranks' IDs, its spec's block size
// and whether it is scored from events.
func (m *member) lookupWorker() indexer.LookupWorker {
	return indexer.LookupWorker{IDs: m.ids, BlockSize: m.specBlockSize, EventFed: m.eventFed()}
}

// blockSize returns the block size the worker is scored at (learned from its events, else its
// spec's, else the default).
func (m *member) blockSize() int { return m.pool.lookup.BlockSizeOf(m.lookupWorker()) }

// indexBlocks returns the blocks the index holds for the worker, over its DP ranks.
func (m *member) indexBlocks() int {
	n := 0
	for _, id := range m.ids {
		n += m.pool.lookup.Index.WorkerBlocks(id)
	}
	return n
}

// topicHost returns host:port of the worker's URL, the middle part of the kv@<host:port>@<model>
// topics publishers use with --kv-listen.
func (m *member) topicHost() string {
	u, err := url.Parse(m.w.URL())
	if err != nil {
		return ""
	}
	return u.Host
}
