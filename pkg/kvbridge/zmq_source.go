package kvbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// Source defaults.
const (
	// DefaultQueueSize is the capacity of the queue between the socket readers and the
	// consumer goroutine; live batches that do not fit are dropped and counted.
	DefaultQueueSize = 4096
	// DefaultRcvHWM is the SUB receive high-water mark.
	DefaultRcvHWM = 100000
	// DefaultMaxMsgSize bounds one received frame (ZMQ_MAXMSGSIZE): libzmq drops a peer that
	// sends a larger one instead of allocating for it. Real batches are a few MB at most.
	DefaultMaxMsgSize = 64 << 20
	// zmqPollInterval is how often a disconnected rank checks its ReconnectGrace (and how long
	// the collector's reader blocks in zmq_poll).
	zmqPollInterval = 200 * time.Millisecond
	// DefaultReconnectGrace is how long a disconnected SUB may wait for libzmq's own
	// reconnection before the reader recreates its sockets: longer than libzmq's reconnect
	// interval cap (5 s), so it only acts when libzmq gave up.
	DefaultReconnectGrace = DefaultMaxBackoff + time.Second
	// zmqTickInterval is how often the consumer checks replay deadlines while a replay is in
	// flight (no ticker runs otherwise).
	zmqTickInterval = 200 * time.Millisecond
)

// ZMQConfig configures a ZMQSource: one worker's engine publisher(s), vLLM style (the engine
// binds, we connect).
type ZMQConfig struct {
	// Worker is the worker's label in logs and metrics.
	Worker string
	// Endpoint is rank 0's PUB endpoint (tcp://host:port); rank r uses port+r. A wildcard host
	// ("tcp://*:5557", as in an engine's own config) is read as 127.0.0.1.
	Endpoint string
	// Replay is rank 0's ROUTER replay endpoint; "" means the engine has none, so gaps clear the
	// worker instead of being repaired.
	Replay string
	// Topic is the SUB prefix filter ("" receives every topic).
	Topic string
	// DPSize is the number of data-parallel ranks; 0 means 1.
	DPSize int
	// ReconnectGrace is how long a rank may stay disconnected while libzmq reconnects on its
	// own before the source recreates the rank's sockets; 0 means DefaultReconnectGrace.
	ReconnectGrace time.Duration
	// OnState, when set, is called with every state the source enters, on the goroutine
	// that enters it (see SourceOptions.OnState).
	OnState func(StreamState)
	// ZMQOptions are the socket and stream options shared with CollectorConfig (zero: defaults).
	ZMQOptions
}

// ZMQOptions are the options a ZMQSource (ZMQConfig) and a ZMQCollector (CollectorConfig)
// share: socket limits, the stream rules' bounds (DESIGN.md §6) and the injected clock and
// randomness. A zero field (a nil func) means its default, so the zero value is the defaults.
type ZMQOptions struct {
	// QueueSize bounds the reader→consumer queue; 0 means DefaultQueueSize.
	QueueSize int
	// RcvHWM is the SUB receive high-water mark; 0 means DefaultRcvHWM.
	RcvHWM int
	// MaxMsgSize bounds one received frame in bytes; 0 means DefaultMaxMsgSize.
	MaxMsgSize int64
	// ReplayTimeout bounds one replay; 0 means DefaultReplayTimeout.
	ReplayTimeout time.Duration
	// ResyncInterval is the minimum time between unknown-parent resyncs of a stream; 0 means
	// DefaultResyncInterval (30 s).
	ResyncInterval time.Duration
	// MaxHeld bounds the live batches held per stream during a replay; 0 means DefaultMaxHeld.
	MaxHeld int
	// Now is the clock (nil: time.Now); Rand returns uniform uint64s for backoff jitter (nil: a
	// math/rand/v2 source).
	Now  func() time.Time
	Rand func() uint64
}

