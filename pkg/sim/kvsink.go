package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// MultiSink publishes every step to each of its sinks in order; it returns the errors joined.
type MultiSink []EventSink

// PublishStep forwards to every sink.
func (m MultiSink) PublishStep(rank int, ts time.Time, ev *StepEvents) error {
	var errs []error
	for _, s := range m {
		if err := s.PublishStep(rank, ts, ev); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// BatchConsumer is what ConsumerSink feeds; kvbridge.BridgeServer (the gRPC SubscribeKvEvents
// history, numbered from 1 with dp_rank set) and any kvbridge.Consumer implement it. Batch
// must copy what it keeps.
type BatchConsumer interface {
	Batch(rank int, b *indexer.Batch) bool
}

// ConsumerSink turns each step into one indexer.Batch for a BatchConsumer.
type ConsumerSink struct{ C BatchConsumer }

// PublishStep hands the step to the consumer as one batch of rank.
func (s ConsumerSink) PublishStep(rank int, ts time.Time, ev *StepEvents) error {
	b := indexer.Batch{Timestamp: epochSeconds(ts), DPRank: int32(rank), HasDPRank: true, Events: ev.Events}
	s.C.Batch(rank, &b)
	return nil
}

func epochSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// ZMQSinkConfig configures a ZMQSink: the publisher settings of rank 0 (ranks offset the
// endpoints, as vLLM does) and the fault switches.
type ZMQSinkConfig struct {
	Publisher kvbridge.PublisherConfig
	// Ranks is the number of DP ranks (one publisher each); default 1.
	Ranks int
	// Delay holds every batch back for this long after its step before sending (a slow event
	// path; the engine itself is not slowed down unless the queue fills).
	Delay time.Duration
	// DropEvery > 0 does not send every Nth batch on the PUB (it stays in the replay
	// history, so replay can repair the gap).
	DropEvery int
	// RestartAfter > 0 restarts each rank's publisher once after that many batches: the
	// sequence counter goes back to its start and the replay history is emptied, as when an
	// engine's publisher restarts. The engine's cache is kept.
	RestartAfter int
	// QueueLen bounds the batches waiting to be sent per rank (default 4096); a full queue
	// blocks the engine step, like vLLM's bounded event queue.
	QueueLen int
}

// ZMQSink publishes each engine step as one vLLM-style ZMQ batch through a kvbridge.Publisher
// per rank (PUB plus optional ROUTER replay). Int or bytes hashes follow
// Publisher.Encode.BytesHashes; bytes mode sends the engine's real SHA-256 digests.
//
// PublishStep copies the step and queues it; Run sends the queues (one producer goroutine per
// rank, as the PUB sockets require) and serves replay. It must not be copied.
type ZMQSink struct {
	cfg    ZMQSinkConfig
	pubs   []*kvbridge.Publisher
	queues []chan *queuedBatch
	// digests[rank] maps folded hashes to digests, and extras[rank] to the extra keys of the
	// blocks holding media, for the batch being encoded; only the rank's producer goroutine
	// touches them (EncodeOptions.Digest and ExtraKeys run inside Publish).
	digests []map[uint64]BlockHash
	extras  []map[uint64][]kvbridge.ExtraKey
	pool    sync.Pool
	// stop is closed when Run returns, so that PublishStep never blocks on a dead producer.
	stop     chan struct{}
	stopOnce sync.Once
}

type queuedBatch struct {
	due     time.Time
	b       indexer.Batch
	hashes  []uint64
	tokens  []uint32
	digests []BlockHash // parallel to the folded hashes (bytes mode only)
	keys    []uint64
	extra   []uint64 // the events' per-block extra-key hashes
	// mmHashes[i] is a stored block holding media and mmKeys[i] its extra keys.
	mmHashes []uint64
	mmKeys   [][]kvbridge.ExtraKey
}

// NewZMQSink opens one publisher per rank. It starts no goroutines; call Run.
func NewZMQSink(cfg ZMQSinkConfig) (*ZMQSink, error) {
	if cfg.Ranks <= 0 {
		cfg.Ranks = 1
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 4096
	}
	s := &ZMQSink{cfg: cfg, pool: sync.Pool{New: func() any { return new(queuedBatch) }}, stop: make(chan struct{})}
	for rank := range cfg.Ranks {
		pc := cfg.Publisher
		pc.Rank = rank
		digests, extras := map[uint64]BlockHash{}, map[uint64][]kvbridge.ExtraKey{}
		s.digests, s.extras = append(s.digests, digests), append(s.extras, extras)
		pc.Encode.ExtraKeys = func(h uint64) []kvbridge.ExtraKey { return extras[h] }
		if pc.Encode.BytesHashes {
			pc.Encode.Digest = func(h uint64) [32]byte {
				if d, ok := digests[h]; ok {
					return d
				}
				return kvbridge.DeriveDigest(h)
			}
		}
		p, err := kvbridge.NewPublisher(pc)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sim: kv events rank %d: %w", rank, err)
		}
		if cfg.DropEvery > 0 {
			p.SetFaults(kvbridge.PublisherFaults{DropEvery: cfg.DropEvery})
		}
		s.pubs = append(s.pubs, p)
		s.queues = append(s.queues, make(chan *queuedBatch, cfg.QueueLen))
	}
	return s, nil
}

// Endpoints returns each rank's PUB and replay endpoints as bound or connected.
func (s *ZMQSink) Endpoints() (pub, replay []string) {
	for _, p := range s.pubs {
		a, b := p.Endpoints()
		pub, replay = append(pub, a), append(replay, b)
	}
	return pub, replay
}

// NextSeq returns the sequence number rank's publisher will use next.
func (s *ZMQSink) NextSeq(rank int) uint64 { return s.pubs[rank].NextSeq() }

// PublishStep copies ev and queues it for rank's publisher. It blocks while the queue is full.
func (s *ZMQSink) PublishStep(rank int, ts time.Time, ev *StepEvents) error {
	if rank < 0 || rank >= len(s.queues) {
		return fmt.Errorf("sim: publish: rank %d of %d: %w", rank, len(s.queues), ErrBadConfig)
	}
	q := s.pool.Get().(*queuedBatch)
	q.due = ts.Add(s.cfg.Delay)
	q.b = indexer.Batch{Timestamp: epochSeconds(ts), DPRank: int32(rank), HasDPRank: true, Events: q.b.Events[:0]}
	q.hashes, q.tokens, q.digests, q.keys, q.extra = q.hashes[:0], q.tokens[:0], q.digests[:0], q.keys[:0], q.extra[:0]
	q.mmHashes, q.mmKeys = q.mmHashes[:0], q.mmKeys[:0]
	bytesMode := s.cfg.Publisher.Encode.BytesHashes
	for i := range ev.Events {
		e := ev.Events[i]
		q.hashes = append(q.hashes, e.Hashes...)
		q.tokens = append(q.tokens, e.Tokens...)
		q.extra = append(q.extra, e.Extra...)
		if i < len(ev.Media) && ev.Media[i] != nil {
			q.addMedia(&e, ev.Media[i], ev.Bases[i])
		}
		if bytesMode {
			q.keys = append(q.keys, e.Hashes...)
			q.digests = append(q.digests, ev.Digests[i]...)
			if e.HasParent {
				q.keys = append(q.keys, e.Parent)
				q.digests = append(q.digests, ev.Parents[i])
			}
		}
		q.b.Events = append(q.b.Events, e)
	}
	// Point the copies into the arenas only now: the arenas may have moved while growing.
	h, t, x := 0, 0, 0
	for i := range q.b.Events {
		e := &q.b.Events[i]
		nh, nt, nx := len(e.Hashes), len(e.Tokens), len(e.Extra)
		e.Hashes, e.Tokens = q.hashes[h:h+nh:h+nh], q.tokens[t:t+nt:t+nt]
		if nx > 0 {
			e.Extra = q.extra[x : x+nx : x+nx]
		}
		h, t, x = h+nh, t+nt, x+nx
	}
	select {
	case s.queues[rank] <- q:
		return nil
	case <-s.stop:
		return ErrStopped
	}
}

// addMedia records the extra keys of stored event e's blocks that hold media (the items of
// media, its request's, overlapping each block; base is the request's token index of e's
// first block), with each item's offset from the block's first token, as vLLM's block hash
// takes them.
func (q *queuedBatch) addMedia(e *indexer.Event, media []indexer.ExtraSpan, base int) {
	bs := e.BlockSize
	for j, h := range e.Hashes {
		start := base + j*bs
		in := indexer.SpansIn(media, start, start+bs)
		if len(in) == 0 {
			continue
		}
		keys := make([]kvbridge.ExtraKey, len(in))
		for k, sp := range in {
			keys[k] = kvbridge.ExtraKey{ID: sp.Key, Offset: sp.Start - start}
		}
		q.mmHashes, q.mmKeys = append(q.mmHashes, h), append(q.mmKeys, keys)
	}
}

// Run sends queued batches and serves replay until ctx is done. Batches still queued at
// cancellation are dropped (as a dying engine's would be).
func (s *ZMQSink) Run(ctx context.Context) error {
	defer s.stopOnce.Do(func() { close(s.stop) })
	var wg sync.WaitGroup
	errs := make([]error, 2*len(s.pubs))
	for rank, p := range s.pubs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs[2*rank] = p.Run(ctx)
		}()
		go func() {
			defer wg.Done()
			s.produce(ctx, rank)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *ZMQSink) produce(ctx context.Context, rank int) {
	p, q, digests := s.pubs[rank], s.queues[rank], s.digests[rank]
	sent := 0
	for {
		var qb *queuedBatch
		select {
		case <-ctx.Done():
			return
		case qb = <-q:
		}
		if wait := time.Until(qb.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if s.cfg.RestartAfter > 0 && sent == s.cfg.RestartAfter {
			p.Restart()
		}
		clear(digests)
		for i, k := range qb.keys {
			digests[k] = qb.digests[i]
		}
		extras := s.extras[rank]
		clear(extras)
		for i, h := range qb.mmHashes {
			extras[h] = qb.mmKeys[i]
		}
		// Send errors are a lost batch, as on a real engine.
		_, _ = p.Publish(&qb.b)
		sent++
		s.pool.Put(qb)
	}
}

// Close closes the publishers; call it after Run returned.
func (s *ZMQSink) Close() error {
	var errs []error
	for _, p := range s.pubs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

var (
	_ EventSink = MultiSink(nil)
	_ EventSink = ConsumerSink{}
	_ EventSink = (*ZMQSink)(nil)
)
