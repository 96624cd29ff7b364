package kvbridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/indexer"
)

// PubMode says whether a Publisher's PUB binds or connects.
type PubMode string

const (
	// PubAuto binds when the endpoint contains "*" or "::" or is ipc:// or inproc://, and
	// connects otherwise, as vLLM and SGLang do (wire/vllm-zmq.md §1). The zero value.
	PubAuto PubMode = ""
	// PubBind always binds.
	PubBind PubMode = "bind"
	// PubConnect always connects (to a collector's bound SUB, like llm-d's simulator).
	PubConnect PubMode = "connect"
)

// Publisher defaults, those of vLLM's KVEventsConfig (wire/vllm-zmq.md §9.1).
const (
	DefaultPublisherHistory = 10000
	DefaultPublisherHWM     = 100000
	// publisherPollInterval bounds how long Run waits between replay polls, so it notices
	// cancellation promptly (vLLM serves its ROUTER at least every ~100 ms).
	publisherPollInterval = 50 * time.Millisecond
)

// PublisherConfig configures a Publisher. It is one DP rank's publisher: for DP size D, create
// D Publishers with Rank 0..D-1 and the same base endpoints.
type PublisherConfig struct {
	// Endpoint is rank 0's PUB endpoint, e.g. "tcp://*:5557"; Rank is added to tcp ports.
	Endpoint string
	// Mode selects bind or connect for the PUB; the zero value follows vLLM's rule.
	Mode PubMode
	// Replay is rank 0's ROUTER replay endpoint (always bound); "" disables replay.
	Replay string
	// Topic is frame 0 of every message (vLLM default: "").
	Topic string
	// Rank is this publisher's DP rank: it offsets the endpoints (rankEndpoint) and fills the
	// envelope's rank for batches that have none (as vLLM does).
	Rank int
	// History is the number of batches kept for replay (vLLM buffer_steps); 0 means 10000.
	History int
	// StartSeq is the first sequence number: 0 for vLLM and SGLang, 1 for llm-d's simulator.
	StartSeq uint64
	// HWM is the PUB send high-water mark; 0 means 100000 (vLLM's default).
	HWM int
	// Encode selects the payload format.
	Encode EncodeOptions
	// ReplayTopicFrame selects the replay reply layout: true sends ["", topic, seq, payload]
	// (vLLM with PR #45177, llm-d's simulator), false ["", seq, payload] (older vLLM, SGLang).
	ReplayTopicFrame bool
	// Logger receives warnings (unanswerable replay requests); nil means no logging.
	Logger *zap.Logger
}

// PublisherFaults are the fault hooks a simulator uses to exercise consumers. The zero value
// injects nothing. Faults may be changed at any time with SetFaults.
type PublisherFaults struct {
	// DropEvery > 0 does not send every DropEvery-th batch on the PUB (counting from the first
	// Publish); its sequence number is still consumed, as for a batch lost in transit, and it
	// stays in the replay history unless DropFromHistory is set.
	DropEvery int
	// DropFromHistory also leaves dropped batches out of the replay history: a permanent hole,
	// as when vLLM fails to encode a batch, so a consumer's replay cannot repair the gap.
	DropFromHistory bool
	// PublishDelay is waited before each batch is sent (a slow engine step).
	PublishDelay time.Duration
	// ReplayDelay is waited before a replay request is answered (a slow or stuck ROUTER).
	ReplayDelay time.Duration
}

// Publisher publishes KV-event batches exactly like a vLLM (or SGLang) engine: a PUB sending
// [topic, seq, payload], and optionally a ROUTER answering replay requests from a bounded
// history (wire/vllm-zmq.md §1–§8).
//
// Threading: Publish and Restart must be called from one producer goroutine (the PUB socket is
// not goroutine-safe); Run serves the ROUTER on the goroutine that calls it; SetFaults, Seq and
// Endpoints may be called from anywhere. Close must be called once, after Publish is no longer
// called and Run has returned. A Publisher must not be copied.
type Publisher struct {
	cfg       PublisherConfig
	pubEP     string
	replayEP  string
	log       *zap.Logger
	pub       *zmq.Socket // producer goroutine only; nil while the link is down
	bind      bool        // the PUB binds (else connects)
	router    *zmq.Socket // Run's goroutine only; nil without replay
	faults    atomic.Pointer[PublisherFaults]
	published atomic.Uint64 // batches passed to Publish (for DropEvery)
	seqFrame  [8]byte       // producer goroutine only
	encBuf    []byte        // producer goroutine only

	// mu guards the replay history and the sequence counter.
	mu      sync.Mutex
	nextSeq uint64
	history []pubEntry // ring of up to cfg.History entries, oldest at head
	head    int
}

