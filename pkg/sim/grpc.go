package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/common"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/worker"
)

// GRPCConfig configures the simulator's SMG engine gRPC service (wire/smg-grpc.md).
type GRPCConfig struct {
	// Runtime selects the one service registered: vllm (VllmEngine, delta chunks), sglang
	// (SglangScheduler) or tokenspeed (TokenSpeedScheduler),
	// the latter two with cumulative completion_tokens.
	Runtime worker.Runtime
	// Model is the served model name; TokenizerPath is reported by GetModelInfo.
	Model, TokenizerPath string
	// Codec, when set, lets vLLM's text input be tokenized (SMG never sends it).
	Codec TextCodec
	// BOSTokenID is reported by GetModelInfo (0 = none).
	BOSTokenID int32
	// OnCompleted, when set, is called after every Generate call that ran to its end (used
	// by the exit fault switch).
	OnCompleted func()
	// Replies, when set, scripts every generation's output (see Replies).
	Replies *Replies
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Pairs, when set, gives Generate the prefill/decode role of that HTTP server over the
	// same ranks (ServerConfig.PD; grpc_pd.go), sharing its leases, bootstrap rooms and side
	// channel, as one engine serves both surfaces. nil, or a server without a role: an
	// aggregated engine, which ignores transfer fields.
	Pairs *Server
}

// kvSubscriber is the SubscribeKvEvents handler shared by the three services.
type kvSubscriber interface {
	SubscribeKvEvents(*common.SubscribeKvEventsRequest, grpc.ServerStreamingServer[common.KvEventBatch]) error
}

// captureRegistrar records the implementation a Register call hands to a registrar.
type captureRegistrar struct{ impl any }

func (c *captureRegistrar) RegisterService(_ *grpc.ServiceDesc, impl any) { c.impl = impl }

// GRPCServer serves Generate, HealthCheck, GetModelInfo, GetServerInfo, GetLoads, Abort
// (and FlushCache for SGLang/TokenSpeed) over the engine ranks, and SubscribeKvEvents from a
// kvbridge.BridgeServer fed with the engines' batches (numbered from 1, dp_rank set, resumable
// from its history), or UNIMPLEMENTED when there is none. Stop strings are not evaluated (the
// gateway matches them); stop_token_ids, min_tokens and ignore_eos are. Safe for concurrent use.
type GRPCServer struct {
	cfg   GRPCConfig
	ranks Ranks
	kv    kvSubscriber // nil: UNIMPLEMENTED
	pd    *pdState     // GRPCConfig.Pairs' pair state; nil: an aggregated engine
	log   *zap.Logger
	start time.Time

	// mu guards inflight: request id → the engine requests of one Generate call, for Abort.
	mu       sync.Mutex
	inflight map[string]*inflightGen
}

type inflightGen struct {
	eng  *Engine
	reqs []*Request
}