// setDefaults replaces every zero (or negative) option, and every nil func, with its default.
func (o *ZMQOptions) setDefaults() {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.RcvHWM <= 0 {
		o.RcvHWM = DefaultRcvHWM
	}
	if o.MaxMsgSize <= 0 {
		o.MaxMsgSize = DefaultMaxMsgSize
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = DefaultReplayTimeout
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.MaxHeld <= 0 {
		o.MaxHeld = DefaultMaxHeld
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Uint64
	}
}

// ZMQSource subscribes to one worker's KV events over ZMQ, one SUB per DP rank, and delivers
// them to a Consumer following DESIGN.md §6: a cursor per rank, replay from 0 on every
// (re)connection when a replay endpoint is known, gap repair through the rank's ROUTER,
// publisher-restart detection, a bounded queue with counted drops, and reconnection with
// jittered exponential backoff.
//
// Goroutines: Run starts one reader per rank, which owns that rank's SUB, its monitor socket and
// its replay DEALER (zmq sockets are not goroutine-safe), and one consumer goroutine, which
// owns the stream state and makes every Consumer call. State and Status are safe from any
// goroutine. A ZMQSource must not be copied, and Run may be called once.
type ZMQSource struct {
	cfg     ZMQConfig
	c       Consumer
	log     *zap.Logger
	m       *Metrics
	subEPs  []string
	repEPs  []string
	streams []*streamRules[[]byte]
	readers []*zmqReader
	queue   chan zmqItem
	state   stateCell

	// mu guards up, the per-rank connection flags behind State.
	mu sync.Mutex
	up []bool
}

// zmqMonitorSeq makes monitor endpoint names unique in the process: libzmq unbinds a stopped
// monitor's inproc endpoint asynchronously, so names are never reused.
var zmqMonitorSeq atomic.Uint64

// zmqItemKind tags what a reader queued.
type zmqItemKind uint8

const (
	zmqItemLive zmqItemKind = iota
	zmqItemReplay
	zmqItemConnected
	zmqItemMalformed
)

// zmqItem is one thing a reader hands to the consumer goroutine. payload is owned. Every
// source's queue holds DefaultQueueSize of them whether used or not, so the fields are laid
// out without padding (80 bytes; the small ones share a word).
type zmqItem struct {
	kind    zmqItemKind
	end     bool
	rank    int32
	seq     uint64
	gen     uint64
	payload []byte
	topic   string // collector only
	err     error
}

// NewZMQSource validates cfg and builds the source; it opens no sockets and starts no
// goroutines (Run does). c receives the events; log and m may be nil.
func NewZMQSource(cfg ZMQConfig, c Consumer, log *zap.Logger, m *Metrics) (*ZMQSource, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("kvbridge: new zmq source: empty endpoint")
	}
	if c == nil {
		return nil, errors.New("kvbridge: new zmq source: nil consumer")
	}
	if cfg.DPSize <= 0 {
		cfg.DPSize = 1
	}
	if cfg.ReconnectGrace <= 0 {
		cfg.ReconnectGrace = DefaultReconnectGrace
	}
	cfg.ZMQOptions.setDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	s := &ZMQSource{cfg: cfg, c: c, log: log, m: m, up: make([]bool, cfg.DPSize),
		queue: make(chan zmqItem, cfg.QueueSize)}
	s.state.notify = cfg.OnState
	scratch := &indexer.Batch{}
	for r := range cfg.DPSize {
		sub, err := rankEndpoint(connectEndpoint(cfg.Endpoint), r)
		if err != nil {
			return nil, fmt.Errorf("kvbridge: new zmq source %s: %w", cfg.Worker, err)
		}
		rep, err := rankEndpoint(connectEndpoint(cfg.Replay), r)
		if err != nil {
			return nil, fmt.Errorf("kvbridge: new zmq source %s: %w", cfg.Worker, err)
		}
		s.subEPs, s.repEPs = append(s.subEPs, sub), append(s.repEPs, rep)
		rd := &zmqReader{src: s, rank: r, sub: sub, replay: rep, reqs: make(chan zmqReplayReq, 1)}
		st := &streamRules[[]byte]{worker: cfg.Worker, rank: r, t: rankTransport(c, r), m: m, log: log, now: cfg.Now,
			replayTimeout: cfg.ReplayTimeout, resyncInterval: cfg.ResyncInterval, maxHeld: cfg.MaxHeld, scratch: scratch}
		if rep != "" {
			st.t.request = rd.requestReplay
		}
		s.streams, s.readers = append(s.streams, st), append(s.readers, rd)
	}
	return s, nil
}

