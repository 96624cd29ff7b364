package kvbridge

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// CollectorConfig configures a ZMQCollector (the gateway's `--kv-listen tcp://*:PORT`).
type CollectorConfig struct {
	// Listen is the endpoint the SUB binds, e.g. "tcp://*:5557".
	Listen string
	// Topic is the SUB prefix filter ("" receives every topic).
	Topic string
	// Replay optionally returns the replay (ROUTER) endpoint of the publisher behind topic, or
	// "" when it has none. Nil means no replay for any topic: gaps then clear the worker. Bind
	// mode cannot learn a publisher's replay endpoint from the wire, so it must be configured
	// per worker (e.g. from the worker spec's replay=).
	Replay func(topic string) string
	// ZMQOptions are the socket and stream options shared with ZMQConfig (zero: defaults).
	ZMQOptions
}

// CollectorRoute maps a message topic (`kv@<host:port>@<model>` for llm-d's simulator) to the
// Consumer of the worker publishing it and the DP rank to deliver as when the batch's envelope
// carries no rank. ok=false drops the message (counted as unrouted). It is called on the
// collector's consumer goroutine, once per new (topic, rank) stream.
type CollectorRoute func(topic string) (c Consumer, rank int, ok bool)

// ZMQCollector is the bind-mode source: one SUB bound on Listen that publishers connect to
// (llm-d's simulator dials its --zmq-endpoint), with batches attributed to workers by topic.
// Each (topic, DP rank) stream follows the same rules as ZMQSource's ranks (DESIGN.md §6):
// cursor, restart detection, gap repair through the topic's replay endpoint when Replay
// provides one (otherwise a gap clears the worker), and, when a replay endpoint is known, a
// replay from 0 when a stream is first seen, which stands in for "on connect" because a bound
// SUB cannot tell which publisher connected. The DP rank is the envelope's rank when present,
// else the route's.
//
// Goroutines: Run starts one reader, which owns the SUB and the replay DEALERs, and one
// consumer goroutine, which owns the streams and makes every Consumer call (so all calls for all
// workers come from one goroutine). State and Status are safe from any goroutine. Must not be
// copied; Run may be called once.
type ZMQCollector struct {
	cfg   CollectorConfig
	route CollectorRoute
	log   *zap.Logger
	m     *Metrics
	queue chan zmqItem
	reqs  chan zmqCollectorReq
	state stateCell
	// syncs carries Sync's barriers to the consumer goroutine; started and done bracket it.
	syncs   chan chan struct{}
	started atomic.Bool
	done    chan struct{}

	unrouted  atomic.Uint64
	malformed atomic.Uint64
	dropped   atomic.Uint64
	bound     atomic.Value // string: the endpoint actually bound

	lastMalformedLog time.Time // reader goroutine only

	// mu guards streams (written by the consumer goroutine, read by Status).
	mu      sync.Mutex
	streams map[zmqCollectorKey]*zmqCollectorStream
}

type zmqCollectorKey struct {
	topic string
	rank  int
}

type zmqCollectorStream struct {
	*streamRules[[]byte]
	topic string
}

// zmqCollectorReq asks the reader for a replay for one stream.
type zmqCollectorReq struct {
	key        zmqCollectorKey
	endpoint   string
	start, gen uint64
}

// NewZMQCollector validates cfg; it opens no sockets and starts no goroutines.
func NewZMQCollector(cfg CollectorConfig, route CollectorRoute, log *zap.Logger, m *Metrics) (*ZMQCollector, error) {
	if cfg.Listen == "" {
		return nil, errors.New("kvbridge: new zmq collector: empty listen endpoint")
	}
	if route == nil {
		return nil, errors.New("kvbridge: new zmq collector: nil route")
	}
	cfg.ZMQOptions.setDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	return &ZMQCollector{cfg: cfg, route: route, log: log, m: m,
		queue: make(chan zmqItem, cfg.QueueSize), reqs: make(chan zmqCollectorReq, 64),
		syncs: make(chan chan struct{}), done: make(chan struct{}),
		streams: map[zmqCollectorKey]*zmqCollectorStream{}}, nil
}