// NewGRPCServer returns a server for cfg.Runtime over ranks. kv, when not nil, serves
// SubscribeKvEvents (feed it with ConsumerSink{C: kv}); nil answers UNIMPLEMENTED, like an
// engine without KV events.
func NewGRPCServer(cfg GRPCConfig, ranks Ranks, kv *kvbridge.BridgeServer) (*GRPCServer, error) {
	if !cfg.Runtime.Known() {
		return nil, fmt.Errorf("sim: grpc: runtime %q: %w", cfg.Runtime, ErrBadConfig)
	}
	if cfg.Model == "" || len(ranks) == 0 {
		return nil, fmt.Errorf("sim: grpc: model %q with %d ranks: %w", cfg.Model, len(ranks), ErrBadConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	s := &GRPCServer{cfg: cfg, ranks: ranks, log: cfg.Logger, start: time.Now(), inflight: map[string]*inflightGen{}}
	if cfg.Pairs != nil {
		s.pd = cfg.Pairs.pd
	}
	if kv != nil {
		var c captureRegistrar
		kv.Register(&c)
		sub, ok := c.impl.(kvSubscriber)
		if !ok {
			return nil, fmt.Errorf("sim: grpc: bridge service %T lacks SubscribeKvEvents: %w", c.impl, ErrBadConfig)
		}
		s.kv = sub
	}
	return s, nil
}

// Register registers the configured runtime's service on r.
func (s *GRPCServer) Register(r grpc.ServiceRegistrar) {
	switch s.cfg.Runtime {
	case worker.RuntimeVLLM:
		registerVLLM(r, s)
	case worker.RuntimeSGLang:
		registerSGLang(r, s)
	case worker.RuntimeTokenSpeed:
		registerTokenSpeed(r, s)
	}
}

func (s *GRPCServer) subscribeKvEvents(req *common.SubscribeKvEventsRequest, stream grpc.ServerStreamingServer[common.KvEventBatch]) error {
	if s.kv == nil {
		return status.Error(codes.Unimplemented, "sim: KV events are disabled (--no-grpc-kv-events)")
	}
	return s.kv.SubscribeKvEvents(req, stream)
}

// genReq is the engine-neutral form of a Generate request.
type genReq struct {
	id        string
	ids       []uint32
	maxTokens *uint32
	n         int
	stream    bool
	seed      *int64
	stopIDs   []uint32
	minTokens int
	ignoreEOS bool
	rank      *int32
	// pd holds the request's transfer fields (nil: none).
	pd *pdLeg
}

// genOut is one message's worth of output for one sample index.
type genOut struct {
	index  int
	delta  []uint32 // tokens since the previous genOut of this index
	all    []uint32 // every token so far
	info   Info
	finish string // set on the last genOut of the index
	// kv is a NIXL prefill's hand-off (GenerateComplete field 12), set on index 0's last
	// genOut when its blocks were leased.
	kv json.RawMessage
}

// sendFrames sends one genOut as the engines' Generate streams do: a chunk of the new tokens
// while the index runs; at its end, when streaming, a last chunk of the final delta (if any)
// and then complete with output_ids = that delta, otherwise complete with every token.
// chunk and complete build and send the engine's own messages.
func sendFrames(o *genOut, stream bool, chunk, complete func(toks []uint32) error) error {
	if o.finish == "" {
		return chunk(o.delta)
	}
	out := o.all
	if stream {
		if len(o.delta) > 0 {
			if err := chunk(o.delta); err != nil {
				return err
			}
		}
		out = o.delta
	}
	return complete(out)
}

func (s *GRPCServer) healthy() bool {
	for _, e := range s.ranks {
		e.mu.Lock()
		stopped := e.stopped
		e.mu.Unlock()
		if stopped {
			return false
		}
	}
	return true
}

// admit checks a request against the engine (the rank it names, else one picked) and returns
// that engine and the request's max_tokens (default: what is left of the model length).
func (s *GRPCServer) admit(g genReq) (*Engine, int, error) {
	if len(g.ids) == 0 {
		return nil, 0, status.Error(codes.InvalidArgument, "input_ids must not be empty")
	}
	eng := s.ranks.Pick()
	if g.rank != nil {
		if *g.rank < 0 || int(*g.rank) >= len(s.ranks) {
			return nil, 0, status.Errorf(codes.InvalidArgument, "data_parallel_rank %d out of range [0, %d)", *g.rank, len(s.ranks))
		}
		eng = s.ranks[*g.rank]
	}
	cfg := eng.Config()
	maxTokens := cfg.MaxModelLen - len(g.ids)
	if g.maxTokens != nil {
		maxTokens = int(*g.maxTokens)
	}
	vocab := uint32(cfg.VocabSize)
	for _, id := range g.ids {
		if id >= vocab {
			return nil, 0, status.Errorf(codes.InvalidArgument, "token id %d is out of vocabulary", id)
		}
	}
	return eng, maxTokens, nil
}

// generate runs g on one rank and calls emit for every chunk (streaming) and every sample's
// end. It aborts the engine requests when ctx ends or emit fails. On a server with a pair
// role it runs the role around the generation (pdState.start, handoff and end).
func (s *GRPCServer) generate(ctx context.Context, g genReq, emit func(*genOut) error) (err error) {
	eng, maxTokens, err := s.admit(g)
	if err != nil {
		return err
	}
	job, remote, leaseID, err := s.pdStart(ctx, eng, &g, &maxTokens)
	if err != nil {
		return err
	}
	n := max(g.n, 1)
	ready := make(chan struct{}, 1)
	reqs := make([]*Request, 0, n)
	streams := make([]*Stream, 0, n)
	outs := make([]genOut, n)
	if job != nil {
		defer func() { s.pd.end(job, leaseID, eng, reqs, outs[0].finish, err != nil) }()
	}
	abortAll := func() {
		for _, r := range reqs {
			eng.Abort(r)
		}
	}
	for k := range n {
		r := &Request{ID: fmt.Sprintf("%s-%d", g.id, k), Prompt: g.ids, MaxTokens: maxTokens, StopTokenIDs: g.stopIDs,
			MinTokens: g.minTokens, IgnoreEOS: g.ignoreEOS, Seed: seedFor(g.ids, g.seed, k), Script: s.cfg.Replies.Next(),
			HoldKV: job != nil && job.holdKV, RemoteTokens: remote}
		st, err := eng.Submit(r, g.stream, ready)
		if err != nil {
			abortAll()
			if errors.Is(err, ErrStopped) {
				return status.Error(codes.Unavailable, err.Error())
			}
			return status.Error(codes.InvalidArgument, err.Error())
		}
		reqs, streams = append(reqs, r), append(streams, st)
	}
	if g.id != "" {
		s.mu.Lock()
		s.inflight[g.id] = &inflightGen{eng: eng, reqs: reqs}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, g.id)
			s.mu.Unlock()
		}()
	}
	finished := make([]bool, n)
	left := n
	var buf []uint32
	for left > 0 {
		for i, st := range streams {
			if finished[i] {
				continue
			}
			var info Info
			var done bool
			buf, info, done = st.Take(buf[:0])
			o := &outs[i]
			o.index, o.info = i, info
			start := len(o.all)
			o.all = append(o.all, buf...)
			o.delta = o.all[start:]
			if done {
				o.finish = info.FinishReason
				finished[i] = true
				left--
				if i == 0 && job != nil && job.holdKV {
					o.kv = s.pd.handoff(job, leaseID, eng, reqs, o.finish)
				}
			} else if !g.stream || len(o.delta) == 0 {
				continue
			}
			if err := emit(o); err != nil {
				abortAll()
				return err
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			abortAll()
			return status.FromContextError(ctx.Err()).Err()
		case <-ready:
		}
	}
	if s.cfg.OnCompleted != nil {
		s.cfg.OnCompleted()
	}
	return nil
}

// pdStart runs the pair role of a server that has one before g's generation on eng
// (pdState.start): it returns the job, the prompt tokens whose KV arrived and the lease id
// of a NIXL hand-off, and makes an SGLang prefill a one-token request.
func (s *GRPCServer) pdStart(ctx context.Context, eng *Engine, g *genReq, maxTokens *int) (*pdJob, int, string, error) {
	if s.pd == nil {
		return nil, 0, g.id, nil
	}
	job, remote, perr := s.pd.start(ctx, eng, g.pd, g.ids)
	if perr != nil {
		return nil, 0, "", grpcStatusOf(perr)
	}
	if job != nil && job.oneToken {
		one := uint32(1)
		g.maxTokens, g.minTokens, g.n, *maxTokens = &one, 0, 1, 1
	}
	// vLLM's internal request id is the external one with a random suffix (wire/pd.md §2.5):
	// unique leases even when a client reuses request ids.
	return job, remote, s.pd.leaseID(g.id), nil
}

// abort aborts the engine requests of Generate call id; false when unknown.
func (s *GRPCServer) abort(id string) bool {
	s.mu.Lock()
	g := s.inflight[id]
	s.mu.Unlock()
	if g == nil {
		return false
	}
	for _, r := range g.reqs {
		g.eng.Abort(r)
	}
	return true
}

// flush resets every rank's prefix cache (FlushCache); it fails while requests run.
func (s *GRPCServer) flush() (bool, string) {
	for _, e := range s.ranks {
		if !e.ResetPrefixCache() {
			return false, fmt.Sprintf("rank %d: cannot flush the cache while requests are running", e.Rank())
		}
	}
	return true, "cache flushed"
}

// loadOf describes one rank's load.
type loadOf struct {
	rank, running, waiting, usedTokens, maxTokens, maxRunning int
	usage                                                     float64
}

func (s *GRPCServer) loads(filter *int32) []loadOf {
	var out []loadOf
	for _, e := range s.ranks {
		if filter != nil && int(*filter) != e.Rank() {
			continue
		}
		cfg := e.Config()
		u := e.Usage()
		out = append(out, loadOf{
			rank: e.Rank(), running: e.NumRunning(), waiting: e.NumWaiting(),
			usedTokens: int(u * float64(cfg.NumBlocks*cfg.BlockSize)), maxTokens: cfg.NumBlocks * cfg.BlockSize,
			maxRunning: cfg.MaxRunning, usage: u,
		})
	}
	return out
}

func (s *GRPCServer) eosIDs() []int32 {
	var out []int32
	for _, id := range s.ranks[0].Config().EOSTokenIDs {
		out = append(out, int32(id))
	}
	return out
}

// matchedStopToken returns the stop token id that ended o, if one did.
func matchedStopToken(o *genOut, stopIDs []uint32) (uint32, bool) {
	if o.finish != "stop" || len(o.all) == 0 {
		return 0, false
	}
	last := o.all[len(o.all)-1]
	return last, slices.Contains(stopIDs, last)
}