// State returns the connection state: StreamUp when every rank's SUB has completed a
// handshake with its publisher, StreamConnecting before that, StreamDown after a disconnect or
// a socket failure, StreamStopped after Run returned.
func (s *ZMQSource) State() StreamState { return s.state.load() }

// ZMQStatus is a snapshot of a ZMQ source for /workers and `kvbridge tail`.
type ZMQStatus struct {
	Worker string       `json:"worker"`
	State  string       `json:"state"`
	Ranks  []RankStatus `json:"ranks"`
}

// Status returns per-rank cursors and counters.
func (s *ZMQSource) Status() ZMQStatus {
	st := ZMQStatus{Worker: s.cfg.Worker, State: s.State().String()}
	for _, r := range s.streams {
		st.Ranks = append(st.Ranks, r.status())
	}
	return st
}

// Endpoints returns the SUB and replay endpoints of every rank after the rank offsets.
func (s *ZMQSource) Endpoints() (sub, replay []string) { return s.subEPs, s.repEPs }

func (s *ZMQSource) setUp(rank int, up bool) {
	s.mu.Lock()
	s.up[rank] = up
	all := true
	for _, u := range s.up {
		all = all && u
	}
	s.mu.Unlock()
	switch {
	case all:
		s.state.store(StreamUp)
	case !up:
		s.state.store(StreamDown)
	}
	s.m.setStreamUp(s.cfg.Worker, all)
}

// Run subscribes until ctx is done, then closes every socket and returns nil (cancellation is
// the normal way to stop). It must be called once.
func (s *ZMQSource) Run(ctx context.Context) error {
	s.state.store(StreamConnecting)
	s.m.setStreamUp(s.cfg.Worker, false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, rd := range s.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd.run(ctx)
		}()
	}
	s.consume(ctx)
	wg.Wait()
	s.state.store(StreamStopped)
	s.m.setStreamUp(s.cfg.Worker, false)
	return nil
}

// consume is the consumer goroutine: it feeds queued items to the rank streams and, while a
// replay is in flight, checks replay deadlines (an idle source has no ticker to wake it).
func (s *ZMQSource) consume(ctx context.Context) {
	var tick replayTicker
	defer tick.set(false)
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-s.queue:
			st := s.streams[int(it.rank)]
			switch it.kind {
			case zmqItemLive:
				applySlots.acquire()
				st.live(it.seq, it.payload)
				applySlots.release()
			case zmqItemReplay:
				applySlots.acquire()
				st.replayMsg(it.gen, it.seq, it.payload, it.end)
				applySlots.release()
			case zmqItemConnected:
				st.connected()
			case zmqItemMalformed:
				st.malformedMsg(it.err)
			}
		case <-tick.c():
			if len(s.queue) > 0 {
				// Replies may be waiting behind the live batches: a replay's deadline bounds
				// the transport's silence, not this goroutine's backlog.
				continue
			}
			now := s.cfg.Now()
			for _, st := range s.streams {
				st.tick(now)
			}
		}
		waiting := false
		for _, st := range s.streams {
			waiting = waiting || st.replayDeadline()
		}
		tick.set(waiting)
	}
}

// replayTicker is a zmqTickInterval ticker that exists only while it is needed.
type replayTicker struct{ t *time.Ticker }

func (r *replayTicker) set(on bool) {
	switch {
	case on && r.t == nil:
		r.t = time.NewTicker(zmqTickInterval)
	case !on && r.t != nil:
		r.t.Stop()
		r.t = nil
	}
}

func (r *replayTicker) c() <-chan time.Time {
	if r.t == nil {
		return nil
	}
	return r.t.C
}

// enqueueLive queues a live batch without blocking; a full queue drops it (counted; the
// resulting seq gap is repaired like any other).
func (s *ZMQSource) enqueueLive(it zmqItem) {
	select {
	case s.queue <- it:
	default:
		// Counted here on the reader goroutine: the stream's counters are atomics and the
		// metrics are goroutine-safe.
		s.streams[int(it.rank)].stats.dropped.Add(1)
		s.m.countBatch(s.cfg.Worker, OutcomeDropped)
	}
}