// State is StreamUp while the SUB is bound, StreamDown while it is backing off after a
// failure, StreamStopped after Run.
func (c *ZMQCollector) State() StreamState { return c.state.load() }

// Endpoint returns the endpoint the SUB is bound to (useful with a wildcard port), or "" before
// the bind.
func (c *ZMQCollector) Endpoint() string {
	s, _ := c.bound.Load().(string)
	return s
}

// CollectorStreamStatus is one (topic, rank) stream of a collector.
type CollectorStreamStatus struct {
	Topic string `json:"topic"`
	RankStatus
}

// CollectorStatus is a snapshot of a collector.
type CollectorStatus struct {
	State   string                  `json:"state"`
	Streams []CollectorStreamStatus `json:"streams"`
	// Unrouted counts messages whose topic the route did not know; Malformed messages whose
	// frames could not be parsed; Dropped live batches lost to a full queue.
	Unrouted  uint64 `json:"unrouted"`
	Malformed uint64 `json:"malformed"`
	Dropped   uint64 `json:"dropped"`
}

// Status returns every stream's cursor and counters, sorted by topic and rank.
func (c *ZMQCollector) Status() CollectorStatus {
	st := CollectorStatus{State: c.State().String(), Unrouted: c.unrouted.Load(),
		Malformed: c.malformed.Load(), Dropped: c.dropped.Load()}
	c.mu.Lock()
	for _, s := range c.streams {
		st.Streams = append(st.Streams, CollectorStreamStatus{Topic: s.topic, RankStatus: s.status()})
	}
	c.mu.Unlock()
	sort.Slice(st.Streams, func(i, j int) bool {
		a, b := st.Streams[i], st.Streams[j]
		return a.Topic < b.Topic || (a.Topic == b.Topic && a.Rank < b.Rank)
	})
	return st
}

// Sync returns once every Consumer call that started before it has returned: Consumer calls
// run on the collector's consumer goroutine, and Sync waits for that goroutine to reach it.
// The owner of a route uses it before reusing what a removed route delivered into (the
// router's worker IDs), instead of holding a lock across the calls. It returns at once when
// Run is not running, and ctx's error when ctx ends first.
func (c *ZMQCollector) Sync(ctx context.Context) error {
	if !c.started.Load() {
		return nil
	}
	ack := make(chan struct{})
	select {
	case c.syncs <- ack:
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run binds and collects until ctx is done, then closes its sockets and returns nil.
func (c *ZMQCollector) Run(ctx context.Context) error {
	c.started.Store(true)
	defer close(c.done)
	c.state.store(StreamConnecting)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.readLoop(ctx)
	}()
	c.consume(ctx)
	wg.Wait()
	c.state.store(StreamStopped)
	return nil
}

func (c *ZMQCollector) consume(ctx context.Context) {
	tick := time.NewTicker(zmqTickInterval)
	defer tick.Stop()
	scratch := &indexer.Batch{}
	var ticking []*zmqCollectorStream
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ack := <-c.syncs:
			close(ack)
		case it := <-c.queue:
			key := zmqCollectorKey{it.topic, int(it.rank)}
			c.mu.Lock()
			s := c.streams[key]
			c.mu.Unlock()
			if s == nil {
				if it.kind != zmqItemLive {
					continue // a replay reply for a stream that does not exist (cannot happen)
				}
				cons, rank, ok := c.route(it.topic)
				if !ok {
					c.unrouted.Add(1)
					if now := c.cfg.Now(); lastLog.IsZero() || now.Sub(lastLog) >= malformedLogInterval {
						lastLog = now
						c.log.Warn("kvbridge: collector: dropping batch of unknown topic", zap.String("topic", it.topic))
					}
					continue
				}
				s = c.newStream(key, cons, rank, scratch)
			}
			switch it.kind {
			case zmqItemLive:
				s.live(it.seq, it.payload)
			case zmqItemReplay:
				s.replayMsg(it.gen, it.seq, it.payload, it.end)
			}
		case <-tick.C:
			// Tick outside the lock: a timed-out replay calls Consumer.Reset.
			c.mu.Lock()
			ticking = ticking[:0]
			for _, s := range c.streams {
				ticking = append(ticking, s)
			}
			c.mu.Unlock()
			now := c.cfg.Now()
			for _, s := range ticking {
				s.tick(now)
			}
		}
	}
}