type pubEntry struct {
	seq     uint64
	payload []byte // immutable once stored
}

// NewPublisher validates cfg and opens (binds or connects) the sockets. It starts no
// goroutines: replay is served by Run.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("kvbridge: new publisher: empty endpoint")
	}
	if cfg.History <= 0 {
		cfg.History = DefaultPublisherHistory
	}
	if cfg.HWM <= 0 {
		cfg.HWM = DefaultPublisherHWM
	}
	switch cfg.Mode {
	case PubAuto, PubBind, PubConnect:
	default:
		return nil, fmt.Errorf("kvbridge: new publisher: unknown mode %q", cfg.Mode)
	}
	p := &Publisher{cfg: cfg, log: cfg.Logger, nextSeq: cfg.StartSeq}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	p.faults.Store(&PublisherFaults{})
	var err error
	if p.pubEP, err = rankEndpoint(cfg.Endpoint, cfg.Rank); err != nil {
		return nil, err
	}
	if p.replayEP, err = rankEndpoint(cfg.Replay, cfg.Rank); err != nil {
		return nil, err
	}
	bind := cfg.Mode == PubBind || (cfg.Mode == PubAuto && pubShouldBind(p.pubEP))
	if err = p.openPUB(bind); err != nil {
		return nil, err
	}
	if bind {
		// Report the real address (a ":0" or wildcard port is resolved by the OS), which is also
		// the one SetLinkDown binds again.
		if ep, err := p.pub.GetLastEndpoint(); err == nil && ep != "" {
			p.pubEP = ep
		}
	}
	p.bind = bind
	if p.replayEP != "" {
		if p.router, err = zmq.NewSocket(zmq.ROUTER); err == nil {
			if err = p.router.SetLinger(0); err == nil {
				err = p.router.Bind(p.replayEP)
			}
		}
		if err != nil {
			if p.router != nil {
				p.router.Close()
			}
			_ = p.pub.Close()
			return nil, fmt.Errorf("kvbridge: new publisher replay %s: %w", p.replayEP, err)
		}
		if ep, err := p.router.GetLastEndpoint(); err == nil && ep != "" {
			p.replayEP = ep
		}
	}
	return p, nil
}

// openPUB opens the PUB socket on p.pubEP.
func (p *Publisher) openPUB(bind bool) error {
	s, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		return fmt.Errorf("kvbridge: new publisher: %w", err)
	}
	if err = s.SetLinger(0); err == nil {
		err = s.SetSndhwm(p.cfg.HWM)
	}
	if err == nil {
		if bind {
			err = s.Bind(p.pubEP)
		} else {
			err = s.Connect(p.pubEP)
		}
	}
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("kvbridge: new publisher %s: %w", p.pubEP, err)
	}
	p.pub = s
	return nil
}

// SetLinkDown takes the PUB socket away (down) or opens it again on the same endpoint,
// keeping the sequence counter and the replay history: what an engine's subscribers see when
// the network between them goes away and comes back. They lose the connection and the
// batches published meanwhile (still numbered and kept for replay), then reconnect and repair
// the gap. Opening again can fail for a moment after closing (libzmq releases a bound port on
// its I/O thread): the link stays down and the caller may try again. Producer goroutine only.
func (p *Publisher) SetLinkDown(down bool) error {
	switch {
	case down && p.pub != nil:
		err := p.pub.Close()
		p.pub = nil
		if err != nil {
			return fmt.Errorf("kvbridge: publisher link down: %w", err)
		}
	case !down && p.pub == nil:
		return p.openPUB(p.bind)
	}
	return nil
}