// enqueue queues a control or replay item, waiting for room (these must not be lost).
func (s *ZMQSource) enqueue(ctx context.Context, it zmqItem) bool {
	select {
	case s.queue <- it:
		return true
	case <-ctx.Done():
		return false
	}
}

// zmqReplayReq asks a reader to request replay from start, tagging the replies with gen.
type zmqReplayReq struct{ start, gen uint64 }

// zmqReader owns one rank's sockets.
type zmqReader struct {
	src    *ZMQSource
	rank   int
	sub    string
	replay string
	// reqs carries replay requests from the consumer goroutine; capacity 1, newest wins.
	reqs chan zmqReplayReq
}

// requestReplay is called on the consumer goroutine. There is one replay in flight per rank: a
// newer request replaces one the reader has not picked up yet.
func (r *zmqReader) requestReplay(start, gen uint64) {
	for {
		select {
		case r.reqs <- zmqReplayReq{start, gen}:
			return
		default:
			select {
			case <-r.reqs:
			default:
			}
		}
	}
}

// run connects, reads and reconnects with jittered exponential backoff until ctx is done.
func (r *zmqReader) run(ctx context.Context) {
	bo := newBackoff(DefaultMinBackoff, DefaultMaxBackoff, r.src.cfg.Rand)
	for ctx.Err() == nil {
		received, err := r.session(ctx)
		if ctx.Err() != nil {
			return
		}
		r.src.setUp(r.rank, false)
		if received {
			bo.progressed()
		}
		wait := bo.next()
		r.src.log.Warn("kvbridge: zmq subscriber failed; reconnecting", zap.String("worker", r.src.cfg.Worker),
			zap.Int("rank", r.rank), zap.Error(err), zap.Duration("backoff", wait))
		if !sleep(ctx, wait) {
			return
		}
	}
}

// zmqSessionSockets are the sockets of one reader session, all used on the reader goroutine,
// each with its ZMQ_FD watch.
type zmqSessionSockets struct {
	sub, mon, dealer    *zmq.Socket
	subW, monW, dealerW *fdWatch
	dealerGen           uint64
	// connected is set by the monitor's handshake and cleared by its disconnect.
	connected bool
	// downSince is when the SUB lost its connection (zero while connected or never connected).
	downSince time.Time
	// grace ticks while the SUB is disconnected, to check ReconnectGrace (nil otherwise).
	grace *time.Ticker
}

func (ss *zmqSessionSockets) close() {
	ss.closeDealer()
	ss.setGrace(false)
	// Each watch stops before its socket closes (libzmq closes the descriptor it watches).
	ss.subW.close()
	ss.monW.close()
	if ss.sub != nil {
		ss.sub.Monitor("", 0) // stop the monitor before closing its PAIR
		ss.sub.Close()
	}
	if ss.mon != nil {
		ss.mon.Close()
	}
}

func (ss *zmqSessionSockets) closeDealer() {
	ss.dealerW.close()
	ss.dealerW = nil
	if ss.dealer != nil {
		ss.dealer.Close()
		ss.dealer = nil
	}
}

// setGrace starts (on) or stops the reconnect-grace ticker.
func (ss *zmqSessionSockets) setGrace(on bool) {
	switch {
	case on && ss.grace == nil:
		ss.grace = time.NewTicker(zmqPollInterval)
	case !on && ss.grace != nil:
		ss.grace.Stop()
		ss.grace = nil
	}
}

func (ss *zmqSessionSockets) graceChan() <-chan time.Time {
	if ss.grace == nil {
		return nil
	}
	return ss.grace.C
}