// newStream creates the stream of key. With a replay endpoint it starts with a replay from 0
// (the stand-in for "on connect"), holding the batch that revealed the stream.
func (c *ZMQCollector) newStream(key zmqCollectorKey, cons Consumer, routeRank int, scratch *indexer.Batch) *zmqCollectorStream {
	rank := key.rank
	if rank < 0 {
		rank = routeRank
	}
	st := &streamRules[[]byte]{worker: key.topic, rank: rank, t: rankTransport(cons, rank), m: c.m, log: c.log, now: c.cfg.Now,
		replayTimeout: c.cfg.ReplayTimeout, resyncInterval: c.cfg.ResyncInterval, maxHeld: c.cfg.MaxHeld, scratch: scratch}
	if c.cfg.Replay != nil {
		if ep := c.cfg.Replay(key.topic); ep != "" {
			if rep, err := rankEndpoint(connectEndpoint(ep), rank); err == nil {
				st.t.request = func(start, gen uint64) {
					select {
					case c.reqs <- zmqCollectorReq{key: key, endpoint: rep, start: start, gen: gen}:
					default: // the reader is swamped; the replay timeout recovers
					}
				}
			} else {
				c.log.Warn("kvbridge: collector: bad replay endpoint", zap.String("topic", key.topic), zap.Error(err))
			}
		}
	}
	s := &zmqCollectorStream{streamRules: st, topic: key.topic}
	c.mu.Lock()
	c.streams[key] = s
	c.mu.Unlock()
	st.connected()
	return s
}

// readLoop binds the SUB and reads, rebinding with jittered backoff after a failure.
func (c *ZMQCollector) readLoop(ctx context.Context) {
	bo := newBackoff(DefaultMinBackoff, DefaultMaxBackoff, c.cfg.Rand)
	for ctx.Err() == nil {
		err := c.readSession(ctx)
		if ctx.Err() != nil {
			return
		}
		c.state.store(StreamDown)
		c.m.setStreamUp(c.cfg.Listen, false)
		wait := bo.next()
		c.log.Warn("kvbridge: collector failed; rebinding", zap.String("listen", c.cfg.Listen), zap.Error(err),
			zap.Duration("backoff", wait))
		if !sleep(ctx, wait) {
			return
		}
	}
}

type zmqCollectorDealer struct {
	sock *zmq.Socket
	gen  uint64
}