// Endpoints returns the PUB and ROUTER endpoints actually in use (after the rank offset and,
// for bound sockets, as reported by libzmq). replay is "" without replay.
func (p *Publisher) Endpoints() (pub, replay string) { return p.pubEP, p.replayEP }

// SetFaults replaces the fault hooks; safe from any goroutine.
func (p *Publisher) SetFaults(f PublisherFaults) { p.faults.Store(&f) }

// NextSeq returns the sequence number the next Publish will use.
func (p *Publisher) NextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextSeq
}

// Publish encodes b with the configured options and sends it as [topic, seq, payload],
// returning the sequence number it used. b.Seq is ignored; a batch without a rank gets the
// publisher's Rank. The sequence number is taken before sending, so a failed send (or an
// injected drop) leaves a hole, as in vLLM. b is not retained.
func (p *Publisher) Publish(b *indexer.Batch) (uint64, error) {
	f := p.faults.Load()
	if f.PublishDelay > 0 {
		t := time.NewTimer(f.PublishDelay)
		<-t.C
	}
	eb := *b
	if !eb.HasDPRank {
		eb.DPRank, eb.HasDPRank = int32(p.cfg.Rank), true
	}
	p.encBuf = EncodeBatch(p.encBuf[:0], &eb, p.cfg.Encode)
	payload := append([]byte(nil), p.encBuf...)
	n := p.published.Add(1)
	drop := f.DropEvery > 0 && n%uint64(f.DropEvery) == 0

	p.mu.Lock()
	seq := p.nextSeq
	p.nextSeq++
	if !drop || !f.DropFromHistory {
		p.storeLocked(seq, payload)
	}
	p.mu.Unlock()

	if drop {
		return seq, nil
	}
	return seq, p.send(seq, payload)
}

// PublishPayload publishes a batch encoded beforehand (EncodeBatch, with the envelope's rank
// set): it takes the next sequence number and keeps payload for replay like Publish, and sends
// it unless hold is set. A held batch is what an engine publishes while its subscribers are
// cut off: lost in transit, but in the replay history. It lets a load generator publish at a
// high rate without encoding on the way (fault hooks other than hold do not apply). payload is
// retained and must not be modified. Producer goroutine only.
func (p *Publisher) PublishPayload(payload []byte, hold bool) (uint64, error) {
	p.mu.Lock()
	seq := p.nextSeq
	p.nextSeq++
	p.storeLocked(seq, payload)
	p.mu.Unlock()
	if hold {
		return seq, nil
	}
	return seq, p.send(seq, payload)
}

// send sends [topic, seq, payload] on the PUB. Producer goroutine only.
func (p *Publisher) send(seq uint64, payload []byte) error {
	if p.pub == nil {
		return nil // the link is down (SetLinkDown): lost in transit
	}
	AppendSeq(p.seqFrame[:0], seq)
	if _, err := p.pub.SendBytes([]byte(p.cfg.Topic), zmq.SNDMORE); err != nil {
		return fmt.Errorf("kvbridge: publish seq %d: %w", seq, err)
	}
	if _, err := p.pub.SendBytes(p.seqFrame[:], zmq.SNDMORE); err != nil {
		return fmt.Errorf("kvbridge: publish seq %d: %w", seq, err)
	}
	if _, err := p.pub.SendBytes(payload, 0); err != nil {
		return fmt.Errorf("kvbridge: publish seq %d: %w", seq, err)
	}
	return nil
}

// SendRaw sends an arbitrary multipart message on the PUB without touching the sequence
// counter or the history: a fault hook for malformed frames. Producer goroutine only.
func (p *Publisher) SendRaw(frames ...[]byte) error {
	if p.pub == nil {
		return nil // the link is down (SetLinkDown)
	}
	for i, f := range frames {
		flag := zmq.SNDMORE
		if i == len(frames)-1 {
			flag = 0
		}
		if _, err := p.pub.SendBytes(f, flag); err != nil {
			return fmt.Errorf("kvbridge: send raw: %w", err)
		}
	}
	return nil
}