// open creates the session's SUB, subscribes it, attaches a connection monitor, connects, and
// watches both sockets' ZMQ_FD.
func (r *zmqReader) open(ss *zmqSessionSockets) (err error) {
	if ss.sub, err = zmq.NewSocket(zmq.SUB); err != nil {
		return err
	}
	if err = ss.sub.SetLinger(0); err != nil {
		return err
	}
	if err = ss.sub.SetRcvhwm(r.src.cfg.RcvHWM); err != nil {
		return err
	}
	if err = ss.sub.SetMaxmsgsize(r.src.cfg.MaxMsgSize); err != nil {
		return err
	}
	// libzmq's own TCP reconnection, made exponential up to the same 5 s cap.
	if err = ss.sub.SetReconnectIvl(DefaultMinBackoff); err != nil {
		return err
	}
	if err = ss.sub.SetReconnectIvlMax(DefaultMaxBackoff); err != nil {
		return err
	}
	if err = ss.sub.SetSubscribe(r.src.cfg.Topic); err != nil {
		return err
	}
	// The monitor reports every TCP (re)connection libzmq makes on its own, so a restarted
	// publisher triggers the replay from 0 that rebuilds the rank.
	monEP := fmt.Sprintf("inproc://kvbridge-mon-%d-%d", zmqMonitorSeq.Add(1), r.rank)
	if err = ss.sub.Monitor(monEP, zmq.EVENT_HANDSHAKE_SUCCEEDED|zmq.EVENT_DISCONNECTED); err != nil {
		return err
	}
	if ss.mon, err = zmq.NewSocket(zmq.PAIR); err != nil {
		return err
	}
	if err = ss.mon.SetLinger(0); err != nil {
		return err
	}
	if err = ss.mon.Connect(monEP); err != nil {
		return err
	}
	if err = ss.sub.Connect(r.sub); err != nil {
		return fmt.Errorf("kvbridge: subscribe %s: %w", r.sub, err)
	}
	if ss.monW, err = watchSocket(ss.mon); err != nil {
		return err
	}
	ss.subW, err = watchSocket(ss.sub)
	return err
}

// session opens the rank's SUB (with a connection monitor) and reads until ctx is done or a
// socket fails. received reports whether any message arrived (to reset the backoff). It waits
// in one select on its sockets' ZMQ_FD watches, replay requests and ctx, so a quiet rank costs
// no thread and no wake-up; the only timer runs while the SUB is disconnected.
func (r *zmqReader) session(ctx context.Context) (received bool, err error) {
	var ss zmqSessionSockets
	defer ss.close()
	if err := r.open(&ss); err != nil {
		return false, err
	}
	for {
		select {
		case <-ctx.Done():
			return received, nil
		case req := <-r.reqs:
			if err := r.sendReplayRequest(&ss, req); err != nil {
				// The request is lost; the consumer's replay timeout handles it.
				r.src.m.countReplay(r.src.cfg.Worker, ReplayError)
				r.src.log.Warn("kvbridge: replay request failed", zap.String("worker", r.src.cfg.Worker),
					zap.Int("rank", r.rank), zap.Error(err))
			}
		case <-ss.monW.ready:
			err = r.readMonitor(ctx, &ss)
		case <-ss.subW.ready:
			// Before a connection's first batches, its handshake event is queued first, as it
			// would be had both sockets been ready at once.
			if !ss.connected {
				err = r.readMonitor(ctx, &ss)
			}
			if err == nil {
				var got bool
				got, err = r.readLive(&ss)
				received = received || got
			}
		case <-ss.dealerW.readyChan():
			err = r.readReplay(ctx, &ss)
		case <-ss.graceChan():
			if grace := r.src.cfg.ReconnectGrace; !ss.downSince.IsZero() && r.src.cfg.Now().Sub(ss.downSince) > grace {
				// libzmq does not reconnect after some failures (e.g. a frame above
				// MaxMsgSize): start over with fresh sockets, after the backoff.
				return received, fmt.Errorf("kvbridge: %s: disconnected for over %v", r.sub, grace)
			}
		}
		if err != nil || ctx.Err() != nil {
			return received, err
		}
	}
}

func (r *zmqReader) readMonitor(ctx context.Context, ss *zmqSessionSockets) error {
	for {
		ev, _, _, err := ss.mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) { // EAGAIN: drained
				return nil
			}
			return fmt.Errorf("kvbridge: monitor %s: %w", r.sub, err)
		}
		switch {
		case ev&zmq.EVENT_HANDSHAKE_SUCCEEDED != 0:
			ss.connected, ss.downSince = true, time.Time{}
			ss.setGrace(false)
			r.src.setUp(r.rank, true)
			r.src.enqueue(ctx, zmqItem{kind: zmqItemConnected, rank: int32(r.rank)})
		case ev&zmq.EVENT_DISCONNECTED != 0:
			ss.connected, ss.downSince = false, r.src.cfg.Now()
			ss.setGrace(true)
			r.src.setUp(r.rank, false)
		}
	}
}