func (c *ZMQCollector) readSession(ctx context.Context) error {
	sub, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		return err
	}
	defer sub.Close()
	dealers := map[zmqCollectorKey]*zmqCollectorDealer{}
	defer func() {
		for _, d := range dealers {
			d.sock.Close()
		}
	}()
	if err = sub.SetLinger(0); err != nil {
		return err
	}
	if err = sub.SetRcvhwm(c.cfg.RcvHWM); err != nil {
		return err
	}
	if err = sub.SetMaxmsgsize(c.cfg.MaxMsgSize); err != nil {
		return err
	}
	if err = sub.SetSubscribe(c.cfg.Topic); err != nil {
		return err
	}
	if err = sub.Bind(c.cfg.Listen); err != nil {
		return fmt.Errorf("kvbridge: collector bind %s: %w", c.cfg.Listen, err)
	}
	if ep, err := sub.GetLastEndpoint(); err == nil {
		c.bound.Store(ep)
	}
	c.state.store(StreamUp)
	c.m.setStreamUp(c.cfg.Listen, true)
	for ctx.Err() == nil {
		for drained := false; !drained; {
			select {
			case req := <-c.reqs:
				if err := c.sendReplay(dealers, req); err != nil {
					c.m.countReplay(req.key.topic, ReplayError)
					c.log.Warn("kvbridge: collector: replay request failed", zap.String("topic", req.key.topic), zap.Error(err))
				}
			default:
				drained = true
			}
		}
		poller := zmq.NewPoller()
		poller.Add(sub, zmq.POLLIN)
		for _, d := range dealers {
			poller.Add(d.sock, zmq.POLLIN)
		}
		polled, err := poller.Poll(zmqPollInterval)
		if err != nil {
			return fmt.Errorf("kvbridge: collector poll: %w", err)
		}
		for _, p := range polled {
			if p.Socket == sub {
				if err := c.readLive(sub); err != nil {
					return err
				}
				continue
			}
			for key, d := range dealers {
				if d.sock == p.Socket {
					if err := c.readReplay(ctx, dealers, key, d); err != nil {
						return err
					}
					break
				}
			}
		}
	}
	return nil
}

func (c *ZMQCollector) readLive(sub *zmq.Socket) error {
	for {
		frames, err := sub.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) {
				return nil
			}
			return fmt.Errorf("kvbridge: collector receive: %w", err)
		}
		m, err := ParseLive(frames)
		if err != nil {
			c.countMalformed(err)
			continue
		}
		rank := -1 // the route decides
		if r, ok, err := peekRank(m.Payload); err != nil {
			c.countMalformed(err)
			continue
		} else if ok {
			rank = int(r)
		}
		it := zmqItem{kind: zmqItemLive, topic: string(m.Topic), rank: int32(rank), seq: m.Seq, payload: m.Payload}
		select {
		case c.queue <- it:
		default:
			c.dropped.Add(1)
			c.m.countBatch(it.topic, OutcomeDropped)
		}
	}
}

// countMalformed counts a malformed message and logs at most once per interval (reader
// goroutine only, which owns lastMalformedLog).
func (c *ZMQCollector) countMalformed(err error) {
	n := c.malformed.Add(1)
	c.m.countBatch(c.cfg.Listen, OutcomeMalformed)
	now := c.cfg.Now()
	if !c.lastMalformedLog.IsZero() && now.Sub(c.lastMalformedLog) < malformedLogInterval {
		return
	}
	c.lastMalformedLog = now
	c.log.Warn("kvbridge: collector: skipping malformed message", zap.Error(err), zap.Uint64("malformed_total", n))
}

func (c *ZMQCollector) sendReplay(dealers map[zmqCollectorKey]*zmqCollectorDealer, req zmqCollectorReq) error {
	if d := dealers[req.key]; d != nil {
		d.sock.Close()
		delete(dealers, req.key)
	}
	d, err := dialReplay(req.endpoint, c.cfg.MaxMsgSize, req.start)
	if err != nil {
		return err
	}
	dealers[req.key] = &zmqCollectorDealer{sock: d, gen: req.gen}
	return nil
}

func (c *ZMQCollector) readReplay(ctx context.Context, dealers map[zmqCollectorKey]*zmqCollectorDealer, key zmqCollectorKey, d *zmqCollectorDealer) error {
	for {
		frames, err := d.sock.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) {
				return nil
			}
			return fmt.Errorf("kvbridge: collector replay: %w", err)
		}
		m, err := ParseReplayReply(frames)
		if err != nil {
			c.countMalformed(err)
			continue
		}
		it := zmqItem{kind: zmqItemReplay, topic: key.topic, rank: int32(key.rank), seq: m.Seq, payload: m.Payload, gen: d.gen, end: m.End}
		select {
		case c.queue <- it:
		case <-ctx.Done():
			return nil
		}
		if m.End {
			d.sock.Close()
			delete(dealers, key)
			return nil
		}
	}
}