// Restart simulates an engine restart: the sequence counter goes back to StartSeq and the
// replay history is emptied (a new publisher instance has an empty buffer). Producer goroutine
// only.
func (p *Publisher) Restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextSeq = p.cfg.StartSeq
	p.history, p.head = p.history[:0], 0
	p.published.Store(0)
}

func (p *Publisher) storeLocked(seq uint64, payload []byte) {
	e := pubEntry{seq: seq, payload: payload}
	if len(p.history) < p.cfg.History {
		p.history = append(p.history, e)
		return
	}
	p.history[p.head] = e
	p.head = (p.head + 1) % len(p.history)
}

// replayFromLocked returns the buffered entries with seq ≥ start, oldest first. Entries are
// shared (their payloads are immutable).
func (p *Publisher) replayFromLocked(start uint64) []pubEntry {
	var out []pubEntry
	n := len(p.history)
	for i := range n {
		e := p.history[(p.head+i)%n]
		if e.seq >= start {
			out = append(out, e)
		}
	}
	return out
}

// Run serves replay requests on the ROUTER until ctx is done, then returns nil. Without a
// replay endpoint it just waits for ctx. Requests must be exactly [identity, "", start_seq]
// (wire/vllm-zmq.md §8.1); others are logged and not answered.
func (p *Publisher) Run(ctx context.Context) error {
	if p.router == nil {
		<-ctx.Done()
		return nil
	}
	poller := zmq.NewPoller()
	poller.Add(p.router, zmq.POLLIN)
	for ctx.Err() == nil {
		polled, err := poller.Poll(publisherPollInterval)
		if err != nil { // EINTR is retried inside zmq4
			return fmt.Errorf("kvbridge: publisher replay poll: %w", err)
		}
		if len(polled) == 0 {
			continue
		}
		for {
			msg, err := p.router.RecvMessageBytes(zmq.DONTWAIT)
			if err != nil {
				break // EAGAIN: drained
			}
			p.serveReplay(ctx, msg)
		}
	}
	return nil
}

func (p *Publisher) serveReplay(ctx context.Context, msg [][]byte) {
	if len(msg) != 3 || len(msg[1]) != 0 {
		p.log.Warn("kvbridge: publisher: ignoring malformed replay request", zap.Int("frames", len(msg)))
		return
	}
	start, err := parseSeq(msg[2])
	if err != nil {
		p.log.Warn("kvbridge: publisher: ignoring malformed replay request", zap.Error(err))
		return
	}
	if d := p.faults.Load().ReplayDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	p.mu.Lock()
	entries := p.replayFromLocked(start)
	p.mu.Unlock()
	id := msg[0]
	topic := []byte(p.cfg.Topic)
	var seq [8]byte
	for _, e := range entries {
		AppendSeq(seq[:0], e.seq)
		if err := p.sendReply(id, topic, seq[:], e.payload); err != nil {
			p.log.Warn("kvbridge: publisher: replay send failed", zap.Error(err))
			return
		}
	}
	AppendSeq(seq[:0], ReplayEndSeq)
	if err := p.sendReply(id, []byte{}, seq[:], []byte{}); err != nil {
		p.log.Warn("kvbridge: publisher: replay terminator send failed", zap.Error(err))
	}
}

func (p *Publisher) sendReply(id, topic, seq, payload []byte) error {
	var err error
	if p.cfg.ReplayTopicFrame {
		_, err = p.router.SendMessage(id, []byte{}, topic, seq, payload)
	} else {
		_, err = p.router.SendMessage(id, []byte{}, seq, payload)
	}
	return err
}

// Close closes the sockets. Call it once, after the last Publish and after Run returned.
func (p *Publisher) Close() error {
	var err error
	if p.pub != nil {
		err = p.pub.Close()
	}
	if p.router != nil {
		err = errors.Join(err, p.router.Close())
	}
	if err != nil {
		return fmt.Errorf("kvbridge: close publisher: %w", err)
	}
	return nil
}