// readLive drains the SUB without blocking.
func (r *zmqReader) readLive(ss *zmqSessionSockets) (bool, error) {
	got := false
	for {
		frames, err := ss.sub.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) {
				return got, nil
			}
			return got, fmt.Errorf("kvbridge: receive %s: %w", r.sub, err)
		}
		got = true
		m, err := ParseLive(frames)
		if err != nil {
			r.src.enqueueMalformed(r.rank, err)
			continue
		}
		r.src.enqueueLive(zmqItem{kind: zmqItemLive, rank: int32(r.rank), seq: m.Seq, payload: m.Payload})
	}
}

// enqueueMalformed reports a malformed message to the consumer if there is room; otherwise
// it is counted here.
func (s *ZMQSource) enqueueMalformed(rank int, err error) {
	select {
	case s.queue <- zmqItem{kind: zmqItemMalformed, rank: int32(rank), err: err}:
	default:
		s.streams[rank].stats.malformed.Add(1)
		s.m.countBatch(s.cfg.Worker, OutcomeMalformed)
	}
}

// sendReplayRequest opens a fresh DEALER for each request, so replies to an abandoned request
// can never be mistaken for the new one's, and sends ["", start_seq] (wire/vllm-zmq.md §8.1).
func (r *zmqReader) sendReplayRequest(ss *zmqSessionSockets, req zmqReplayReq) error {
	ss.closeDealer()
	d, err := dialReplay(r.replay, r.src.cfg.MaxMsgSize, req.start)
	if err != nil {
		return err
	}
	w, err := watchSocket(d)
	if err != nil {
		d.Close()
		return fmt.Errorf("kvbridge: replay %s: %w", r.replay, err)
	}
	ss.dealer, ss.dealerW, ss.dealerGen = d, w, req.gen
	return nil
}

// dialReplay opens a DEALER to a publisher's ROUTER replay endpoint (linger 0, frames bounded
// by maxMsgSize) and sends the replay request for sequence numbers from start. On failure the
// socket is closed; only a failure to create it is returned unwrapped.
func dialReplay(endpoint string, maxMsgSize int64, start uint64) (*zmq.Socket, error) {
	d, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		return nil, err
	}
	if err = d.SetLinger(0); err == nil {
		err = d.SetMaxmsgsize(maxMsgSize)
	}
	if err == nil {
		err = d.Connect(endpoint)
	}
	if err == nil {
		_, err = d.SendMessage([]byte{}, AppendSeq(nil, start))
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("kvbridge: replay %s: %w", endpoint, err)
	}
	return d, nil
}

// readReplay drains replay replies; after the terminator the DEALER is closed.
func (r *zmqReader) readReplay(ctx context.Context, ss *zmqSessionSockets) error {
	for ss.dealer != nil {
		frames, err := ss.dealer.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) {
				return nil
			}
			return fmt.Errorf("kvbridge: replay %s: %w", r.replay, err)
		}
		m, err := ParseReplayReply(frames)
		if err != nil {
			r.src.enqueueMalformed(r.rank, err)
			continue
		}
		if !r.src.enqueue(ctx, zmqItem{kind: zmqItemReplay, rank: int32(r.rank), seq: m.Seq, payload: m.Payload, gen: ss.dealerGen, end: m.End}) {
			return nil
		}
		if m.End {
			ss.closeDealer()
		}
	}
	return nil
}

// rankTransport is the stream transport of DP rank r of a ZMQ publisher: msgpack payloads
// (owned: zmq4 allocates each received frame), delivered into c as rank r, restarts detected
// from live sequence numbers, repairs by ROUTER replay beside the live stream (request is set
// when the publisher has a replay endpoint), and a reconnection resumed when the publisher
// still has the batch at the cursor, byte for byte.
func rankTransport(c Consumer, r int) streamTransport[[]byte] {
	return streamTransport[[]byte]{
		decode:   decodeBatchRejected,
		deliver:  func(b *indexer.Batch) (int, bool) { return r, c.Batch(r, b) },
		reset:    func(reason string) { c.Reset(r, reason) },
		restarts: true,
		same:     bytes.Equal,
	}
}
